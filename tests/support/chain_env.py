"""A 10-step chain for the command-following test of reward-conditioned policies (used as
--env=tests.support.chain_env:ChainEnv): every episode lasts exactly 10 steps; action 1 moves right and pays 1,
action 0 moves left and pays 0, so the return is the number of right moves (0..10).

obs = [steps taken / 10, right moves so far / 10].
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np

LENGTH = 10


class ChainEnv(gym.Env):
    observation_space = gym.spaces.Box(0.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self) -> None:
        self.t = 0
        self.rights = 0

    def _obs(self) -> np.ndarray:
        return np.array([self.t / LENGTH, self.rights / LENGTH], np.float32)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.t = self.rights = 0
        return self._obs(), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        right = int(action) == 1
        self.t += 1
        self.rights += right
        return self._obs(), float(right), self.t >= LENGTH, False, {}
