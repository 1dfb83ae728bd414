"""Envs that misbehave on purpose, for the fault-tolerance tests (used as --env=tests.support.faulty_envs:Name)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np


class _Base(gym.Env):
    """CartPole-like dynamics-free env: 4-float observations, 2 actions, 50-step episodes."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self) -> None:
        self.t = 0
        self.total = 0

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(4, np.float32), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        self.t += 1
        self.total += 1
        return np.full(4, 0.1 * int(action), np.float32), float(action), False, self.t >= 50, {}


class FlakyEnv(_Base):
    """Raises in step every 300 steps of this env."""

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        if self.total and self.total % 300 == 0:
            self.total += 1
            raise RuntimeError("flaky env: simulated physics blow-up")
        return super().step(action)


class BrokenEnv(_Base):
    """Raises in every step."""

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        raise ValueError("broken env: always fails")


class HangOnceEnv(_Base):
    """After 200 steps, hangs forever in step, once per run: the first env to get there creates the file
    named by $APPO_TEST_HANG_FLAG and hangs; envs after it run normally."""

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        flag = Path(os.environ["APPO_TEST_HANG_FLAG"])
        if self.total >= 200 and not flag.exists():
            flag.write_text(str(os.getpid()))
            while True:
                time.sleep(1)
        return super().step(action)


class HangAtStartOnceEnv(_Base):
    """Hangs forever while an actor worker builds it, once per run: the first env built in an actor worker
    creates the file named by $APPO_TEST_HANG_FLAG and hangs (its worker never reaches its first heartbeat);
    envs after it, and those the driver builds to read the spaces, are fine."""

    def __init__(self) -> None:
        super().__init__()
        import multiprocessing

        flag = Path(os.environ["APPO_TEST_HANG_FLAG"])
        if multiprocessing.current_process().name.startswith("actor_worker") and not flag.exists():
            flag.write_text(str(os.getpid()))
            while True:
                time.sleep(1)


class SlowStartEnv(_Base):
    """Takes $APPO_TEST_SLOW_ENV seconds (default 1.5) to build in an actor worker: a slow machine, or a heavy
    simulator. A worker building several is slow to start, not hung."""

    def __init__(self) -> None:
        super().__init__()
        import multiprocessing

        if multiprocessing.current_process().name.startswith("actor_worker"):
            time.sleep(float(os.environ.get("APPO_TEST_SLOW_ENV", "1.5")))


class NanRewardEnv(_Base):
    """Pays NaN rewards: every update's loss is NaN."""

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        obs, _, terminated, truncated, info = super().step(action)
        return obs, float("nan"), terminated, truncated, info


class NoFrameEnv(_Base):
    """Says it renders rgb_array frames but its render() returns None."""

    metadata = {"render_modes": ["rgb_array"]}

    def __init__(self, render_mode: str | None = None) -> None:
        super().__init__()
        self.render_mode = render_mode

    def render(self) -> None:
        return None
