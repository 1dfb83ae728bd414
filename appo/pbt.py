"""Population-based training (PBT): the pure decision logic, no processes and no torch.

Rules (after Sample Factory's PBT):

- Every policy of the population starts from the cfg's hyperparameters; diversity comes from mutation.
- A policy is *due* every `pbt_period_env_steps` of its own env steps, but decisions are only taken once it has
  reached `pbt_start_mutation` env steps (boundaries before that pass silently).
- When due, only policies with an objective (not None, not NaN) take part; with fewer than two, nothing happens.
  They are ranked best first; k = max(1, ceil(pbt_replace_fraction * participants)), cut to participants // 2
  when the best k and the worst k would overlap.
- One of the best k is left alone. One of the worst k copies the weights and the (mutated) hyperparameters of a
  random member of the best k, provided the source is better by more than `pbt_replace_reward_gap_absolute`
  and by more than `pbt_replace_reward_gap` relative to |source objective|. Anyone else only mutates its own
  hyperparameters.
- Mutation: each hyperparameter independently with probability `pbt_mutation_rate` is multiplied or divided
  (probability 1/2 each) by a factor drawn uniformly from [pbt_perturb_min, pbt_perturb_max]; discounts
  (gamma, gae_lambda) are perturbed on 1 - value. Results are clamped to the HPARAMS range. A "scale" value of
  exactly 0 (a disabled or deliberately crippled term) stays 0.
"""

from __future__ import annotations

import json
import math
import random
import time
from typing import Any, NamedTuple

HPARAMS: dict[str, tuple[float, float, str]] = {
    "learning_rate": (1e-6, 1e-2, "scale"),
    "exploration_loss_coeff": (1e-5, 0.1, "scale"),
    "ppo_clip_ratio": (0.02, 0.5, "scale"),
    "ppo_clip_value": (0.05, 10.0, "scale"),
    "value_loss_coeff": (0.05, 5.0, "scale"),
    "max_grad_norm": (0.1, 20.0, "scale"),
    "gamma": (0.9, 0.9999, "discount"),
    "gae_lambda": (0.8, 0.999, "discount"),
}

RNG_SEED_OFFSET = 7919


def initial_hparams(cfg: Any) -> dict[str, float]:
    """The cfg's values of the mutable hyperparameters."""
    return {key: float(getattr(cfg, key)) for key in HPARAMS}


def _perturb(key: str, value: float, factor: float, up: bool) -> float:
    lowest, highest, kind = HPARAMS[key]
    if kind == "scale":
        if value == 0.0:
            return 0.0
        new = value * factor if up else value / factor
    else:
        new = 1.0 - (1.0 - value) * factor if up else 1.0 - (1.0 - value) / factor
    return min(max(new, lowest), highest)


def mutate(
    hparams: dict[str, float], rng: random.Random, rate: float, perturb_min: float, perturb_max: float
) -> dict[str, float]:
    """A new dict: each HPARAMS key perturbed with probability `rate`; other keys are copied unchanged."""
    new = dict(hparams)
    for key, value in hparams.items():
        if key not in HPARAMS or rng.random() >= rate:
            continue
        factor = rng.uniform(perturb_min, perturb_max)
        new[key] = _perturb(key, value, factor, up=rng.random() < 0.5)
    return new


class Event(NamedTuple):
    """One PBT decision, serialisable to one JSON line."""

    kind: str  # "replace" or "mutate"
    target: int  # policy whose weights and/or hyperparameters change
    source: int | None  # "replace": the better policy whose weights + hparams are copied, else None
    env_steps: int  # target's env steps at the decision
    objectives: list[float | None]  # every policy's objective at the decision
    old_hparams: dict[str, float]
    new_hparams: dict[str, float]

    def to_json(self) -> str:
        return json.dumps({**self._asdict(), "time": time.time()})


def _has_objective(objective: float | None) -> bool:
    return objective is not None and not math.isnan(objective)


def _ranked(objectives: list[float | None]) -> list[int]:
    """Policies with an objective, best first; ties go to the lower id."""
    taking_part = [p for p, obj in enumerate(objectives) if _has_objective(obj)]
    return sorted(taking_part, key=lambda p: (-objectives[p], p))  # type: ignore[operator]


def _set_size(cfg: Any, participants: int) -> int:
    k = max(1, math.ceil(cfg.pbt_replace_fraction * participants))
    return participants // 2 if k * 2 > participants else k


class Population:
    """Hyperparameters of every policy, period boundaries and the seeded random decisions between them."""

    def __init__(self, cfg: Any, hparams: list[dict[str, float]] | None = None, env_steps: list[int] | None = None):
        self.cfg = cfg
        n = cfg.num_policies
        self.hparams: list[dict[str, float]] = (
            [dict(h) for h in hparams] if hparams is not None else [initial_hparams(cfg) for _ in range(n)]
        )
        steps = list(env_steps) if env_steps is not None else [0] * n
        if len(self.hparams) != n or len(steps) != n:
            raise ValueError(f"PBT: expected {n} policies, got {len(self.hparams)} hparams, {len(steps)} env_steps")
        self.rng = random.Random(cfg.seed + RNG_SEED_OFFSET)
        self.period = int(cfg.pbt_period_env_steps)
        self.next_period = [self._boundary_after(s) for s in steps]

    def _boundary_after(self, env_steps: int) -> int:
        return (env_steps // self.period + 1) * self.period if self.period > 0 else 0

    def _mutate(self, hparams: dict[str, float]) -> dict[str, float]:
        cfg = self.cfg
        return mutate(hparams, self.rng, cfg.pbt_mutation_rate, cfg.pbt_perturb_min, cfg.pbt_perturb_max)

    def set_hparams(self, policy: int, hparams: dict[str, float]) -> None:
        self.hparams[policy] = dict(hparams)

    def due(self, policy: int, env_steps: int) -> bool:
        """True when `policy` crossed its next period boundary at or after pbt_start_mutation env steps."""
        if self.period <= 0 or env_steps < self.next_period[policy]:
            return False
        self.next_period[policy] = self._boundary_after(env_steps)
        return env_steps >= self.cfg.pbt_start_mutation

    def _gap_ok(self, source_obj: float, target_obj: float) -> bool:
        gap = source_obj - target_obj
        relative = abs(gap) / (abs(source_obj) + 1e-8)
        return gap > self.cfg.pbt_replace_reward_gap_absolute and relative > self.cfg.pbt_replace_reward_gap

    def decide(self, policy: int, env_steps: int, objectives: list[float | None]) -> Event | None:
        """The decision for a due `policy`; the returned event's new_hparams are already stored."""
        ranked = _ranked(objectives)
        if policy not in ranked or len(ranked) < 2:
            return None
        k = _set_size(self.cfg, len(ranked))
        if policy in ranked[:k]:
            return None
        old = dict(self.hparams[policy])
        kind, source = "mutate", None
        if policy in ranked[-k:]:
            candidate = self.rng.choice(ranked[:k])
            if self._gap_ok(objectives[candidate], objectives[policy]):  # type: ignore[arg-type]
                kind, source = "replace", candidate
        new = self._mutate(self.hparams[source if source is not None else policy])
        if kind == "mutate" and new == old:
            return None
        self.hparams[policy] = new
        return Event(kind, policy, source, env_steps, list(objectives), old, dict(new))

    def best_policy(self, objectives: list[float | None]) -> int | None:
        """Policy with the highest objective (ties: lowest id); None when nobody has one."""
        ranked = _ranked(objectives)
        return ranked[0] if ranked else None
