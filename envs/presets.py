"""Per-env default overrides (the second layer of cfg precedence: defaults < preset < cfg.json < flags).

The MuJoCo preset follows Sample Factory's tuned MuJoCo parameters: synchronous PPO with GAE, a small
tanh MLP, input and return normalisation, and a linearly decaying learning rate."""

from __future__ import annotations

from typing import Any

MUJOCO_IDS = ("HalfCheetah", "Ant", "Hopper", "Walker2d", "Humanoid", "Swimmer", "Reacher", "InvertedPendulum")
MUJOCO_IDS += ("InvertedDoublePendulum", "Pusher")

MUJOCO_PRESET: dict[str, Any] = {
    "num_envs_per_worker": 8,
    "worker_num_splits": 2,
    "rollout": 64,
    "batch_size": 1024,
    "num_batches_per_epoch": 4,
    "num_epochs": 2,
    "async_rl": False,
    "with_vtrace": False,
    "gae_lambda": 0.95,
    "gamma": 0.99,
    "ppo_clip_ratio": 0.2,
    "ppo_clip_value": 1.0,
    "value_loss_coeff": 1.3,
    "exploration_loss_coeff": 0.0,
    "max_grad_norm": 3.5,
    "learning_rate": 0.00295,
    "lr_schedule": "linear_decay",
    "encoder_mlp_layers": [64, 64],
    "nonlinearity": "tanh",
    "normalize_input": True,
    "normalize_returns": True,
    "value_bootstrap": True,
    "save_every_sec": 15.0,
}


def env_preset(env_name: str) -> dict[str, Any]:
    """Defaults that suit `env_name` better than the generic ones; empty when there is no preset."""
    base = env_name.split("-")[0]
    if base in MUJOCO_IDS:
        return dict(MUJOCO_PRESET)
    return {}
