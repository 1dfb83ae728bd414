"""The `episode_ids` trajectory field: one int64 per step naming the episode it belongs to, unique in the run.
Bits 40 and up: the env's global index; bits 24-39: the incarnation of the actor worker that ran it (a restarted
worker counts its episodes from 0 again: without it a new episode would take a dead worker's id, and UDRL/RCP
would splice their steps); bits 0-23: the env's episode count. Actor workers pack it (appo/sampling/env_runner.py),
learners that stitch whole episodes read the env back (appo/algorithms/reward_conditioned/udrl.py)."""

from __future__ import annotations

import numpy as np

ENV_SHIFT, INCARNATION_SHIFT = 40, 24
INCARNATION_MASK, COUNT_MASK = 0xFFFF, 0xFFFFFF


def pack(envs: np.ndarray, incarnation: int, counts: np.ndarray) -> np.ndarray:
    """The ids of the current episodes of `envs` (global indices), run by a worker's `incarnation`, whose episode
    counts are `counts`."""
    return (envs << ENV_SHIFT) | ((incarnation & INCARNATION_MASK) << INCARNATION_SHIFT) | (counts & COUNT_MASK)


def env_of(episode_id: int) -> int:
    """The global index of the env that ran the episode."""
    return episode_id >> ENV_SHIFT


def unpack(episode_id: int) -> tuple[int, int, int]:
    """(env, incarnation, episode count) of an episode id."""
    return (
        episode_id >> ENV_SHIFT,
        (episode_id >> INCARNATION_SHIFT) & INCARNATION_MASK,
        episode_id & COUNT_MASK,
    )
