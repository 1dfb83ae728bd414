"""`--algo=appo`: PPO's clipped surrogate on whole trajectories, with V-trace (Espeholt et al. 2018) or GAE
(Schulman et al. 2016) targets, and Adam. The math itself is the pure functions of appo/algorithms/common/returns.py and
appo/algorithms/common/losses.py; this class decides what to feed them: targets once per iteration (GAE) or per
minibatch under the current weights (V-trace, which corrects the policy lag), and minibatches of single steps
(feed-forward, GAE) or of whole trajectories (V-trace or a recurrent core). GAE's values come from a no-grad pass
over the batch before the updates, or, with one minibatch of whole trajectories per epoch, from the first loss
pass itself (the same weights, the same numbers: one forward pass fewer).

On several learner ranks (--learner_world_size) each rank holds a contiguous part of the batch's trajectories and
the update is still the one of the whole batch: the minibatches are drawn over the global batch (the same
shuffle on every rank: same seed, same random state) and each rank trains on its own trajectories' part of each;
the loss is the mean over the whole minibatch (each rank's mean weighted by its share, times G because DDP
averages the ranks' gradients); advantage normalisation and the running normalisers use the statistics of the
whole minibatch or batch (appo/learning/distributed.py). A rank with no sample in a minibatch still runs a
forward and backward pass, on a zero stand-in with weight 0, because every rank must join each gradient
all-reduce. With one rank every reduction is the identity and the arithmetic is the single learner's."""

from __future__ import annotations

from typing import Any, NamedTuple

import torch
from torch import Tensor, nn

from appo.algorithms.base import Algorithm, NonFiniteGuard, adam
from appo.algorithms.common.losses import bounds_loss, entropy_loss, policy_loss, value_loss
from appo.algorithms.common.lr_schedule import KlAdaptiveRate, log_std_bounds
from appo.algorithms.common.returns import batch_targets
from appo.algorithms.ppo.batch_passes import (
    before_updates,
    central_value_batch,
    only_steps,
    update_pixel_normalizers,
)
from appo.algorithms.ppo.diagnostics import after_probe, kl_sums, read_diagnostics, value_moments
from appo.config.cfg import Cfg
from appo.config.derive import Derived


class Part(NamedTuple):
    """This rank's share of a minibatch: `n` of its `n_global` steps (n = 0: a zero stand-in)."""

    n: int
    n_global: int


