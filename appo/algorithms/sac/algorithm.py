"""`--algo=sac`: soft actor-critic (Haarnoja et al. 2018, "Soft Actor-Critic Algorithms and Applications",
algorithm 1) on the engine's actor workers: twin Q-functions with Polyak-averaged targets, a tanh-squashed
Gaussian actor, and a temperature alpha tuned toward a target entropy. The model the learner core builds and
publishes is the actor (appo/models/squashed_gaussian.py); the critics, their targets, alpha, the optimizers and the
replay are this class's.

Data flow: the learner core hands over whole trajectories one at a time (`consumes = "replay"`: arrival order,
never dropped for policy lag); `update` appends them to the replay (appo/algorithms/sac/replay.py) and then does the
gradient updates they are owed: --updates_per_env_step per env step after --learning_starts. The replay ratio
is held from both sides: the learner trains only on what has arrived, and the actor workers pause while the
learner holds their slot groups (appo/learning/batcher.py). Every --publish_every_updates updates the actor's
weights go to the actor workers (`publish`, given by the core)."""

from __future__ import annotations

import copy
import time
from collections import deque
from typing import Any

import torch
from torch import Tensor, nn

from appo.algorithms.base import Algorithm, NonFiniteGuard, adam
from appo.algorithms.sac.replay import Replay, transitions
from appo.config.algorithms.sac import learning_starts_of, target_entropy_value
from appo.config.cfg import Cfg
from appo.config.derive import Derived
from appo.models.squashed_gaussian import SquashedGaussianActor, TwinQ, polyak_update
from appo.protocol.buffers import obs_dtype as stored_obs_dtype
from appo.protocol.buffers import torch_dtype
from appo.utils.logging import log

RATE_WINDOW = 10.0  # seconds over which updates per second are measured


def alpha_loss(log_alpha: Tensor, log_probs: Tensor, target_entropy: float) -> Tensor:
    """Temperature loss -log(alpha) (log pi(a|s) + target entropy), averaged: its gradient in log(alpha) is
    -(mean log-prob + target) = (entropy - target), so descent raises alpha while the policy's entropy is below
    the target and lowers it above (Haarnoja et al. 2018b, eq. 18, on log(alpha) as in their code)."""
    return -(log_alpha * (log_probs.detach() + target_entropy)).mean()


