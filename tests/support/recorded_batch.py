"""A batch recorded from a real MuJoCo env, for tests that train learners on the same data: consecutive
trajectories of one HalfCheetah-v5 env acted on by a seeded policy, with episodes cut at 100 steps so that the
batch holds episode ends (truncations) too."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch

from appo.config.cfg import Cfg
from appo.config.derive import derive
from appo.models.registry import make_model

EPISODE_STEPS = 100


def record_halfcheetah(cfg: Cfg, seed: int = 0) -> tuple[tuple[Any, Any], dict[str, torch.Tensor]]:
    """(spaces, record): one iteration's trajectories of cfg.rollout steps, tensors named as in
    appo/protocol/buffers.py."""
    env = gym.make("HalfCheetah-v5", max_episode_steps=EPISODE_STEPS)
    spaces = (env.observation_space, env.action_space)
    n, T = derive(cfg).trajectories_per_iteration, cfg.rollout
    torch.manual_seed(seed)
    policy = make_model(cfg, *spaces)
    record = {
        "obs": torch.zeros(n, T + 1, *env.observation_space.shape),
        "actions": torch.zeros(n, T, *env.action_space.shape),
        **{key: torch.zeros(n, T) for key in ("log_probs", "values", "rewards", "dones", "truncated")},
        "policy_versions": torch.zeros(n, T, dtype=torch.int64),
    }
    obs, _ = env.reset(seed=seed)
    for i in range(n):
        for t in range(T):
            record["obs"][i, t] = torch.as_tensor(obs, dtype=torch.float32)
            out = policy.act(record["obs"][i, t].unsqueeze(0), torch.zeros(1, 1))
            action = out.actions[0].numpy()
            obs, reward, terminated, truncated, _ = env.step(np.clip(action, -1.0, 1.0))
            record["actions"][i, t] = out.actions[0]
            record["log_probs"][i, t], record["values"][i, t] = out.log_probs[0], out.values[0]
            record["rewards"][i, t] = float(reward)
            record["dones"][i, t] = float(terminated or truncated)
            record["truncated"][i, t] = float(truncated and not terminated)
            if terminated or truncated:
                obs, _ = env.reset()  # the engine stores the next episode's first observation after an end
        record["obs"][i, T] = torch.as_tensor(obs, dtype=torch.float32)
    env.close()
    return spaces, record
