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
  and by more than `pbt_replace_reward_gap` relative to |source objective| ("more than" beyond float rounding:
  win rates 0.54 and 0.53 differ by exactly 0.01, not by more). Anyone else only mutates its own hyperparameters.
- Mutation: each hyperparameter independently with probability `pbt_mutation_rate` is multiplied or divided
  (probability 1/2 each) by a factor drawn uniformly from [pbt_perturb_min, pbt_perturb_max]; discounts
  (gamma, gae_lambda) are perturbed on 1 - value. Results are clamped to the range the run's algorithm declares
  (appo/algorithms). A "scale" value of exactly 0 (a disabled or deliberately crippled term) stays 0.
"""

from __future__ import annotations

import json
import math
import random
import time
from typing import Any, NamedTuple

Ranges = dict[str, tuple[float, float, str]]  # hyperparameter -> (lowest, highest, "scale" | "discount")


def hparam_ranges(cfg: Any) -> Ranges:
    """What PBT may perturb: the ranges the run's algorithm declares (appo/config/algorithms/)."""
    from appo.config.algorithms import algorithm_config

    return algorithm_config(cfg.algo).pbt_ranges


RNG_SEED_OFFSET = 7919
GAP_ROUNDING = 1e-9  # an objective gap counts as "more than" a threshold only beyond float rounding
PBT_OBJECTIVES = ("train_return", "eval_return", "true_objective")  # --pbt_target_objective's values
STATE_VERSION = 1  # of Population.state_dict(); a file of another version is not loaded


def initial_hparams(cfg: Any) -> dict[str, float]:
    """The cfg's values of the mutable hyperparameters."""
    return {key: float(getattr(cfg, key)) for key in hparam_ranges(cfg)}


def _perturb(key: str, value: float, factor: float, up: bool, ranges: Ranges) -> float:
    lowest, highest, kind = ranges[key]
    if kind == "scale":
        if value == 0.0:
            return 0.0
        new = value * factor if up else value / factor
    else:
        new = 1.0 - (1.0 - value) * factor if up else 1.0 - (1.0 - value) / factor
    return min(max(new, lowest), highest)


