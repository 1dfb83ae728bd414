"""Atari through ale-py (`--env=atari_pong` or `--env=ALE/Pong-v5`): the games with Nature DQN preprocessing
(envs/atari/atari.py), ale-py's native vector env for plain runs, episodic life for training only, and the PPO
preset."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

import gymnasium as gym

# CleanRL's ppo_atari settings (synchronous PPO with GAE, 8 envs x 128 steps an iteration
# in 4 minibatches, 4 epochs, clip 0.1 on the policy and the value, entropy 0.01, 2.5e-4 decaying to 0, Adam eps
# 1e-5, gradient norm 0.5, rewards clipped to +-1 for learning, no input or return normalisation); the Nature CNN
# is what --encoder=auto picks for its (4, 84, 84) frames. The learner takes 2 threads: synchronous actor workers
# wait while it trains, and the conv learner bounds the run (Pong, 2 cores, 2 x 8 envs: 388 agent steps/s against
# 227 with one thread; docs/results.md, Pixels). The learner's convnet runs in bf16 where the hardware has it natively
# (Pong, 2 cores with AVX512-BF16, this preset: 373 -> 530 agent steps/s; float32 elsewhere).
ATARI_PRESET: dict[str, Any] = {
    "learner_threads": 2,
    "learner_precision": "auto",
    "num_envs_per_worker": 4,
    "worker_num_splits": 2,
    "rollout": 128,
    "batch_size": 256,
    "num_batches_per_epoch": 4,
    "num_epochs": 4,
    "async_rl": False,
    "with_vtrace": False,
    "gamma": 0.99,
    "gae_lambda": 0.95,
    "ppo_clip_ratio": 0.1,
    "ppo_clip_value": 0.1,
    "value_loss_coeff": 0.5,
    "exploration_loss_coeff": 0.01,
    "max_grad_norm": 0.5,
    "learning_rate": 0.00025,
    "lr_schedule": "linear_decay",
    "adam_eps": 1e-5,
    "reward_clip": 1.0,
    "normalize_input": False,
    "normalize_returns": False,
}
ATARI_PREFIXES = ("atari_", "ALE/")
PREFIXES = ATARI_PREFIXES


def make(name: str, max_episode_steps: int = 0, **kwargs: Any) -> gym.Env | None:
    """The game `name` names (None: an ALE/ id left to gymnasium); ValueError with one line for an unknown game."""
    from appo.envs.atari.atari import atari_env

    return atari_env(name, max_episode_steps=max_episode_steps, **kwargs)


def preset(env_name: str, env_steps: int | None, given: Mapping[str, Any]) -> dict[str, Any] | None:
    return dict(ATARI_PRESET) if env_name.startswith(ATARI_PREFIXES) else None


def training_kwargs(cfg: Any) -> dict[str, Any]:
    """Episodic life (--episodic_life) for the envs that collect training experience only."""
    return {"episodic_life": True} if getattr(cfg, "episodic_life", False) else {}


def native_vector(cfg: Any) -> Callable[[int], Any]:
    """ale-py's AtariVectorEnv of `n` games (envs/atari/atari.py make_atari_vector)."""
    from appo.envs.atari.atari import make_atari_vector

    return partial(
        make_atari_vector,
        cfg.env,
        episodic_life=bool(getattr(cfg, "episodic_life", False)),
        max_episode_steps=cfg.max_episode_steps,
    )
