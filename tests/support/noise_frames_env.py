"""An env of uint8 noise frames that records every frame it returns (tests/integration/test_uint8_observations.py):
Atari-like stacked frames (4, 48, 48) of uniform bytes (every value 0..255 occurs), 3 actions, 12-step episodes.
With $APPO_FRAME_DIR set, each frame's sha1 is appended to <dir>/frames-<pid>.txt as it leaves reset or step, so a
test can check that what the learner trains on are exactly these frames."""

from __future__ import annotations

import hashlib
import os
from typing import Any

import gymnasium as gym
import numpy as np

SHAPE = (4, 48, 48)


def frame_hash(frame: np.ndarray) -> str:
    return hashlib.sha1(np.ascontiguousarray(frame).tobytes()).hexdigest()


class NoiseFramesEnv(gym.Env):
    observation_space = gym.spaces.Box(0, 255, SHAPE, np.uint8)
    action_space = gym.spaces.Discrete(3)

    def __init__(self) -> None:
        self.t = 0
        where = os.environ.get("APPO_FRAME_DIR")
        self.record = None if where is None else os.path.join(where, f"frames-{os.getpid()}.txt")

    def _frame(self) -> np.ndarray:
        frame = self.np_random.integers(0, 256, SHAPE, dtype=np.uint8)
        if self.record is not None:
            with open(self.record, "a") as f:
                f.write(frame_hash(frame) + "\n")
        return frame

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.t = 0
        return self._frame(), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.t += 1
        return self._frame(), float(action == 1), False, self.t >= 12, {}
