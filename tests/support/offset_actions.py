"""Envs whose Discrete actions start elsewhere than 0 (gymnasium's `Discrete(n, start=k)`), to check that every path
that hands actions to an env gives it the policy's index plus the start (used directly, or as
--env=tests.support.offset_actions:OffsetActionsEnv).

`OffsetActionsEnv`: actions Discrete(3, start=10), a task family of one key ("target": 0, 1 or 2): reward 1 for action
10 + target, else 0; 5-step episodes. Observation: [step, last action taken (0 before the first)]. An action outside
the space raises ValueError, as a strict env would; `taken` keeps every action it was given.

`OffsetActionsGame`: tests/support/agent_games.py's LeaveJoinGame with every agent's actions Discrete(3, start=10),
refusing (ValueError) an action outside them."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from tests.support.agent_games import LeaveJoinGame

START = 10
ACTIONS = gym.spaces.Discrete(3, start=START)


class OffsetActionsEnv(gym.Env):
    observation_space = gym.spaces.Box(-100.0, 100.0, (2,), np.float32)
    action_space = ACTIONS
    finite_tasks = [{"target": 0.0}, {"target": 1.0}, {"target": 2.0}]

    def __init__(self, **_: Any) -> None:
        self.task = dict(self.finite_tasks[1])
        self.t, self.last = 0, 0
        self.taken: list[int] = []

    def sample_tasks(self, n: int, rng: np.random.Generator) -> list[dict]:
        return [dict(self.finite_tasks[int(i)]) for i in rng.integers(len(self.finite_tasks), size=n)]

    def set_task(self, task: dict) -> None:
        self.task = dict(task)

    def get_task(self) -> dict:
        return dict(self.task)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        self.t, self.last = 0, 0
        return np.zeros(2, np.float32), {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        if not self.action_space.contains(action):
            raise ValueError(f"offset actions: {action!r} is not an action of {self.action_space}")
        self.taken.append(int(action))
        self.t += 1
        self.last = int(action)
        reward = float(int(action) == START + int(self.task["target"]))
        return np.array([self.t, self.last], np.float32), reward, False, self.t >= 5, {}


class OffsetActionsGame(LeaveJoinGame):
    def action_space(self, agent: str) -> gym.spaces.Space:
        return ACTIONS

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        for agent, action in actions.items():
            if not ACTIONS.contains(action):
                raise ValueError(f"offset actions: agent {agent!r} got {action!r}, not an action of {ACTIONS}")
        return super().step({a: int(v) - START for a, v in actions.items()})
