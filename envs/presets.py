"""Per-env default overrides (the second layer of cfg precedence: defaults < preset < cfg.json < flags): each env
family's `preset` (envs/registry.py; the figures behind each setting sit beside it in the family's family.py)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from appo.envs.registry import families

# What a preset says about the env's tasks rather than about training: every algorithm run on the env takes these.
# The rest of every preset was tuned for PPO (--algo=appo) and is PPO's alone: SAC on Pendulum keeps its own
# gamma 0.99 (rl-zoo's SAC), not the PPO preset's 0.95; an algorithm's defaults are its own (appo/config/algorithms/).
TASK_KEYS = frozenset(
    {"task_schedule", "episodes_per_trial", "task_visibility", "num_train_tasks", "meta_test_interval"}
)


def env_preset(
    env_name: str, algo: str = "appo", env_steps: int | None = None, given: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Defaults that suit `env_name` better than the generic ones for `algo`; empty when there is no preset. The
    presets are PPO's: another algorithm takes only their task settings (TASK_KEYS). `env_steps`: the run's
    --train_for_env_steps (long runs of some envs take other settings); `given`: what the run sets itself (flags, a
    resumed run's cfg.json), which some presets follow (the RL^2 tables' slots follow a trial's length)."""
    preset: dict[str, Any] = {}
    for family in families():
        found = family.preset(env_name, env_steps, given or {}) if hasattr(family, "preset") else None
        if found is not None:
            preset = dict(found)
            break
    return preset if algo == "appo" else {k: v for k, v in preset.items() if k in TASK_KEYS}
