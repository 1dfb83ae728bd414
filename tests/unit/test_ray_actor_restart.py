"""A Ray actor worker that Ray restarted runs the calls queued for its dead incarnation before the driver's
`start` reaches it: it must answer "restarted" (the driver then starts it again), not fail the run (a CI run of
tests/learning/test_sac_learning.py's kill -9 test failed with AttributeError 'control' that way)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch

from appo.backends.ray.actors import RayActorWorker
from appo.config.cfg import merge_cfg
from appo.config.derive import derive


def test_a_call_before_start_answers_restarted_without_touching_anything():
    threads = torch.get_num_threads()
    cfg = merge_cfg({"env": "CartPole-v1", "num_workers": 1, "num_envs_per_worker": 2}, None)
    env = gym.make("CartPole-v1")
    worker = RayActorWorker(cfg, derive(cfg), 0, (env.observation_space, env.action_space))
    try:
        n = cfg.num_envs_per_worker
        result = worker.collect([], {}, np.zeros(n, np.int64), np.zeros((n, 1), np.float32), 0.1)
        assert result == {"restarted": True}
        assert worker.worker is None
    finally:
        worker._limits.restore_original_limits()  # the constructor held this (pytest's) process to one thread
        torch.set_num_threads(threads)
