"""Many agents in one env: the project's own games (paddle_duel) registered here; PettingZoo Parallel envs and
Sample Factory's multi-agent contract come in as `module:callable` (envs/__init__.py wraps them in
envs/multi_agent/multi_agent.py's AgentEnv)."""

from __future__ import annotations

import importlib
from functools import partial
from typing import Any


def _game(module: str, class_name: str, max_episode_steps: int = 0, **kwargs: Any) -> Any:
    """A project multi-agent game (a Parallel env: envs/multi_agent/multi_agent.py), `max_episode_steps` > 0 as its
    own step limit (`max_steps`)."""
    limit = {"max_steps": max_episode_steps} if max_episode_steps > 0 else {}
    return getattr(importlib.import_module(module), class_name)(**limit, **kwargs)


ENVS = {"paddle_duel": partial(_game, "appo.envs.multi_agent.paddle_duel", "PaddleDuelEnv")}
