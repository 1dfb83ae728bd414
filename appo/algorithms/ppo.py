"""`--algo=appo`: PPO's clipped surrogate on whole trajectories, with V-trace (Espeholt et al. 2018) or GAE
(Schulman et al. 2016) targets, and Adam. The math itself is the pure functions of appo/learning/returns.py and
appo/learning/losses.py; this class decides what to feed them: targets once per iteration (GAE) or per
minibatch under the current weights (V-trace, which corrects the policy lag), and minibatches of single steps
(feed-forward, GAE) or of whole trajectories (V-trace or a recurrent core)."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from appo.algorithms.base import Algorithm, NonFiniteGuard
from appo.cfg import Cfg, Derived
from appo.learning.losses import entropy_loss, policy_loss, value_loss
from appo.learning.returns import gae, vtrace


class PPO(Algorithm):
    model_kind = "actor_critic"
    consumes = "fresh"

    def __init__(self, cfg: Cfg, derived: Derived, model: nn.Module, device: str, guard: NonFiniteGuard) -> None:
        super().__init__(cfg, derived, model, device, guard)
        self.optimizer = torch.optim.Adam(
            model.parameters(), lr=cfg.learning_rate, betas=(cfg.adam_beta1, cfg.adam_beta2), eps=cfg.adam_eps
        )
        # Centre and half-width of the action box, for the bounds loss (None: discrete or unbounded actions).
        self.box: tuple[Tensor, Tensor] | None = None
        bounds = getattr(model, "action_bounds", None)
        if bounds is not None:
            low, high = (torch.as_tensor(b, device=device) for b in bounds)
            self.box = ((high + low) / 2, ((high - low) / 2).clamp(min=1e-6))

    def state_dict(self) -> dict[str, Any]:
        return {"optimizer": self.optimizer.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state["optimizer"])

    # --- one iteration ------------------------------------------------------------------------------
    def update(self, b: dict[str, Tensor], env_steps: int) -> dict[str, float]:
        """num_epochs passes of minibatches_per_epoch minibatches over the batch."""
        cfg, model = self.cfg, self.model
        N, T = b["rewards"].shape
        lr = self._set_learning_rate(env_steps)
        if model.obs_normalizer is not None:
            update_finite(model.obs_normalizer, b["obs"][:, :T])
        is_per_step = not (cfg.with_vtrace or cfg.use_rnn)
        adv_all = ret_all = None
        if not cfg.with_vtrace:
            # GAE: targets once per iteration, from the weights before this iteration's updates.
            adv_all, ret_all = self._targets(b, self._all_values(b), None)
            if model.returns_normalizer is not None:
                update_finite(model.returns_normalizer, ret_all)
        sums: dict[str, float] = {}
        count = 0
        for _ in range(cfg.num_epochs):
            for idx in self._minibatches(N, T, is_per_step):
                if is_per_step:
                    loss, mb_stats = self._per_step_loss(b, idx, adv_all, ret_all)
                else:
                    loss, mb_stats = self._trajectory_loss(b, idx, adv_all, ret_all)
                grad_norm = self.guard.step(loss, list(model.parameters()), self.optimizer, cfg.max_grad_norm)
                if grad_norm != grad_norm:  # NaN: the guard skipped this step
                    continue
                mb_stats["grad_norm"] = grad_norm
                for key, value in mb_stats.items():
                    sums[key] = sums.get(key, 0.0) + float(value)
                count += 1
        stats = {key: value / max(count, 1) for key, value in sums.items()}
        stats["learning_rate"] = lr
        return stats

    def _set_learning_rate(self, env_steps: int) -> float:
        lr = self.cfg.learning_rate
        if self.cfg.lr_schedule == "linear_decay":
            lr *= max(1.0 - env_steps / self.cfg.train_for_env_steps, 0.0)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        return lr

    def _minibatches(self, N: int, T: int, is_per_step: bool) -> list[Tensor]:
        """Indices per minibatch: single steps of the flattened [N * T] shuffled over the whole batch, or whole
        trajectories when targets or memory need them (V-trace, RNN)."""
        k = self.derived.minibatches_per_epoch
        return list(torch.randperm(N * T if is_per_step else N, device=self.device).chunk(k))

    # --- targets ------------------------------------------------------------------------------------
    def _targets(self, b: dict[str, Tensor], values_n: Tensor, log_rhos: Tensor | None) -> tuple[Tensor, Tensor]:
        """Advantages and value targets [N, T] (raw reward units) from normalised values_n [N, T + 1]."""
        cfg = self.cfg
        rn = self.model.returns_normalizer
        values = rn.denormalize(values_n) if rn is not None else values_n
        rewards = b["rewards"]
        if cfg.value_bootstrap:
            # A time-limit truncation is not a death: add the discounted value of the state instead of
            # zero. V(s_t) stands in for V(s_{t+1}) because the post-step observation was replaced by reset.
            rewards = rewards + cfg.gamma * values[:, :-1] * b["truncated"]
        discounts = cfg.gamma * (1.0 - b["dones"])
        tm = lambda x: x.transpose(0, 1)  # noqa: E731 - [N, T] -> time-major [T, N]
        if log_rhos is not None:
            vs, adv = vtrace(
                tm(log_rhos),
                tm(discounts),
                tm(rewards),
                tm(values[:, :-1]),
                values[:, -1],
                cfg.vtrace_rho,
                cfg.vtrace_c,
            )
            return tm(adv), tm(vs)
        adv, returns = gae(tm(discounts), tm(rewards), tm(values[:, :-1]), values[:, -1], cfg.gae_lambda)
        return tm(adv), tm(returns)

    def _all_values(self, b: dict[str, Tensor]) -> Tensor:
        """Normalised values [N, T + 1] of every trajectory under the current weights, no grad."""
        T = b["rewards"].shape[1]
        with torch.no_grad():
            values = self.model.values(b["obs"][:, :T], b["rnn_states"][:, :T], b["dones"], self.derived.recurrence)
            boot = self.model.value_of(b["obs"][:, T], b["rnn_states"][:, T])
        return torch.cat([values, boot.unsqueeze(1)], dim=1)

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
        mean: Tensor | None = None,
    ) -> tuple[Tensor, dict[str, float]]:
        """PPO's total loss; `mean`: the Gaussian means [n, A] of these steps, for the bounds loss."""
        cfg = self.cfg
        if cfg.normalize_advantage and adv.numel() > 1:
            adv = (adv - adv.mean()) / (adv.std() + 1e-8)
        rn = self.model.returns_normalizer
        targets_n = rn.normalize(targets) if rn is not None else targets
        p_loss, p_stats = policy_loss(log_probs, old_log_probs, adv, cfg.ppo_clip_ratio)
        v_loss = value_loss(values, old_values, targets_n, cfg.ppo_clip_value or None)
        e_loss = entropy_loss(entropy)
        loss = p_loss + cfg.value_loss_coeff * v_loss + cfg.exploration_loss_coeff * e_loss
        stats = {"policy_loss": p_loss.item(), "value_loss": v_loss.item(), "entropy": -e_loss.item()}
        if cfg.bounds_loss_coeff > 0 and self.box is not None and mean is not None:
            b_loss = bounds_loss(mean, *self.box)
            loss = loss + cfg.bounds_loss_coeff * b_loss
            stats["bounds_loss"] = b_loss.item()
        stats |= {"kl": p_stats["approx_kl"].item(), "clip_fraction": p_stats["clip_fraction"].item()}
        return loss, stats

    def _per_step_loss(
        self, b: dict[str, Tensor], idx: Tensor, adv_all: Tensor, ret_all: Tensor
    ) -> tuple[Tensor, dict[str, float]]:
        """Minibatch of single steps (feed-forward model, GAE): idx indexes the flattened [N * T]."""
        T = b["rewards"].shape[1]
        n, t = idx // T, idx % T
        step = lambda key: b[key][n, t].unsqueeze(1)  # noqa: E731 - [n, 1, ...]: trajectories of one step
        out = self.model(step("obs"), step("actions"), step("rnn_states"), step("dones"), 1)
        return self._loss(
            out.log_probs[:, 0],
            b["log_probs"][n, t],
            out.entropy[:, 0],
            out.values[:, 0],
            b["values"][n, t],
            adv_all[n, t],
            ret_all[n, t],
            _mean(out.dist),
        )

    def _trajectory_loss(
        self, b: dict[str, Tensor], idx: Tensor, adv_all: Tensor | None, ret_all: Tensor | None
    ) -> tuple[Tensor, dict[str, float]]:
        """Minibatch of whole trajectories (V-trace and/or RNN)."""
        T = b["rewards"].shape[1]
        obs, rnn = b["obs"][idx], b["rnn_states"][idx]
        out = self.model(obs[:, :T], b["actions"][idx], rnn[:, :T], b["dones"][idx], self.derived.recurrence)
        old_log_probs = b["log_probs"][idx]
        if adv_all is None:
            sub = {k: b[k][idx] for k in ("rewards", "dones", "truncated")}
            with torch.no_grad():
                boot = self.model.value_of(obs[:, T], rnn[:, T])
            values_n = torch.cat([out.values.detach(), boot.unsqueeze(1)], dim=1)
            adv, targets = self._targets(sub, values_n, out.log_probs.detach() - old_log_probs)
            if self.model.returns_normalizer is not None:
                update_finite(self.model.returns_normalizer, targets)
        else:
            adv, targets = adv_all[idx], ret_all[idx]
        old_values = b["values"][idx]
        return self._loss(
            out.log_probs, old_log_probs, out.entropy, out.values, old_values, adv, targets, _mean(out.dist)
        )


def _mean(dist: Any) -> Tensor | None:
    """The Gaussian means [n, A] of a distribution over n steps; None for a categorical one."""
    return getattr(dist, "mean", None)


def bounds_loss(mean: Tensor, centre: Tensor, half_width: Tensor) -> Tensor:
    """Mean over steps of the squared excess of each Gaussian mean beyond the action box, in half-widths:
    0 inside the box. The env sees clipped actions, so a mean outside the box gets no gradient from the
    returns (every sample near it clips to the same action) and drifts; navigation2d, whose reward has no action
    cost, was seen to walk away from its goals for good that way (rl_games' bounds_loss plays the same role)."""
    excess = ((mean - centre).abs() - half_width).clamp(min=0.0) / half_width
    return excess.pow(2).sum(-1).mean()


def update_finite(normalizer: Any, x: Tensor) -> None:
    """Running statistics take only finite data: one NaN would poison them (and every later value) for good."""
    if bool(torch.isfinite(x).all()):
        normalizer.update(x)
