"""Many agents in one env: the project's own games (paddle_duel) registered here; PettingZoo Parallel envs and
Sample Factory's multi-agent contract come in as `module:callable` (envs/__init__.py wraps them in
envs/multi_agent/multi_agent.py's AgentEnv)."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from functools import partial
from typing import Any


def _game(module: str, class_name: str, max_episode_steps: int = 0, **kwargs: Any) -> Any:
    """A project multi-agent game (a Parallel env: envs/multi_agent/multi_agent.py), `max_episode_steps` > 0 as its
    own step limit (`max_steps`)."""
    limit = {"max_steps": max_episode_steps} if max_episode_steps > 0 else {}
    return getattr(importlib.import_module(module), class_name)(**limit, **kwargs)


ENVS = {"paddle_duel": partial(_game, "appo.envs.multi_agent.paddle_duel", "PaddleDuelEnv")}

# MAPPO's recipe for mpe2's cooperative envs (Yu et al. 2021; marlbenchmark/on-policy's config.py and
# train_mpe_spread.sh) on this engine: one shared recurrent policy on each agent's own observation and a value over
# every agent's (--value_input=team), 128 envs of 25-step games, 10 epochs of one minibatch of the whole batch
# (128 x 25 x 3 agent steps), the recurrent core trained through each whole game (MAPPO: chunks of 10 steps),
# learning rate 7e-4, 64-wide tanh layers and GRU, clip 0.2 (policy and value), entropy 0.01, gamma 0.99, lambda
# 0.95, Huber value loss (delta 10) at weight 1, gradient norm 10, running normalisers of inputs and value targets,
# Adam eps 1e-5, and an episode's end its end (no bootstrap at the 25-step limit). MAPPO collects synchronously: so
# does the preset (--async_rl=False).
MAPPO_ENVS = ("simple_spread_v3", "simple_speaker_listener_v4", "simple_reference_v3")
MAPPO_PRESET: dict[str, Any] = {
    "value_input": "team",
    "num_envs_per_worker": 64,
    "rollout": 25,
    "batch_size": 9600,
    "num_epochs": 10,
    "num_batches_per_epoch": 1,
    "use_rnn": True,
    "rnn_type": "gru",
    "rnn_size": 64,
    "recurrence": -1,  # the whole rollout: a whole 25-step game
    "encoder_mlp_layers": [64, 64],
    "nonlinearity": "tanh",
    "learning_rate": 7e-4,
    "adam_eps": 1e-5,
    "with_vtrace": False,
    "gamma": 0.99,
    "gae_lambda": 0.95,
    "ppo_clip_ratio": 0.2,
    "ppo_clip_value": 0.2,
    "value_huber_delta": 10.0,
    "value_loss_coeff": 1.0,
    "exploration_loss_coeff": 0.01,
    "max_grad_norm": 10.0,
    "normalize_input": True,
    "normalize_returns": True,
    "value_bootstrap": False,
    "async_rl": False,
}


def preset(env_name: str, env_steps: int | None, given: Mapping[str, Any]) -> dict[str, Any] | None:
    """MAPPO's recipe for mpe2's cooperative envs (`mpe2.<name>:parallel_env`, `MAPPO_ENVS`); None for others."""
    module, _, _ = env_name.partition(":")
    if module.startswith("mpe2.") and module.split(".")[-1] in MAPPO_ENVS:
        return dict(MAPPO_PRESET)
    return None
