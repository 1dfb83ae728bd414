"""MAML's episode buffers (--algo=maml_trpo): the episodes of a meta-iteration, one row per task, in shared memory
(allocated by the MAML driver, appo/maml/driver.py; the actor pool, appo/maml/actors.py, copies each task's rollout
into its row; the meta-learner and the Hessian-vector-product helpers, appo/maml/hvp_pool.py, read them):
    per buffer b (0: train episodes, 1: validation episodes; the meta-test reuses them):
        obs [K, E, T, obs_dim] in the trajectory tensors' dtype (appo/protocol/buffers.py obs_dtype: uint8 stays
        uint8; `episodes` hands them over as float32, what the policies and the baseline compute with),
        actions [K, E, T, act_dim] float32 (as sampled, before clipping),
        rewards [K, E, T] float32 (0 after an episode's end), lengths [K, E] int64
and the vector in and the per-task products out of the KL's Hessian-vector products; with them the episode horizon
(the env's time limit) and the episodes' seeds.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import gymnasium as gym
import numpy as np
import torch

from appo.maml.algorithm import Episodes
from appo.protocol.buffers import torch_dtype


class EpisodeBuffers(NamedTuple):
    hvp_in: torch.Tensor  # [P]: the vector of the KL Hessian-vector product being computed
    hvp_out: torch.Tensor  # [K, P]: each task's product
    obs: list[torch.Tensor]
    actions: list[torch.Tensor]
    rewards: list[torch.Tensor]
    lengths: list[torch.Tensor]

    def episodes(self, buffer: int, rows: int | list[int]) -> Episodes:
        """A copy of rows 0..rows-1 (or the rows listed) of `buffer` as Episodes [K, E, T, ...]."""
        index = list(range(rows)) if isinstance(rows, int) else rows
        lengths = self.lengths[buffer][index]
        T = self.rewards[buffer].shape[-1]
        mask = (torch.arange(T) < lengths.unsqueeze(-1)).float()
        return Episodes(
            self.obs[buffer][index].to(torch.float32, copy=True),
            self.actions[buffer][index].clone(),
            self.rewards[buffer][index].clone(),
            mask,
        )


def episode_horizon(env: gym.Env) -> int:
    """The time limit of `env` (its TimeLimit wrapper's), which fixes T of the episode buffers."""
    while isinstance(env, gym.Wrapper):
        if isinstance(env, gym.wrappers.TimeLimit):
            return int(env._max_episode_steps)
        env = env.env
    raise ValueError(f"--algo=maml_trpo: the env {env} has no time limit; pass --max_episode_steps")


def allocate_buffers(
    num_rows: int,
    episodes: int,
    horizon: int,
    obs_dim: int,
    act_dim: int,
    num_params: int,
    obs_type: Any = np.float32,
) -> EpisodeBuffers:
    """`obs_type`: the observations' numpy dtype in the trajectory tensors (appo/protocol/buffers.py obs_dtype)."""

    def shared(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return torch.zeros(shape, dtype=dtype).share_memory_()

    return EpisodeBuffers(
        shared(num_params),
        shared(num_rows, num_params),
        [shared(num_rows, episodes, horizon, obs_dim, dtype=torch_dtype(obs_type)) for _ in range(2)],
        [shared(num_rows, episodes, horizon, act_dim) for _ in range(2)],
        [shared(num_rows, episodes, horizon) for _ in range(2)],
        [shared(num_rows, episodes, dtype=torch.int64) for _ in range(2)],
    )


def episode_seed(seed: int, stream: int, iteration: int, row: int, episode: int) -> np.random.SeedSequence:
    """The seeds of one episode (env reset, action noise: `generate_state(2)`), from where it stands alone."""
    return np.random.SeedSequence([seed, stream, iteration, row, episode])
