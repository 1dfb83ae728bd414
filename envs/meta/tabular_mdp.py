"""Random tabular MDPs as a task family (RL^2: Duan et al. 2016, sec. 4.2). Pure numpy.

S states, A actions (`--mdp_states`, `--mdp_actions`: 10 and 5 by default), episodes of H steps
(`--mdp_episode_steps`, 10; `--max_episode_steps` > 0 overrides it). The horizon is part of the task: an episode
*terminates* at step H (the objective is the total reward of a trial of such episodes, nothing after it), so
learners never bootstrap a value past a trial's end; make_env's TimeLimit at the same H never cuts first.
A task draws reward means R[s, a] ~ N(1, 1) and transition rows P[s, a, .] ~ Dirichlet(1, ..., 1). Every episode
starts in state 0; in state s action a pays R[s, a] + N(0, 1) and moves to s' ~ P[s, a, .]. The observation is
the one-hot of the state (S float32). Task dict: 'r_{s}_{a}' = R[s, a] and 'p_{s}_{a}_{s2}' = P[s, a, s2]
(S*A + S*A*S floats; `mdp_arrays` turns one back into arrays). The step noise and transitions come from the
env's `np_random` (seeded by `reset(seed=...)`)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from numpy.typing import NDArray

from appo.envs.meta.tasks import Task, TaskEnvMixin

_R_KEY = re.compile(r"r_(\d+)_(\d+)$")


def mdp_keys(num_states: int, num_actions: int) -> tuple[str, ...]:
    """The task keys of an S x A MDP: rewards first, then transitions, in (s, a, s2) order."""
    rewards = [f"r_{s}_{a}" for s in range(num_states) for a in range(num_actions)]
    moves = [f"p_{s}_{a}_{t}" for s in range(num_states) for a in range(num_actions) for t in range(num_states)]
    return tuple(rewards + moves)


def mdp_arrays(task: Mapping[str, float]) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    """(R of shape (S, A), P of shape (S, A, S)) of a tabular_mdp task; the sizes are read off its keys."""
    pairs = [m.groups() for m in map(_R_KEY.match, task) if m]
    if not pairs:
        raise ValueError("not a tabular_mdp task: no 'r_{s}_{a}' keys")
    num_states = 1 + max(int(s) for s, _ in pairs)
    num_actions = 1 + max(int(a) for _, a in pairs)
    rewards = np.array([task[f"r_{s}_{a}"] for s in range(num_states) for a in range(num_actions)])
    moves = np.array([task[k] for k in mdp_keys(num_states, num_actions)[num_states * num_actions :]])
    return rewards.reshape(num_states, num_actions), moves.reshape(num_states, num_actions, num_states)


class TabularMDPEnv(TaskEnvMixin, gym.Env[NDArray[np.float32], np.int64]):
    """tabular_mdp: a random S-state, A-action MDP per task. See the module docstring."""

    metadata = {"render_modes": []}
    default_episode_steps = 10

    def __init__(
        self,
        task: Mapping[str, float] | None = None,
        num_states: int = 10,
        num_actions: int = 5,
        episode_steps: int = 10,
        render_mode: str | None = None,
    ) -> None:
        if render_mode is not None:
            raise ValueError(f"tabular_mdp has no render modes (got render_mode={render_mode!r})")
        if int(num_states) < 1 or int(num_actions) < 1 or int(episode_steps) < 1:
            raise ValueError(
                f"tabular_mdp needs states, actions, steps >= 1: {num_states}, {num_actions}, {episode_steps}"
            )
        self.render_mode = render_mode
        self.num_states, self.num_actions = int(num_states), int(num_actions)
        # Read by make_env's TimeLimit (envs/__init__.py `_project_env`) from the instance, not the class.
        self.default_episode_steps = int(episode_steps)
        self.task_keys = mdp_keys(self.num_states, self.num_actions)
        self.observation_space = spaces.Box(0.0, 1.0, shape=(self.num_states,), dtype=np.float32)
        self.action_space = spaces.Discrete(self.num_actions)
        self._state, self._t = 0, 0
        self._init_task(task)

    def _sample_continuous(self, n: int, rng: np.random.Generator) -> list[Task]:
        s, a = self.num_states, self.num_actions
        tasks = []
        for _ in range(n):
            rewards = rng.normal(1.0, 1.0, size=s * a)
            moves = rng.dirichlet(np.ones(s), size=s * a).reshape(-1)
            tasks.append(dict(zip(self.task_keys, map(float, np.concatenate([rewards, moves])), strict=True)))
        return tasks

    def set_task(self, task: Mapping[str, float]) -> None:
        super().set_task(task)
        rewards, moves = mdp_arrays(self._task)
        if rewards.shape != (self.num_states, self.num_actions) or np.any(moves < 0):
            raise ValueError("tabular_mdp task: wrong sizes or negative transition probabilities")
        self._rewards = rewards
        cumulative = np.cumsum(moves, axis=-1)
        self._cumulative = cumulative / cumulative[..., -1:]  # exact row sums of 1 for the inverse-CDF draw

    def _obs(self) -> NDArray[np.float32]:
        obs = np.zeros(self.num_states, dtype=np.float32)
        obs[self._state] = 1.0
        return obs

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[NDArray[np.float32], dict[str, Any]]:
        super().reset(seed=seed)
        self._state, self._t = 0, 0
        return self._obs(), {"task": self.get_task(), "state": 0}

    def step(self, action: Any) -> tuple[NDArray[np.float32], float, bool, bool, dict[str, Any]]:
        a = int(np.asarray(action).reshape(()))
        if not 0 <= a < self.num_actions:
            raise ValueError(f"action {a} is not in [0, {self.num_actions})")
        s = self._state
        reward = float(self._rewards[s, a] + self.np_random.normal())
        u = self.np_random.random()
        self._state = min(int(np.searchsorted(self._cumulative[s, a], u, side="right")), self.num_states - 1)
        self._t += 1
        terminated = self._t >= self.default_episode_steps  # the finite horizon: an end, not a time limit
        return self._obs(), reward, terminated, False, {"task": self.get_task(), "state": self._state}
