"""Classic control through gymnasium's ids (CartPole-v1, Pendulum-v1): gymnasium builds them; this family gives the
PPO presets the learning tests train with."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# Classic control: small, fast envs that the learning tests train on.
CLASSIC_PRESETS: dict[str, dict[str, Any]] = {
    "CartPole": {
        "learning_rate": 0.001,
        "exploration_loss_coeff": 0.01,
        "num_epochs": 2,
        "num_batches_per_epoch": 2,
        "batch_size": 512,
        "rollout": 32,
    },
    # Pendulum never terminates and pays dense costs: a short horizon and many epochs (as rl-zoo's PPO).
    # A decaying learning rate: in a CI run (seed 1, 2 workers) the return fell from -173 to -287 in the last
    # 12k of 300k steps with a constant one; 4 seeds each on a quiet machine ended at -169/-167/-170/-161
    # constant and -159/-159/-149/-164 decaying.
    "Pendulum": {
        "lr_schedule": "linear_decay",
        "with_vtrace": False,
        "async_rl": False,
        "gamma": 0.95,
        "learning_rate": 0.001,
        "num_epochs": 10,
        "batch_size": 512,
        "num_batches_per_epoch": 4,
        "rollout": 32,
        "exploration_loss_coeff": 0.0,
        "ppo_clip_ratio": 0.2,
    },
}


def preset(env_name: str, env_steps: int | None, given: Mapping[str, Any]) -> dict[str, Any] | None:
    found = CLASSIC_PRESETS.get(env_name.split("-")[0])
    return None if found is None else dict(found)