class SAC(Algorithm):
    def __init__(self, cfg: Cfg, derived: Derived, model: nn.Module, device: str, guard: NonFiniteGuard) -> None:
        super().__init__(cfg, derived, model, device, guard)
        self.actor: SquashedGaussianActor = model  # type: ignore[assignment]
        obs_space, action_space = model.spaces
        self.critic = TwinQ(cfg, obs_space, action_space).to(device)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        action_dims = len(self.actor.action_scale)
        self.target_entropy = target_entropy_value(cfg, action_dims)
        self.log_alpha = torch.tensor(float(cfg.initial_alpha), device=device).log().requires_grad_(True)
        betas = (cfg.adam_beta1, cfg.adam_beta2)
        optimizer = lambda params, lr: adam(params, lr, device, betas, cfg.adam_eps)  # noqa: E731
        self.actor_optimizer = optimizer(self.actor.parameters(), cfg.actor_lr)
        self.critic_optimizer = optimizer(self.critic.parameters(), cfg.critic_lr)
        self.alpha_optimizer = optimizer([self.log_alpha], cfg.alpha_lr)
        obs_dtype = torch_dtype(stored_obs_dtype(obs_space))  # uint8 frames stay uint8 in the replay
        self.replay = Replay(cfg.replay_size, tuple(obs_space.shape), action_dims, device, obs_dtype)
        self.updates = 0  # gradient updates done (each: critics, actor, alpha, targets)
        self.env_steps = 0  # transitions appended to the replay over the run
        self.rate: deque[tuple[float, int]] = deque()  # (time, updates) for updates per second

    @staticmethod
    def replay_rows(trajectories: dict[str, Tensor], actor: nn.Module) -> dict[str, Tensor]:
        """Trajectories [N, T(+1), ...] -> the replay's N * T transitions, actions in [-1, 1]: what the learner
        appends here, and what a rollout actor sends to a replay shard on Ray (appo/backends/ray/replay_shards.py)."""
        rows = transitions(trajectories)
        rows["actions"] = actor.to_unit(rows["actions"])
        return rows

    def set_cfg(self, cfg: Cfg) -> None:
        super().set_cfg(cfg)
        for optimizer, lr in (
            (self.actor_optimizer, cfg.actor_lr),
            (self.critic_optimizer, cfg.critic_lr),
            (self.alpha_optimizer, cfg.alpha_lr),
        ):
            for group in optimizer.param_groups:
                group["lr"] = lr

    # --- checkpoints --------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {
            "critic": self.critic.state_dict(),
            "critic_target": self.critic_target.state_dict(),
            "log_alpha": self.log_alpha.detach().clone(),
            "actor_optimizer": self.actor_optimizer.state_dict(),
            "critic_optimizer": self.critic_optimizer.state_dict(),
            "alpha_optimizer": self.alpha_optimizer.state_dict(),
            "sac_counters": {"updates": self.updates, "env_steps": self.env_steps},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.critic.load_state_dict(state["critic"])
        self.critic_target.load_state_dict(state["critic_target"])
        with torch.no_grad():
            self.log_alpha.copy_(state["log_alpha"])
        self.actor_optimizer.load_state_dict(state["actor_optimizer"])
        self.critic_optimizer.load_state_dict(state["critic_optimizer"])
        self.alpha_optimizer.load_state_dict(state["alpha_optimizer"])
        self.updates = int(state["sac_counters"]["updates"])
        self.env_steps = int(state["sac_counters"]["env_steps"])

    def replay_state(self) -> dict[str, Any] | None:
        """The replay, saved beside the checkpoints with --save_replay (too large for every checkpoint)."""
        return self.replay.state_dict() if self.cfg.save_replay else None

    def load_replay_state(self, state: dict[str, Any]) -> None:
        self.replay.load_state_dict(state)
        log.info("SAC: replay of %d transitions loaded (capacity %d)", self.replay.size, self.replay.capacity)

    # --- one iteration ------------------------------------------------------------------------------
    def update(self, batch: dict[str, Tensor], env_steps: int) -> dict[str, float]:
        """Append the batch's transitions to the replay, then do the updates owed so far. With replay shards
        (--backend=ray) the rollout actors have sent the transitions there: the batch only counts the env steps."""
        if getattr(self.replay, "fed_by_actors", False):
            self.env_steps += batch["rewards"].numel()
        else:
            rows = self.replay_rows(batch, self.actor)
            self.replay.add(rows)
            self.env_steps += len(rows["rewards"])
        owed = self.updates_owed()
        sums: dict[str, float] = {}
        counts: dict[str, int] = {}
        for _ in range(owed if self.replay.size >= self.cfg.batch_size else 0):
            step_stats = self.step(self.replay.sample(self.cfg.batch_size))
            if step_stats is None:  # a non-finite critic loss: the guard skipped it (and counted)
                continue
            for key, value in step_stats.items():
                sums[key] = sums.get(key, 0.0) + value
                counts[key] = counts.get(key, 0) + 1
            if self.updates % self.cfg.publish_every_updates == 0:
                self.publish()
        stats = {key: value / counts[key] for key, value in sums.items()}
        return stats | self._rates()

    def updates_owed(self) -> int:
        """Updates due for the env steps appended so far, less those done."""
        learning_steps = self.env_steps - learning_starts_of(self.cfg)
        return max(int(self.cfg.updates_per_env_step * learning_steps) - self.updates, 0)

    def _rates(self) -> dict[str, float]:
        now = time.monotonic()
        self.rate.append((now, self.updates))
        while len(self.rate) > 2 and now - self.rate[1][0] >= RATE_WINDOW:
            self.rate.popleft()
        then, updates_then = self.rate[0]
        stats = {"alpha": float(self.log_alpha.detach().exp()), "replay_size": float(self.replay.size)}
        stats["updates_per_env_step"] = self.updates / max(self.env_steps - learning_starts_of(self.cfg), 1)
        if now > then:
            stats["updates_per_sec"] = (self.updates - updates_then) / (now - then)
        return stats

    def step(self, b: dict[str, Tensor]) -> dict[str, float] | None:
        """One SAC update on a sampled minibatch: critics, actor, temperature, then the targets. None when the
        critic step was skipped (non-finite); an update otherwise, even when the actor's step was skipped: the
        critics moved, so their targets follow and the update counts (the temperature waits for a good actor)."""
        cfg, actor, critic = self.cfg, self.actor, self.critic
        alpha = self.log_alpha.detach().exp()
        # --- critics: soft Bellman target from the target critics, no bootstrap past a termination
        with torch.no_grad():
            next_a, next_log_prob = actor.sample(b["next_obs"])
            next_q = self.critic_target(b["next_obs"], next_a).min(dim=0).values - alpha * next_log_prob
            target = b["rewards"] + cfg.gamma * (1.0 - b["terminated"]) * next_q
        q = critic(b["obs"], b["actions"])
        q_loss = (q - target).square().mean(dim=1).sum()  # both critics' mean squared errors
        if self._bad(self.guard.step(q_loss, list(critic.parameters()), self.critic_optimizer, cfg.max_grad_norm)):
            return None
        # --- actor: maximise min Q - alpha log pi through the reparameterised action (critics held fixed)
        critic.requires_grad_(False)
        a, log_prob = actor.sample(b["obs"])
        actor_loss = (alpha * log_prob - critic(b["obs"], a).min(dim=0).values).mean()
        critic.requires_grad_(True)
        stats = {"q1": float(q[0].detach().mean()), "q_loss": float(q_loss.detach())}
        actor_step = self.guard.step(actor_loss, list(actor.parameters()), self.actor_optimizer, cfg.max_grad_norm)
        if not self._bad(actor_step):
            # --- temperature toward the target entropy
            a_loss = alpha_loss(self.log_alpha, log_prob, self.target_entropy)
            self.guard.step(a_loss, [self.log_alpha], self.alpha_optimizer, 0.0)
            stats |= {
                "actor_loss": float(actor_loss.detach()),
                "alpha_loss": float(a_loss.detach()),
                "entropy": float(-log_prob.detach().mean()),
            }
        polyak_update(list(self.critic_target.parameters()), list(critic.parameters()), cfg.tau)
        self.updates += 1
        actor.updates.fill_(self.updates)
        return stats

    @staticmethod
    def _bad(grad_norm: float) -> bool:
        return grad_norm != grad_norm  # NaN: the guard skipped the step
