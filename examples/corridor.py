"""Walk to the goal: a corridor of `length` cells, the agent and the goal each in a random cell."""

import functools

import gymnasium as gym
import numpy as np


class Corridor(gym.Env):
    metadata = {"render_modes": ["rgb_array"], "render_fps": 10}

    def __init__(self, length: int = 10, render_mode: str | None = None) -> None:
        self.length, self.render_mode = length, render_mode
        # where the agent is (0 to 1) and how far the goal is (-1 to 1: left or right of it)
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.action_space = gym.spaces.Discrete(2)  # 0: a step left, 1: a step right
        self.agent = self.goal = self.steps = 0

    def _obs(self) -> np.ndarray:
        return np.array([self.agent, self.goal - self.agent], np.float32) / (self.length - 1)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)  # seeds self.np_random: draw every random number from it
        self.agent, self.goal = (int(cell) for cell in self.np_random.choice(self.length, size=2, replace=False))
        self.steps = 0
        return self._obs(), {}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.agent = min(max(self.agent + (1 if action == 1 else -1), 0), self.length - 1)
        self.steps += 1
        reached = self.agent == self.goal
        # +1 at the goal, -0.01 a step before it; cut after 50 steps (truncated: a time limit, not an end)
        return self._obs(), 1.0 if reached else -0.01, reached, self.steps >= 50, {}

    def render(self) -> np.ndarray | None:
        if self.render_mode != "rgb_array":
            return None
        frame = np.zeros((16, 16 * self.length, 3), np.uint8)
        frame[:, 16 * self.goal : 16 * self.goal + 16, 1] = 255  # the goal green
        frame[4:12, 16 * self.agent + 4 : 16 * self.agent + 12] = (255, 0, 0)  # the agent red
        return frame


corridor_long = functools.partial(Corridor, length=20)  # a variant: --env=examples.corridor:corridor_long
