"""Envs with one mistake each, for tests/unit/test_check_env.py (used as --env=tests.support.odd_envs:Name): each
breaks one rule of docs/custom_envs.md, and `python -m appo.check_env` must name it in one line. `GoodEnv` breaks
none. Every env but the multi-agent one has `_Base`'s dynamics: 4 float32 observations, 2 actions, 20-step episodes
ended by a termination, frames for videos (render_mode="rgb_array")."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from tests.support.agent_games import LeaveJoinGame


class _Base(gym.Env):
    observation_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
    action_space: gym.Space = gym.spaces.Discrete(2)

    def __init__(self, render_mode: str | None = None) -> None:
        self.render_mode = render_mode
        self.t = 0

    def _obs(self) -> np.ndarray:
        return self.np_random.uniform(-1.0, 1.0, 4).astype(np.float32)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        super().reset(seed=seed)
        self.t = 0
        return self._obs(), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        self.t += 1
        return self._obs(), 1.0, self.t >= 20, False, {}

    def render(self) -> np.ndarray | None:
        return np.zeros((8, 8, 3), np.uint8) if self.render_mode == "rgb_array" else None


class GoodEnv(_Base):
    """Follows every rule."""


class MultiDiscreteEnv(_Base):
    """Two discrete choices per step: a MultiDiscrete action space, which the engine's policies do not have."""

    action_space = gym.spaces.MultiDiscrete([3, 3])


class WrongResetShapeEnv(_Base):
    """reset returns 3 values where the observation space says 4."""

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[Any, dict]:
        obs, info = super().reset(seed=seed, options=options)
        return obs[:3], info


class NanRewardEnv(_Base):
    """A NaN reward at the third step."""

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        obs, reward, terminated, truncated, info = super().step(action)
        return obs, float("nan") if self.t == 3 else reward, terminated, truncated, info


class OldStepApiEnv(_Base):
    """gym's old API: step returns (obs, reward, done, info), 4 values."""

    def step(self, action: Any) -> tuple[Any, float, bool, dict]:  # type: ignore[override]
        obs, reward, terminated, _, info = super().step(action)
        return obs, reward, terminated, info


class EndlessUnseededEnv(_Base):
    """Never ends an episode, and draws its observations from numpy's global generator rather than from reset's
    seed: two notes, no error."""

    def _obs(self) -> np.ndarray:
        return np.random.uniform(-1.0, 1.0, 4).astype(np.float32)

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        obs, reward, _, truncated, info = super().step(action)
        return obs, reward, False, truncated, info


class WrongAgentShapeGame(LeaveJoinGame):
    """A multi-agent game (tests/support/agent_games.py) whose agent "b" observes 3 values where its space says 4."""

    def _obs(self, agent: str) -> np.ndarray:
        obs = super()._obs(agent)
        return obs[:3] if agent == "b" else obs
