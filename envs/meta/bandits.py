"""Multi-armed bandits as task families (RL^2: Duan et al. 2016, sec. 4.1). Pure numpy.

`bandit` (Bernoulli): a task draws arm means p_i ~ U[0, 1], i < K; pulling arm a pays Bernoulli(p_a), 1 or 0.
`gaussian_bandit`: a task draws arm means mu_i ~ N(0, 1); pulling arm a pays N(mu_a, 1).
K is `num_arms` (`--num_arms`, 5 by default). One pull is one episode: an episode is a single step that
terminates, so a trial of n pulls is `--episodes_per_trial=n`. The observation is the constant [0.0]; under
`--task_visibility=hidden` the RL^2 wrapper (envs/meta/wrappers.py) appends the previous action (one-hot), reward
and done, which is all a policy learns the arms from. Tasks: {'p0': p_0, ..., 'p{K-1}': p_{K-1}} (Bernoulli),
{'mu0': ..., 'mu{K-1}': ...} (Gaussian). The pull's randomness comes from the env's `np_random` (seeded by
`reset(seed=...)`), the task's from the rng the tasks are sampled with."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from numpy.typing import NDArray

from appo.envs.meta.tasks import Task, TaskEnvMixin


class BanditEnv(TaskEnvMixin, gym.Env[NDArray[np.float32], np.int64]):
    """bandit: K Bernoulli arms, one pull per episode. See the module docstring."""

    metadata = {"render_modes": []}
    default_episode_steps = 1
    key_prefix = "p"

    def __init__(self, task: Mapping[str, float] | None = None, num_arms: int = 5, render_mode: str | None = None):
        if render_mode is not None:
            raise ValueError(f"{type(self).__name__} has no render modes (got render_mode={render_mode!r})")
        if int(num_arms) < 2:
            raise ValueError(f"num_arms={num_arms}: a bandit needs at least 2 arms")
        self.render_mode = render_mode
        self.num_arms = int(num_arms)
        self.task_keys = tuple(f"{self.key_prefix}{i}" for i in range(self.num_arms))
        self.observation_space = spaces.Box(0.0, 1.0, shape=(1,), dtype=np.float32)
        self.action_space = spaces.Discrete(self.num_arms)
        self._means = np.zeros(self.num_arms)
        self._init_task(task)

    def _sample_means(self, n: int, rng: np.random.Generator) -> NDArray[np.float64]:
        return rng.uniform(0.0, 1.0, size=(n, self.num_arms))

    def _sample_continuous(self, n: int, rng: np.random.Generator) -> list[Task]:
        return [dict(zip(self.task_keys, map(float, row), strict=True)) for row in self._sample_means(n, rng)]

    def set_task(self, task: Mapping[str, float]) -> None:
        super().set_task(task)
        self._means = np.array([self._task[k] for k in self.task_keys], dtype=np.float64)
        self._check_means()

    def _check_means(self) -> None:
        if np.any(self._means < 0.0) or np.any(self._means > 1.0):
            raise ValueError(f"bandit task needs arm probabilities in [0, 1], got {self._means.tolist()}")

    def _pay(self, arm: int) -> float:
        return float(self.np_random.random() < self._means[arm])

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[NDArray[np.float32], dict[str, Any]]:
        super().reset(seed=seed)
        return np.zeros(1, dtype=np.float32), {"task": self.get_task()}

    def step(self, action: Any) -> tuple[NDArray[np.float32], float, bool, bool, dict[str, Any]]:
        arm = int(np.asarray(action).reshape(()))
        if not 0 <= arm < self.num_arms:
            raise ValueError(f"arm {arm} is not in [0, {self.num_arms})")
        reward = self._pay(arm)
        best = float(self._means.max())
        info = {"task": self.get_task(), "regret": best - float(self._means[arm])}
        return np.zeros(1, dtype=np.float32), reward, True, False, info


class GaussianBanditEnv(BanditEnv):
    """gaussian_bandit: K arms paying N(mu_a, 1), mu_i ~ N(0, 1). See the module docstring."""

    key_prefix = "mu"

    def _sample_means(self, n: int, rng: np.random.Generator) -> NDArray[np.float64]:
        return rng.normal(0.0, 1.0, size=(n, self.num_arms))

    def _check_means(self) -> None:
        pass

    def _pay(self, arm: int) -> float:
        return float(self._means[arm] + self.np_random.normal())
