"""Every model by its kind name: `register_model` (a class decorator in each model's module) and `make_model`.
Importing the package appo.models registers every model and its numpy twin (appo/models/__init__.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import gymnasium as gym
from torch import nn

from appo.config.cfg import Cfg

# Every model class by the name `make_model(..., kind=name)` builds it under; filled by `register_model`.
MODELS: dict[str, type[nn.Module]] = {}

_M = TypeVar("_M", bound=type[nn.Module])


def register_model(name: str) -> Callable[[_M], _M]:
    """Class decorator: make `cls` buildable as `make_model(cfg, obs_space, action_space, kind=name)`. The class
    is constructed as `cls(cfg, obs_space, action_space)`. A name already taken by another class is an error,
    because silently replacing a model would change what every checkpoint of that kind loads into."""

    def add(cls: _M) -> _M:
        if MODELS.get(name, cls) is not cls:
            raise ValueError(f"model kind {name!r} is already registered to {MODELS[name].__qualname__}")
        MODELS[name] = cls
        return cls

    return add


def make_model(cfg: Cfg, obs_space: gym.Space, action_space: gym.Space, kind: str | None = None) -> nn.Module:
    """Build the model registered as `kind` (see `register_model`) for these spaces; None: the model the run's
    algorithm (cfg.algo) trains and acts with, so every component (actors, evaluator, enjoy.py, weight stores)
    builds the same one. ValueError for an unknown kind, or for spaces the model cannot serve."""
    if kind is None:
        kind = cfg.traits.model_kind
    if kind not in MODELS:
        raise ValueError(f"unknown model kind {kind!r}; registered: {', '.join(sorted(MODELS))}")
    if hasattr(obs_space, "dict_space") and kind != "actor_critic":  # packed Dicts (envs/common/packed_obs.py)
        raise ValueError(f"--algo={cfg.algo}: Dict observation spaces are not supported; only --algo=appo reads them")
    return MODELS[kind](cfg, obs_space, action_space)
