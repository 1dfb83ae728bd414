"""quadrant_image: a tiny pixel env for tests and for trying image observations without any dependency (numpy only).

Every step shows a 64x64 RGB image (uint8, channels last, as a camera gives it: shape (64, 64, 3)), black but for a
red 8x8 square at a random place inside one of the four quadrants (0: top left, 1: top right, 2: bottom left, 3:
bottom right). The action (Discrete(4)) names the quadrant of the image just shown: reward +1 if right, 0 otherwise;
then the next image. Episodes last 20 steps (`episode_steps`), ended as a time limit (truncated): a random policy
scores 5, a perfect one 20.

    python train_appo.py --env=appo.envs.common.quadrant_image:QuadrantImageEnv --train_for_env_steps=100000

`QuadrantDictEnv` is the same task with a Dict observation, an image and a vector: {"image": the image, "flag":
float32 [1], -1 or +1, drawn with each image} and eight actions: the quadrant under -1, the quadrant + 4 under +1.
A policy needs both keys to score above 10 of 20 (the best from the image alone; from the flag alone, 5; chance,
2.5). Each key pays on its own before they pay together, so a policy learns to read them one at a time. (A flag
that mirrors the quadrant under even odds would make the image's column worthless without the flag: a parity
problem, whose gradient is flat where learning starts.)
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

SIZE = 64  # image side, pixels
SQUARE = 8  # the red square's side, pixels
RED = (255, 0, 0)


class QuadrantImageEnv(gym.Env[np.ndarray, int]):
    """Name the quadrant of the red square. See the module docstring."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 10}

    def __init__(self, episode_steps: int = 20, render_mode: str | None = None) -> None:
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"quadrant_image renders rgb_array only (got render_mode={render_mode!r})")
        self.render_mode = render_mode
        self.episode_steps = int(episode_steps)
        self.observation_space = spaces.Box(0, 255, shape=(SIZE, SIZE, 3), dtype=np.uint8)
        self.action_space = spaces.Discrete(4)
        self._image = np.zeros((SIZE, SIZE, 3), dtype=np.uint8)
        self._quadrant = 0
        self._steps = 0

    def _draw(self) -> np.ndarray:
        """A new image: the square in a random quadrant, at a random place wholly inside it."""
        self._quadrant = int(self.np_random.integers(4))
        half = SIZE // 2
        row = (self._quadrant // 2) * half + int(self.np_random.integers(half - SQUARE + 1))
        col = (self._quadrant % 2) * half + int(self.np_random.integers(half - SQUARE + 1))
        self._image[:] = 0
        self._image[row : row + SQUARE, col : col + SQUARE] = RED
        return self._image.copy()

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self._steps = 0
        return self._draw(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        reward = 1.0 if int(action) == self._quadrant else 0.0
        self._steps += 1
        return self._draw(), reward, False, self._steps >= self.episode_steps, {}

    def render(self) -> np.ndarray | None:
        return self._image.copy() if self.render_mode == "rgb_array" else None


class QuadrantDictEnv(QuadrantImageEnv):
    """The quadrant task with a Dict observation: the image and a flag. See the module docstring."""

    def __init__(self, episode_steps: int = 20, render_mode: str | None = None) -> None:
        super().__init__(episode_steps, render_mode)
        self.observation_space = spaces.Dict(
            {"image": self.observation_space, "flag": spaces.Box(-1.0, 1.0, shape=(1,), dtype=np.float32)}
        )
        self.action_space = spaces.Discrete(8)
        self._flag = -1.0

    def _observe(self) -> dict[str, np.ndarray]:
        image = self._draw()
        self._flag = float(self.np_random.choice([-1.0, 1.0]))
        return {"image": image, "flag": np.array([self._flag], dtype=np.float32)}

    def answer(self) -> int:
        return self._quadrant + (4 if self._flag > 0 else 0)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[dict, dict]:
        gym.Env.reset(self, seed=seed)
        self._steps = 0
        return self._observe(), {}

    def step(self, action: Any) -> tuple[dict, float, bool, bool, dict]:
        reward = 1.0 if int(action) == self.answer() else 0.0
        self._steps += 1
        return self._observe(), reward, False, self._steps >= self.episode_steps, {}