class PPO(Algorithm):
    def __init__(self, cfg: Cfg, derived: Derived, model: nn.Module, device: str, guard: NonFiniteGuard) -> None:
        super().__init__(cfg, derived, model, device, guard)
        betas = (cfg.adam_beta1, cfg.adam_beta2)
        self.optimizer = adam(model.parameters(), cfg.learning_rate, device, betas, cfg.adam_eps)
        # Centre and half-width of the action box, for the bounds loss (None: discrete or unbounded actions).
        self.box: tuple[Tensor, Tensor] | None = None
        bounds = getattr(model, "action_bounds", None)
        if bounds is not None:
            low, high = (torch.as_tensor(b, device=device) for b in bounds)
            self.box = ((high + low) / 2, ((high - low) / 2).clamp(min=1e-6))

        # --lr_schedule=kl_adaptive_*: the rate now, and the --learning_rate it started from (PBT may set another).
        self.adaptive = KlAdaptiveRate(cfg)

    def state_dict(self) -> dict[str, Any]:
        state = {"optimizer": self.optimizer.state_dict()}
        if self.cfg.lr_schedule.startswith("kl_adaptive"):  # the rate is state only when it adapts
            state["adaptive_lr"] = self.adaptive.state()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        if "adaptive_lr" in state:  # checkpoints before kl_adaptive_* have none: the rate starts from the flag
            self.adaptive.load(state["adaptive_lr"])

    # --- one iteration ------------------------------------------------------------------------------
    def update(self, b: dict[str, Tensor], env_steps: int) -> dict[str, float]:
        """num_epochs passes of minibatches_per_epoch minibatches over the batch."""
        cfg, model = self.cfg, self.model
        N, T = b["rewards"].shape
        offset, n_global = self.ranks.layout(N)  # where this rank's trajectories sit in the whole batch
        lr = self._set_learning_rate(env_steps)
        steps = b["valid"] > 0 if "valid" in b else None  # [N, T]: steps of agents in the game, learners' only
        if model.obs_normalizer is not None:
            self.ranks.update_normalizer(
                model.obs_normalizer, only_steps(model.normalizer_input(b["obs"][:, :T]), steps)
            )
        update_pixel_normalizers(model, self.ranks, b["obs"][:, :T], steps)
        central = "team_obs" in b  # a centralised value (--value_input): the actors computed no values
        b = central_value_batch(self.model, self.ranks, b, steps)
        is_per_step = not (cfg.with_vtrace or cfg.use_rnn)
        adv_all = ret_all = None
        # One minibatch of whole trajectories per epoch: the first loss pass sees the whole batch under the weights
        # before any step, so GAE's values come from it (as V-trace's do) rather than from a no-grad pass of their
        # own; Sample Factory's Doom and Atari settings (one epoch of one minibatch) then cost one forward pass.
        fused = not (cfg.with_vtrace or is_per_step) and self.derived.minibatches_per_epoch == 1
        fused = fused and cfg.kl_loss_coeff <= 0
        gae_pass = not (cfg.with_vtrace or fused)
        values, old_dist = before_updates(
            self.model, b, self.derived.recurrence, gae_pass or (central and not fused), cfg.kl_loss_coeff > 0
        )
        if gae_pass:
            # GAE: targets once per iteration, from the weights before this iteration's updates.
            adv_all, ret_all = self._targets(b, values, None)
            if model.returns_normalizer is not None:
                self.ranks.update_normalizer(model.returns_normalizer, only_steps(ret_all, steps))
        sums: dict[str, float] = {}
        count = 0
        probe: Tensor | None = None  # the first minibatch: where the KL is read before and after the update
        diagnostics: dict[str, float] = {}
        stopped = False  # --ppo_target_kl: the policy moved far enough from the behaviour policy
        for _ in range(cfg.num_epochs):
            if stopped:
                break
            epoch_kl: list[float] = []
            for idx, n_steps in self._minibatches(N, T, is_per_step, offset, n_global):
                loss, mb_stats, adv_all, ret_all = self._minibatch_loss(
                    b, idx, n_steps, adv_all, ret_all, old_dist, is_per_step, fused
                )
                kl_before = {"kl_before_sum": mb_stats.pop("kl_sum"), "kl_before_n": mb_stats.pop("kl_n")}
                if probe is None:  # the KL before the update, read off the loss pass that precedes the first step
                    probe, diagnostics = idx, kl_before
                    if adv_all is not None:
                        diagnostics |= value_moments(adv_all, ret_all)
                if count > 0 and self._kl_exceeded(mb_stats["kl"]):
                    stopped = True
                    break
                grad_norm = self.guard.step(loss, list(model.parameters()), self.optimizer, cfg.max_grad_norm)
                if grad_norm != grad_norm:  # NaN: the guard skipped this step
                    continue
                mb_stats["grad_norm"] = grad_norm
                for key, value in mb_stats.items():
                    sums[key] = sums.get(key, 0.0) + float(value)
                count += 1
                epoch_kl.append(mb_stats["kl"])
                lr = self._adapt_learning_rate(epoch_kl[-1:], "kl_adaptive_minibatch", lr)
            lr = self._adapt_learning_rate(epoch_kl, "kl_adaptive_epoch", lr)
        if probe is not None:
            probe = after_probe(probe, 1 if is_per_step else T)
            diagnostics |= kl_sums(self.model, b, probe, is_per_step, self.derived.recurrence, "kl_after")
        # Each rank's statistics are its parts of the global means; the gradient norm is every rank's already.
        sums = self.ranks.sum_stats(sums, same_on_every_rank=("grad_norm",))
        stats = {key: value / max(count, 1) for key, value in sums.items()}
        stats["learning_rate"] = lr
        stats["updates_done"] = count / (cfg.num_epochs * self.derived.minibatches_per_epoch)
        if probe is not None:
            stats |= read_diagnostics(self.ranks.sum_stats(diagnostics))
        return stats | self._std_bounds()

    def _std_bounds(self) -> dict[str, float]:
        """--std_floor's and --std_ceiling_final's clamp of a Gaussian policy's log-std, and the std after it."""
        log_std = self.model.log_std
        if log_std is None:
            return {}
        floor, ceiling = log_std_bounds(self.cfg, self.budget_used)
        if floor is not None or ceiling is not None:  # the same on every rank: the ranks' weights stay the same
            with torch.no_grad():
                log_std.clamp_(min=floor, max=ceiling)
        return {"std": float(log_std.detach().exp().mean())}

    def _set_learning_rate(self, env_steps: int) -> float:
        lr = self.cfg.learning_rate
        if self.cfg.lr_schedule == "linear_decay":  # to 0 at the end of whichever budget ends the run
            lr *= max(1.0 - self.budget_used, 0.0)
        elif self.cfg.lr_schedule.startswith("kl_adaptive"):
            lr = self.adaptive.rate(self.cfg)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        return lr

    def _kl_exceeded(self, kl: float) -> bool:
        """--ppo_target_kl's early stop (Spinning Up's, Stable-Baselines3's): this minibatch's approximate KL from
        the behaviour policy, before its step, over 1.5x the target; the whole minibatch's, so every rank agrees."""
        target = self.cfg.ppo_target_kl
        return target > 0 and self.ranks.sum_stats({"kl": kl})["kl"] > 1.5 * target

    def _adapt_learning_rate(self, kls: list[float], schedule: str, lr: float) -> float:
        """Under --lr_schedule=`schedule`, the next steps' rate from the mean approximate KL of the last minibatch
        or epoch: every rank's part of it summed (the minibatch's whole mean), so every rank moves its rate alike.
        Under another schedule the rate `lr` stays."""
        if self.cfg.lr_schedule != schedule:
            return lr
        kl = self.ranks.sum_stats({"kl": sum(kls) / max(len(kls), 1)})["kl"]
        if not kls:  # every step of the epoch skipped (non-finite): the rate stays
            return self.adaptive.lr
        lr = self.adaptive.update(kl, self.cfg, self.budget_used)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        return lr

    def _minibatches(self, N: int, T: int, is_per_step: bool, offset: int, n_global: int) -> list[tuple[Tensor, int]]:
        """Per minibatch: indices into this rank's N trajectories, as single steps of the flattened [N * T]
        shuffled over the whole batch, or whole trajectories when targets or memory need them (V-trace, RNN); and
        the minibatch's size in steps over all ranks. The shuffle is of the global batch of `n_global`
        trajectories (this rank's from `offset`), so a minibatch holds the same samples whatever the number of
        ranks, and each rank takes those of its own trajectories."""
        k = self.derived.minibatches_per_epoch
        steps_per_index = 1 if is_per_step else T
        chunks = torch.randperm(n_global * T if is_per_step else n_global, device=self.device).chunk(k)
        if not self.ranks.is_distributed:
            return [(idx, idx.numel() * steps_per_index) for idx in chunks]
        low, high = (offset * T, (offset + N) * T) if is_per_step else (offset, offset + N)
        return [(idx[(idx >= low) & (idx < high)] - low, idx.numel() * steps_per_index) for idx in chunks]

    # --- targets ------------------------------------------------------------------------------------
    def _targets(self, b: dict[str, Tensor], values_n: Tensor, log_rhos: Tensor | None) -> tuple[Tensor, Tensor]:
        """Advantages and value targets [N, T] (raw reward units) from normalised values_n [N, T + 1]."""
        return batch_targets(self.cfg, self.model.returns_normalizer, b, values_n, log_rhos)

    # --- losses -------------------------------------------------------------------------------------
    def _loss(
        self,
        log_probs: Tensor,
        old_log_probs: Tensor,
        entropy: Tensor,
        values: Tensor,
        old_values: Tensor,
        adv: Tensor,
        targets: Tensor,
        dist: Any,
        old_dist: Any,
        part: Part,
        valid: Tensor | None = None,
    ) -> tuple[Tensor, dict[str, float]]:
        """PPO's total loss; `dist`: the policy's distribution over these steps (its Gaussian means for the bounds
        loss), `old_dist` the same steps' before this iteration (for the KL loss; None without); `part`: this
        rank's share of the minibatch."""
        cfg, ranks = self.cfg, self.ranks
        weight = 1.0  # 0: a minibatch with no valid step (every agent of its rows out of its game) teaches nothing
        keep = None  # [steps] bool: the steps every term averages over (None: all of them)
        if valid is not None and not bool((valid > 0).any()):
            weight = 0.0
        elif valid is not None:  # multi-agent: steps out of the game teach nothing
            keep = valid.flatten() > 0
            log_probs, old_log_probs, entropy, values, old_values, adv, targets = (
                x.flatten()[keep] for x in (log_probs, old_log_probs, entropy, values, old_values, adv, targets)
            )
        if cfg.normalize_advantage and not ranks.is_distributed and adv.numel() > 1:
            adv = (adv - adv.mean()) / (adv.std() + 1e-8)
        elif cfg.normalize_advantage and ranks.is_distributed and part.n_global > 1:
            adv_mean, adv_std = ranks.mean_std(adv if part.n else adv[:0])  # over the whole minibatch
            adv = (adv - adv_mean) / (adv_std + 1e-8)
        rn = self.model.returns_normalizer
        targets_n = rn.normalize(targets) if rn is not None else targets
        p_loss, p_stats = policy_loss(log_probs, old_log_probs, adv, cfg.ppo_clip_ratio)
        v_loss = value_loss(values, old_values, targets_n, cfg.ppo_clip_value or None, cfg.value_huber_delta)
        e_loss = entropy_loss(entropy)
        terms = {"policy_loss": p_loss, "value_loss": v_loss, "entropy": -e_loss}
        terms |= {"kl": p_stats["approx_kl"], "clip_fraction": p_stats["clip_fraction"]}
        mean = _mean(dist)
        if cfg.bounds_loss_coeff > 0 and self.box is not None and mean is not None:
            terms["bounds_loss"] = bounds_loss(_kept(mean, keep), *self.box)
        if cfg.kl_loss_coeff > 0:
            # Sample Factory's fixed KL loss (Schulman et al. 2017's "KL penalty"): KL(current || before), which
            # pulls the policy back where a minibatch moved it far, also on steps whose ratio is clipped.
            terms["kl_loss"] = _kept(dist.kl(old_dist if old_dist is not None else dist.frozen()), keep).mean()
        # Each term is a mean over this rank's steps; weighted by its share it is this rank's part of the mean over
        # the whole minibatch (summed over the ranks by DDP for the gradient, by sum_stats for the statistics).
        share = part.n / part.n_global if ranks.is_distributed else 1.0
        entropy_coeff = cfg.exploration_loss_coeff  # to 0 at the end of the run's budget with linear_decay
        entropy_coeff *= max(1.0 - self.budget_used, 0.0) if cfg.exploration_schedule == "linear_decay" else 1.0
        loss = terms["policy_loss"] + cfg.value_loss_coeff * terms["value_loss"] - entropy_coeff * terms["entropy"]
        if "bounds_loss" in terms:
            loss = loss + cfg.bounds_loss_coeff * terms["bounds_loss"]
        if "kl_loss" in terms:
            loss = loss + cfg.kl_loss_coeff * terms["kl_loss"]
        if ranks.is_distributed:
            loss = loss * (share * ranks.world_size)  # times G: DDP averages the ranks' gradients
        stats = {key: value.item() * share for key, value in terms.items()}
        n = float(log_probs.numel()) if part.n and weight else 0.0  # the KL of the steps the loss averages over
        kl = {"kl_sum": float(p_stats["approx_kl"]) * n, "kl_n": n}
        return loss * weight, stats | kl  # kl_sum, kl_n: the KL before the step, summed (update() takes them out)

    def _minibatch_loss(
        self,
        b: dict[str, Tensor],
        idx: Tensor,
        n_steps: int,
        adv_all: Tensor | None,
        ret_all: Tensor | None,
        old_dist: Any,
        is_per_step: bool,
        fused: bool,
    ) -> tuple[Tensor, dict[str, float], Tensor | None, Tensor | None]:
        """The loss and statistics of the minibatch `idx`, and the whole batch's advantages and targets: those
        given, or with `fused` (GAE's values from the first loss pass) those this first pass computed."""
        if is_per_step:
            return (*self._per_step_loss(b, idx, adv_all, ret_all, n_steps, old_dist), adv_all, ret_all)
        gae = fused and adv_all is None
        loss, mb_stats, targets = self._trajectory_loss(b, idx, adv_all, ret_all, n_steps, old_dist, gae)
        if gae:  # the whole batch's targets, for the later epochs
            adv_all, ret_all = (b["rewards"].new_zeros(b["rewards"].shape) for _ in range(2))
            if targets is not None:
                adv_all[idx], ret_all[idx] = targets
        return loss, mb_stats, adv_all, ret_all

    def _per_step_loss(
        self, b: dict[str, Tensor], idx: Tensor, adv_all: Tensor, ret_all: Tensor, n_global: int, old_dist: Any
    ) -> tuple[Tensor, dict[str, float]]:
        """Minibatch of single steps (feed-forward model, GAE): idx indexes the flattened [N * T]."""
        part = Part(idx.numel(), n_global)
        old = old_dist.rows(idx) if old_dist is not None and part.n else None
        if part.n == 0:
            b, idx, adv_all, ret_all = _stand_in(b, adv_all, ret_all)
        T = b["rewards"].shape[1]
        n, t = idx // T, idx % T
        step = lambda key: b[key][n, t].unsqueeze(1)  # noqa: E731 - [n, 1, ...]: trajectories of one step
        team = step("team_obs") if "team_obs" in b else None
        out = self.train_model(step("obs"), step("actions"), step("rnn_states"), step("dones"), 1, team=team)
        return self._loss(
            out.log_probs[:, 0],
            b["log_probs"][n, t],
            out.entropy[:, 0],
            out.values[:, 0],
            b["values"][n, t],
            adv_all[n, t],
            ret_all[n, t],
            out.dist,
            old,
            part,
            b["valid"][n, t] if "valid" in b else None,
        )

    def _trajectory_loss(
        self,
        b: dict[str, Tensor],
        idx: Tensor,
        adv_all: Tensor | None,
        ret_all: Tensor | None,
        n_global: int,
        old_dist: Any,
        gae: bool = False,
    ) -> tuple[Tensor, dict[str, float], tuple[Tensor, Tensor] | None]:
        """Minibatch of whole trajectories (V-trace and/or RNN). Without `adv_all` its targets come from this pass's
        values: V-trace's, or GAE's with `gae`; they are returned (advantages, targets [n, T]) but for a stand-in."""
        T = b["rewards"].shape[1]
        part = Part(idx.numel() * T, n_global)
        old = None
        if old_dist is not None and part.n:  # the trajectories' steps in the flattened [N * T]
            old = old_dist.rows((idx.unsqueeze(1) * T + torch.arange(T, device=idx.device)).flatten())
        if part.n == 0:
            b, idx, adv_all, ret_all = _stand_in(b, adv_all, ret_all)
        obs, rnn = b["obs"][idx], b["rnn_states"][idx]
        team = b["team_obs"][idx] if "team_obs" in b else None
        out = self.train_model(
            obs[:, :T],
            b["actions"][idx],
            rnn[:, :T],
            b["dones"][idx],
            self.derived.recurrence,
            team=team[:, :T] if team is not None else None,
        )
        old_log_probs = b["log_probs"][idx]
        if gae and team is not None:  # a centralised value's old values: this first pass's (see update)
            b["values"][idx] = out.values.detach()
        if adv_all is None:
            sub = {k: b[k][idx] for k in ("rewards", "dones", "truncated")}
            with torch.no_grad():
                boot = self.model.value_of(obs[:, T], rnn[:, T], team=team[:, T] if team is not None else None)
            values_n = torch.cat([out.values.detach(), boot.unsqueeze(1)], dim=1)
            adv, targets = self._targets(sub, values_n, None if gae else out.log_probs.detach() - old_log_probs)
            if self.model.returns_normalizer is not None:
                steps = b["valid"][idx] > 0 if "valid" in b else None
                mine = only_steps(targets, steps) if part.n else targets[:0]
                self.ranks.update_normalizer(self.model.returns_normalizer, mine)
        else:
            adv, targets = adv_all[idx], ret_all[idx]
        old_values = b["values"][idx]
        valid = b["valid"][idx] if "valid" in b else None
        loss, stats = self._loss(
            out.log_probs, old_log_probs, out.entropy, out.values, old_values, adv, targets, out.dist, old, part, valid
        )
        return loss, stats, ((adv, targets) if part.n else None)


def _stand_in(
    b: dict[str, Tensor], adv_all: Tensor | None, ret_all: Tensor | None
) -> tuple[dict[str, Tensor], Tensor, Tensor | None, Tensor | None]:
    """One all-zero trajectory shaped like the batch's, with zero targets, and the index of it: what a rank with
    no sample in a minibatch trains on with weight 0, to join the ranks' gradient all-reduce."""
    zero = {key: value.new_zeros(1, *value.shape[1:]) for key, value in b.items()}
    targets = None if adv_all is None else zero["rewards"]
    return zero, torch.zeros(1, dtype=torch.int64, device=zero["rewards"].device), targets, targets


def _kept(x: Tensor, keep: Tensor | None) -> Tensor:
    """The rows [kept steps, k] of per-step values `x` (the minibatch's steps in order, k values each) at the steps
    in `keep` ([steps] bool; None: every step), so that a term averages over the same steps as the policy loss."""
    return x if keep is None else x.reshape(keep.numel(), -1)[keep]


def _mean(dist: Any) -> Tensor | None:
    """The Gaussian means [n, A] of a distribution over n steps; None for a categorical one."""
    return getattr(dist, "mean", None)
