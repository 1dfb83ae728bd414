"""The KL-adaptive learning rate of --lr_schedule=kl_adaptive_minibatch / kl_adaptive_epoch (the rule of rl_games'
adaptive scheduler and Sample Factory's kl_adaptive_* schedules): after each minibatch (or epoch) the rate is divided
by 1.5 when the policy moved more than twice the KL target (--lr_schedule_kl_threshold) away from the one that
collected the batch, multiplied by 1.5 when it moved less than half of it, and kept within [--lr_adaptive_min,
--lr_adaptive_max]. With --lr_schedule_kl_threshold_final > 0 the target itself goes linearly from the threshold to
that value over the run's budget, so the rate falls toward the end of a run as a linear decay's does.
The rate is part of the learner's state: a resumed run goes on from the rate it had. It starts
from --learning_rate, and starts again from it when PBT sets another.
Also on the budget's clock: --std_ceiling_final's ceiling on a Gaussian policy's log-std (`log_std_ceiling`); beside it
the fixed --std_floor (`log_std_bounds` gives both)."""

from __future__ import annotations

import math
from typing import Any

FACTOR = 1.5


class KlAdaptiveRate:
    def __init__(self, cfg: Any) -> None:
        self.lr = float(cfg.learning_rate)
        self.start = float(cfg.learning_rate)  # the --learning_rate this rate was started from

    def rate(self, cfg: Any) -> float:
        """The rate now; a new --learning_rate (PBT's) restarts it."""
        if float(cfg.learning_rate) != self.start:
            self.lr = self.start = float(cfg.learning_rate)
        return self.lr

    def update(self, kl: float, cfg: Any, budget_used: float = 0.0) -> float:
        """The next steps' rate after a minibatch or epoch whose mean approximate KL is `kl`, with `budget_used` of
        the run's budget spent (0 to 1)."""
        target = kl_target(cfg, budget_used)
        if kl > 2.0 * target:
            self.lr = max(self.lr / FACTOR, cfg.lr_adaptive_min)
        elif kl < 0.5 * target:
            self.lr = min(self.lr * FACTOR, cfg.lr_adaptive_max)
        return self.lr

    def state(self) -> dict[str, float]:
        return {"lr": self.lr, "start": self.start}

    def load(self, state: dict[str, float]) -> None:
        self.lr, self.start = float(state["lr"]), float(state["start"])


def kl_target(cfg: Any, budget_used: float) -> float:
    """The KL target with `budget_used` of the run's budget spent: --lr_schedule_kl_threshold, or where
    --lr_schedule_kl_threshold_final is set, the straight line from it to that final value."""
    start, final = cfg.lr_schedule_kl_threshold, cfg.lr_schedule_kl_threshold_final
    if final <= 0:
        return start
    return start + (final - start) * min(max(budget_used, 0.0), 1.0)


def log_std_ceiling(cfg: Any, budget_used: float) -> float | None:
    """The highest log-std a Gaussian policy may have with `budget_used` of the run's budget spent: the straight
    line from --initial_log_std to log(--std_ceiling_final); None where that flag is 0 (no ceiling)."""
    final = cfg.std_ceiling_final
    if final <= 0:
        return None
    start = cfg.initial_log_std
    return start + (math.log(final) - start) * min(max(budget_used, 0.0), 1.0)


def log_std_bounds(cfg: Any, budget_used: float) -> tuple[float | None, float | None]:
    """(lowest, highest) log-std a Gaussian policy may have with `budget_used` of the budget spent: log(--std_floor)
    and `log_std_ceiling`, each None where its flag is 0."""
    floor = math.log(cfg.std_floor) if cfg.std_floor > 0 else None
    return floor, log_std_ceiling(cfg, budget_used)
