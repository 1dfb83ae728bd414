"""Environment factory: `make_env(name)` returns a gymnasium Env for a project env name, any registered
gymnasium id, or `module.path:ClassName` for a user's own env class. Actor workers, the driver (to read
the spaces) and enjoy.py all build their envs here, so every env is made the same way."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import gymnasium as gym

# Project envs (meta-task families) register their constructors here: name -> callable(**kwargs) -> Env.
PROJECT_ENVS: dict[str, Callable[..., gym.Env]] = {}


class UnknownEnvError(ValueError):
    """Raised with a one-line message naming the env and what would be valid."""


def _from_class_path(name: str, kwargs: dict[str, Any]) -> gym.Env:
    module_name, _, class_name = name.partition(":")
    try:
        env_cls = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError) as exc:
        raise UnknownEnvError(f"--env={name}: cannot import {class_name} from {module_name} ({exc})") from exc
    return env_cls(**kwargs)


def make_env(name: str, max_episode_steps: int = 0, render_mode: str | None = None, **kwargs: Any) -> gym.Env:
    """Build the env called `name`. `max_episode_steps` > 0 overrides the env's own time limit."""
    if render_mode is not None:
        kwargs["render_mode"] = render_mode
    if name in PROJECT_ENVS:
        env = PROJECT_ENVS[name](**kwargs)
    elif ":" in name:
        env = _from_class_path(name, kwargs)
    else:
        try:
            # The passive env checker costs time on every step; envs are checked by tests instead.
            limit = {"max_episode_steps": max_episode_steps} if max_episode_steps > 0 else {}
            return gym.make(name, disable_env_checker=True, **limit, **kwargs)
        except gym.error.Error as exc:
            known = ", ".join(sorted(PROJECT_ENVS)) or "none yet"
            raise UnknownEnvError(
                f"--env={name}: not a project env ({known}), a registered gymnasium id, or module.path:ClassName"
            ) from exc
    if max_episode_steps > 0:
        env = gym.wrappers.TimeLimit(env, max_episode_steps=max_episode_steps)
    return env
