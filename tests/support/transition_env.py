"""An env whose every transition can be checked from the transition alone, for the SAC replay tests (used as
--env=tests.support.transition_env:TransitionCheckEnv): a row of the replay mixed from two steps, two envs, two
episodes or two actor workers shows up as a broken identity.

obs = [pid of the process stepping it, episode id (random per episode), step within the episode, x];
action a in [-1, 1]; x' = x + a; reward = x + 2a; terminated when |x'| > 2; truncated (a time limit) at 30 steps.
"""

from __future__ import annotations

import os
from typing import Any

import gymnasium as gym
import numpy as np

TIME_LIMIT = 30
BOUND = 2.0


class TransitionCheckEnv(gym.Env):
    observation_space = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
    action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)

    def __init__(self) -> None:
        self.episode = 0.0
        self.t = 0
        self.x = 0.0

    def _obs(self) -> np.ndarray:
        # pids and ids below 2**24 are exact in float32
        return np.array([os.getpid(), self.episode, self.t, self.x], np.float32)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.episode = float(self.np_random.integers(1, 2**23))
        self.t = 0
        self.x = float(self.np_random.uniform(-0.5, 0.5))
        return self._obs(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        a = float(np.float32(np.asarray(action).reshape(-1)[0]))
        x = float(np.float32(self.x))
        reward = x + 2.0 * a
        self.x = x + a
        self.t += 1
        terminated = abs(self.x) > BOUND
        return self._obs(), reward, terminated, self.t >= TIME_LIMIT and not terminated, {}
