"""HalfCheetah meta-task families on gymnasium's HalfCheetah-v5 model (MAML: Finn et al. 2017; ProMP; PEARL).

Both families keep HalfCheetah-v5's dynamics, observation and info keys (no termination), with MAML's control
cost 0.05 * sum(a^2); the task term replaces HalfCheetah-v5's forward reward:

    reward = info["reward_task"] + info["reward_ctrl"]

(`reward_forward` is dropped from info; `info["task"]` is the current task.) Importing this module imports
MuJoCo; `envs/__init__.py` only imports it when an env is built."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from gymnasium import utils
from gymnasium.envs.mujoco.half_cheetah_v5 import HalfCheetahEnv
from numpy.typing import NDArray

from appo.envs.meta.tasks import TaskEnvMixin, VelocityTasks

CTRL_COST_WEIGHT = 0.05


class _HalfCheetahTaskEnv(TaskEnvMixin, HalfCheetahEnv):
    """HalfCheetah-v5 with MAML's control cost; subclasses define `task_keys`, the sampler and `_task_reward`.

    `task` None takes the family's default task; other kwargs go to HalfCheetah-v5 (render_mode, ...)."""

    def __init__(self, task: Mapping[str, float] | None = None, **kwargs: Any) -> None:
        kwargs.setdefault("ctrl_cost_weight", CTRL_COST_WEIGHT)
        HalfCheetahEnv.__init__(self, **kwargs)
        # Pickle (EzPickle re-constructs the env) with this signature's keyword arguments.
        utils.EzPickle.__init__(self, task=None if task is None else dict(task), **kwargs)
        self._init_task(task)

    def control_cost(self, action: NDArray[np.float32]) -> float:
        # In float64: gymnasium's version keeps a float32 action's precision (about 1e-8 off).
        return self._ctrl_cost_weight * float(np.sum(np.square(np.asarray(action, dtype=np.float64))))

    def _task_reward(self, x_velocity: float) -> float:
        raise NotImplementedError

    def step(self, action: NDArray[np.float32]) -> tuple[NDArray[np.float64], float, bool, bool, dict[str, Any]]:
        obs, _, terminated, truncated, info = super().step(action)
        del info["reward_forward"]
        task_reward = self._task_reward(float(info["x_velocity"]))
        info["reward_task"] = task_reward
        info["task"] = self.get_task()
        return obs, float(task_reward + info["reward_ctrl"]), terminated, truncated, info

    def _get_reset_info(self) -> dict[str, Any]:
        return {**super()._get_reset_info(), "task": self.get_task()}


class HalfCheetahVelEnv(VelocityTasks, _HalfCheetahTaskEnv):
    """half_cheetah_vel: run at a target speed. task {'velocity': v}, v ~ U[task_low, task_high] = U[0, 2]
    (`task_high=3` widens it); reward_task = -|x_velocity - v|."""

    default_task_high = 2.0

    def _task_reward(self, x_velocity: float) -> float:
        return -abs(x_velocity - self._task["velocity"])


class HalfCheetahDirEnv(_HalfCheetahTaskEnv):
    """half_cheetah_dir: run forward or backward. task {'direction': +1 or -1};
    reward_task = direction * x_velocity."""

    task_keys = ("direction",)
    finite_tasks = [{"direction": -1.0}, {"direction": 1.0}]

    def _task_reward(self, x_velocity: float) -> float:
        return self._task["direction"] * x_velocity
