"""The interface every training algorithm implements. An algorithm is data plus math: it never starts a
process, opens a queue or writes a file. The learner core (appo/learning/learner.py) owns everything around
it: the version counter, weight publishing, checkpoints, the NaN guard, PBT operations and stats.

Its traits that code outside appo/algorithms/ acts on (the model kind it trains and acts with, the trajectory
fields it needs, how it consumes data, whether it acts episodically, a replay in Ray shards, command inputs, its
perf/ keys) are configuration: plain values in its entry of appo/config/algorithms/ (`Traits`), read as
`cfg.traits` without importing torch. The class provides the math:
- `update(batch, env_steps) -> stats`: one training iteration on one batch.
- `state_dict()` / `load_state_dict()`: what it needs in a checkpoint besides the model (optimizer state...).
- `replay_state()` / `load_replay_state()`: an off-policy algorithm's replay, saved by the core beside the
  checkpoints when the algorithm returns one (SAC's --save_replay), loaded on resume.
- `replay`: with its traits' `replay_shards` and a backend that keeps the replay elsewhere (--backend=ray,
  --num_replay_shards), the core sets it to the client the backend's factory builds; rollout actors fill the shards
  with `replay_rows(trajectories, model)`. SAC.
- `publish`: set by the core; an algorithm that does many updates per iteration (SAC) calls it to hand the
  actors its newest weights between them. The core publishes after every `update` anyway.
- its flags, defaults and PBT ranges: in its entry of appo/config/algorithms/.
- `ranks`, `train_model`: set by the core (`set_ranks`). With several learner ranks (--learner_world_size) the loss
  runs through `train_model` (DDP, which averages the ranks' gradients) and whatever spans the batch (counts,
  normalisers, means) is reduced through `ranks` (appo/learning/distributed.py), so that the ranks train as one
  learner on the whole batch; appo/algorithms/ppo/algorithm.py shows how. With one rank both are the identity.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from appo.algorithms.common.ranks import Ranks
from appo.config.cfg import Cfg
from appo.config.derive import Derived
from appo.utils.logging import log

MAX_NONFINITE_IN_A_ROW = 10  # updates with NaN/inf loss or gradients in a row before the run stops
FUSED_DEVICES = ("cpu", "cuda")  # where torch has Adam's fused kernel and the foreach gradient norm


def adam(params: Any, lr: float, device: str, betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8) -> Any:
    """Adam, fused where torch has the kernel: one pass over each parameter group instead of a loop of elementwise
    ops per tensor, about a tenth of the time on CPU (the Nature CNN's 1.7M parameters: 1 ms against 11 ms on one
    core, beside a forward and backward pass of a 256-frame batch of about 130 ms)."""
    return torch.optim.Adam(params, lr=lr, betas=betas, eps=eps, fused=torch.device(device).type in FUSED_DEVICES)


class NonFiniteGuard:
    """The one place a gradient step happens: backward, clip, and skip (and count) any step whose loss or
    gradient norm is NaN or inf; too many in a row end the run, leaving the last checkpoint (saved from
    finite weights) as it is."""

    def __init__(self, policy_id: int, max_in_a_row: int = MAX_NONFINITE_IN_A_ROW, ranks: Ranks | None = None) -> None:
        self.policy_id, self.max_in_a_row = policy_id, max_in_a_row
        # Several learner ranks skip a step together or not at all: a rank skipping alone would leave the
        # others waiting in the next gradient all-reduce (appo/learning/distributed.py).
        self.ranks = ranks if ranks is not None else Ranks()
        self.skipped = 0
        self.in_a_row = 0

    def step(
        self, loss: Tensor, params: list[nn.Parameter], optimizer: torch.optim.Optimizer, max_norm: float
    ) -> float:
        """One optimizer step on `loss`; returns the gradient norm, or NaN when the step was skipped."""
        optimizer.zero_grad(set_to_none=True)
        with self.ranks.timed("backward"):
            loss.backward()
        foreach = bool(params) and all(p.device.type in FUSED_DEVICES for p in params)  # 20 ms -> 4 ms, that CNN
        grad_norm = torch.nn.utils.clip_grad_norm_(params, max_norm if max_norm > 0 else float("inf"), foreach=foreach)
        if not self.ranks.all_ok(bool(torch.isfinite(loss) and torch.isfinite(grad_norm))):
            self._skip(loss, grad_norm)
            optimizer.zero_grad(set_to_none=True)
            return float("nan")
        self.in_a_row = 0
        optimizer.step()
        return float(grad_norm)

    def _skip(self, loss: Tensor, grad_norm: Tensor) -> None:
        self.skipped += 1
        self.in_a_row += 1
        log.warning(
            "learner %d: skipped an update with loss %s, gradient norm %s (%d in a row)",
            self.policy_id,
            float(loss.detach()),
            float(grad_norm),
            self.in_a_row,
        )
        if self.in_a_row >= self.max_in_a_row:
            raise FloatingPointError(
                f"learner {self.policy_id}: {self.in_a_row} updates in a row with NaN/inf loss or gradients; "
                "stopping with the last good checkpoint (lower --learning_rate or check the env's rewards)"
            )


class Algorithm:
    """Subclass this, add it to appo/algorithms/registry.py and its configuration to appo/config/algorithms/, and
    `--algo=NAME` runs it."""

    def __init__(self, cfg: Cfg, derived: Derived, model: nn.Module, device: str, guard: NonFiniteGuard) -> None:
        self.cfg, self.derived, self.model, self.device, self.guard = cfg, derived, model, device, guard
        # The learner ranks of this policy (one by default) and the module the loss runs through: the model, or
        # its DistributedDataParallel wrapper on several ranks (set_ranks, called by the learner core).
        self.ranks = guard.ranks
        self.train_model: nn.Module = model
        self.publish: Callable[[], None] = lambda: None  # the core's: new weights to the actors now
        # The run's control arrays (appo/protocol/buffers.py allocate_control), set by the core: an algorithm that
        # steers the
        # actors (a reward-conditioned policy's commands) writes the control channel there. None in a unit test.
        self.control: dict[str, Tensor] | None = None
        # How much of the run's budget is used when the batch being trained was taken (appo/config/derive.py
        # budget_fraction: env steps, seconds or iterations, whichever is furthest); set by the learner before each
        # update, for schedules.
        self.budget_used = 0.0

    def set_ranks(self, ranks: Ranks) -> None:
        """Train together with the other ranks of `ranks` (after the checkpoint is loaded: DDP starts every rank
        from rank 0's weights)."""
        self.ranks = ranks
        self.train_model = ranks.wrap(self.model)

    def set_cfg(self, cfg: Cfg) -> None:
        """The cfg with this policy's current hyperparameters (PBT changes them between iterations)."""
        self.cfg = cfg

    def update(self, batch: dict[str, Tensor], env_steps: int) -> dict[str, float]:
        """One iteration on `batch` (each tensor [N, T(+1), ...] on the learner's device); returns mean stats."""
        raise NotImplementedError(f"{type(self).__name__} must implement update()")

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass

    def replay_state(self) -> dict[str, Any] | None:
        """State too large for every checkpoint (a replay), saved beside them when not None. None by default."""
        return None

    def load_replay_state(self, state: dict[str, Any]) -> None:
        pass
