"""The env families: each folder of envs/ with a `family.py` is one (envs/meta/, envs/atari/, envs/multi_agent/, ...),
found here when envs/ is first imported, so that a new family is one new folder and no list elsewhere changes.

A family module says what it owns with any of these names (all optional):
- `ENVS`: project env name -> constructor(max_episode_steps=..., **kwargs). A constructor applies its env's own time
  limit and takes `max_episode_steps` (> 0) to override it.
- `PREFIXES` with `make(name, max_episode_steps, **kwargs)`: names that start so are the family's (atari_pong,
  ALE/Pong-v5); `make` builds one, or returns None to leave the name to gymnasium.
- `preset(env_name, env_steps, given)`: PPO's defaults for one of its envs (None: not its env); `env_steps` the
  run's --train_for_env_steps (None if unknown), `given` what the run sets itself.
- `CFG_KEYS`: env name -> {cfg key: constructor keyword} for envs whose size comes from the run's flags.
- `TASK_FAMILIES`: those of its envs that are meta-task families (envs/meta/tasks.py).
- `native_vector(cfg)`: a builder of native vector envs for the run's env, or None.
- `training_kwargs(cfg)`: constructor keywords for the envs that collect training experience only.
A family module imports nothing heavy at the top (no simulator): every process that builds an env imports them all."""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path
from types import ModuleType

_FAMILIES: list[ModuleType] = []


def families() -> list[ModuleType]:
    """Every family module, in the order of their folders' names."""
    if not _FAMILIES:
        folder = Path(__file__).resolve().parent
        for info in sorted(pkgutil.iter_modules([str(folder)]), key=lambda i: i.name):
            if info.ispkg and (folder / info.name / "family.py").is_file():
                _FAMILIES.append(importlib.import_module(f"appo.envs.{info.name}.family"))
    return _FAMILIES


def family_of(env_name: str) -> ModuleType | None:
    """The family that owns `env_name` (by name or prefix); None for a gymnasium id or module:Class of no family."""
    for family in families():
        prefixes = getattr(family, "PREFIXES", ())
        if env_name in getattr(family, "ENVS", {}) or (prefixes and env_name.startswith(prefixes)):
            return family
    return None