def mutate(
    hparams: dict[str, float], rng: random.Random, rate: float, perturb_min: float, perturb_max: float, ranges: Ranges
) -> dict[str, float]:
    """A new dict: each key of `ranges` perturbed with probability `rate`; other keys are copied unchanged."""
    new = dict(hparams)
    for key, value in hparams.items():
        if key not in ranges or rng.random() >= rate:
            continue
        factor = rng.uniform(perturb_min, perturb_max)
        new[key] = _perturb(key, value, factor, rng.random() < 0.5, ranges)
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


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


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
        rate, low, high = cfg.pbt_mutation_rate, cfg.pbt_perturb_min, cfg.pbt_perturb_max
        return mutate(hparams, self.rng, rate, low, high, hparam_ranges(cfg))

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
        absolute_ok = gap > self.cfg.pbt_replace_reward_gap_absolute + GAP_ROUNDING
        return absolute_ok and relative > self.cfg.pbt_replace_reward_gap + GAP_ROUNDING

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

    def state_dict(self) -> dict[str, Any]:
        """Everything a resumed run needs to go on with the same schedule, JSON-safe: hyperparameters, the next
        period boundaries and the rng's state (random.getstate()'s tuples as lists)."""
        rng_version, internal, gauss_next = self.rng.getstate()
        return {
            "version": STATE_VERSION,
            "period": self.period,
            "hparams": [dict(h) for h in self.hparams],
            "next_period": list(self.next_period),
            "rng": [rng_version, list(internal), gauss_next],
        }

    def load_state_dict(self, state: Any) -> None:
        """Take over a state_dict(). Raises ValueError, leaving this population unchanged, when the state is
        malformed or belongs to a population of another size."""
        n = len(self.hparams)
        if not isinstance(state, dict) or state.get("version") != STATE_VERSION:
            raise ValueError(f"not a PBT state of version {STATE_VERSION}")
        hparams, boundaries, period = state.get("hparams"), state.get("next_period"), state.get("period")
        if not isinstance(hparams, list) or not isinstance(boundaries, list) or not _is_int(period):
            raise ValueError("hparams, next_period or period missing")
        if len(hparams) != n or len(boundaries) != n:
            raise ValueError(f"saved for {len(hparams)} policies, this run has {n}")
        if not all(isinstance(h, dict) and all(_is_number(v) for v in h.values()) for h in hparams):
            raise ValueError("hyperparameters must map names to numbers")
        if not all(_is_int(b) and b >= 0 for b in boundaries):
            raise ValueError("next_period must hold non-negative integers")
        rng = random.Random()
        try:
            rng_version, internal, gauss_next = state["rng"]
            if gauss_next is not None and not _is_number(gauss_next):  # setstate would take anything here
                raise ValueError(f"gauss_next {gauss_next!r}")
            rng.setstate((rng_version, tuple(internal), gauss_next))
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"rng state unusable ({exc})") from None
        if period != self.period and period > 0 and self.period > 0:
            # --pbt_period_env_steps changed on resume: the next boundary is one new period after the last
            # boundary crossed, not one old period (which could be far off when the period was shortened).
            boundaries = [((b - period) // self.period + 1) * self.period for b in boundaries]
        self.hparams = [{k: float(v) for k, v in h.items()} for h in hparams]
        self.next_period = [int(b) for b in boundaries]
        self.rng = rng


def verify_pbt(cfg: Any) -> list[str]:
    errors = []
    if cfg.with_pbt and cfg.num_policies < 2:
        errors.append(f"--with_pbt: needs --num_policies >= 2 (got {cfg.num_policies})")
    if not 0.0 < cfg.pbt_replace_fraction <= 0.5:
        errors.append(f"--pbt_replace_fraction={cfg.pbt_replace_fraction}: must be in (0, 0.5]")
    if not 0.0 <= cfg.pbt_mutation_rate <= 1.0:
        errors.append(f"--pbt_mutation_rate={cfg.pbt_mutation_rate}: must be in [0, 1]")
    if not 1.0 <= cfg.pbt_perturb_min <= cfg.pbt_perturb_max:
        errors.append(
            f"--pbt_perturb_min={cfg.pbt_perturb_min}, --pbt_perturb_max={cfg.pbt_perturb_max}: need 1 <= min <= max"
        )
    if cfg.pbt_period_env_steps <= 0 or cfg.pbt_start_mutation < 0:
        errors.append("--pbt_period_env_steps must be > 0 and --pbt_start_mutation >= 0")
    if cfg.pbt_target_objective not in PBT_OBJECTIVES:
        errors.append(f"--pbt_target_objective={cfg.pbt_target_objective}: must be one of {', '.join(PBT_OBJECTIVES)}")
    elif cfg.pbt_target_objective == "eval_return" and cfg.eval_interval <= 0 and cfg.meta_test_interval <= 0:
        errors.append("--pbt_target_objective=eval_return: needs --eval_interval > 0 (or --meta_test_interval)")
    try:
        policy_hparams(cfg)
    except ValueError as exc:
        errors.append(f"--policy_hparams={cfg.policy_hparams!r}: {exc}")
    return errors


def policy_hparams(cfg: Any) -> dict[int, dict[str, float]]:
    """--policy_hparams parsed and checked: policy id -> {hyperparameter: value}; ValueError says what is wrong."""
    if not cfg.policy_hparams:
        return {}
    try:
        raw = json.loads(cfg.policy_hparams)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON ({exc.msg})") from None
    if not isinstance(raw, dict):
        raise ValueError('must be an object like {"1": {"learning_rate": 0.001}}')
    out: dict[int, dict[str, float]] = {}
    for key, values in raw.items():
        if not str(key).isdigit() or int(key) >= cfg.num_policies:
            raise ValueError(f"policy {key!r} is not one of 0..{cfg.num_policies - 1}")
        if not isinstance(values, dict) or not all(isinstance(v, int | float) for v in values.values()):
            raise ValueError(f"policy {key}: must map hyperparameter names to numbers")
        ranges = hparam_ranges(cfg)
        unknown = sorted(set(values) - set(ranges))
        if unknown:
            raise ValueError(f"unknown hyperparameters {', '.join(unknown)}; valid: {', '.join(ranges)}")
        out[int(key)] = {k: float(v) for k, v in values.items()}
    return out
