"""Ant meta-task families on gymnasium's Ant-v5 model (MAML: Finn et al. 2017; ProMP; PEARL).

Every family keeps Ant-v5's dynamics, observation, termination (torso z outside [0.2, 1.0]) and info keys,
with the MAML cost weights: ctrl_cost = 0.005 * sum(a^2), contact_cost = 0.0005 * sum(clip(cfrc_ext, -1, 1)^2),
and a survive bonus paid on healthy steps. The task term replaces Ant-v5's forward reward:

    reward = info["reward_task"] + info["reward_ctrl"] + info["reward_contact"] + info["reward_survive"]

(`reward_forward` is dropped from info as it is not part of these rewards; `info["task"]` is the current
task.) Importing this module imports MuJoCo; `envs/__init__.py` only imports it when an env is built."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, ClassVar

import mujoco
import numpy as np
from gymnasium import utils
from gymnasium.envs.mujoco.ant_v5 import AntEnv
from numpy.typing import NDArray

from appo.envs.meta.tasks import Task, TaskEnvMixin, VelocityTasks

CTRL_COST_WEIGHT = 5e-3
CONTACT_COST_WEIGHT = 5e-4
SURVIVE_REWARD = 0.05


class _AntTaskEnv(TaskEnvMixin, AntEnv):
    """Ant-v5 with MAML's cost weights; subclasses define `task_keys`, the task sampler and `_task_reward`.

    `task` None takes the family's default task; other kwargs go to Ant-v5 (render_mode, reset_noise_scale...)."""

    survive_reward: ClassVar[float] = SURVIVE_REWARD
    exclude_positions: ClassVar[bool] = True

    def __init__(self, task: Mapping[str, float] | None = None, **kwargs: Any) -> None:
        kwargs.setdefault("ctrl_cost_weight", CTRL_COST_WEIGHT)
        kwargs.setdefault("contact_cost_weight", CONTACT_COST_WEIGHT)
        kwargs.setdefault("healthy_reward", self.survive_reward)
        kwargs.setdefault("exclude_current_positions_from_observation", self.exclude_positions)
        AntEnv.__init__(self, **kwargs)
        # Pickle (EzPickle re-constructs the env) with this signature's keyword arguments, not Ant-v5's.
        utils.EzPickle.__init__(self, task=None if task is None else dict(task), **kwargs)
        self._init_task(task)

    def control_cost(self, action: NDArray[np.float32]) -> float:
        # In float64: gymnasium's version keeps a float32 action's precision (about 1e-8 off).
        return self._ctrl_cost_weight * float(np.sum(np.square(np.asarray(action, dtype=np.float64))))

    def _step_mujoco_simulation(self, ctrl: NDArray[np.float64], n_frames: int) -> None:
        # cfrc_ext (read by the contact cost and the observation) is only filled by mj_rnePostConstraint in
        # MuJoCo >= 2.0 unless the model has force sensors. Gymnasium 1.x also calls it; we do not rely on that.
        self.data.ctrl[:] = ctrl
        mujoco.mj_step(self.model, self.data, nstep=n_frames)
        mujoco.mj_rnePostConstraint(self.model, self.data)

    def _task_reward(self, info: dict[str, Any]) -> float:
        raise NotImplementedError

    def step(self, action: NDArray[np.float32]) -> tuple[NDArray[np.float64], float, bool, bool, dict[str, Any]]:
        obs, _, terminated, truncated, info = super().step(action)
        del info["reward_forward"]
        task_reward = self._task_reward(info)
        info["reward_task"] = task_reward
        info["task"] = self.get_task()
        reward = task_reward + info["reward_ctrl"] + info["reward_contact"] + info["reward_survive"]
        return obs, float(reward), terminated, truncated, info

    def _get_reset_info(self) -> dict[str, Any]:
        return {**super()._get_reset_info(), "task": self.get_task()}


class AntDirEnv(_AntTaskEnv):
    """ant_dir: run forward or backward. task {'direction': +1 or -1}; reward_task = direction * x_velocity."""

    task_keys = ("direction",)
    finite_tasks = [{"direction": -1.0}, {"direction": 1.0}]

    def _task_reward(self, info: dict[str, Any]) -> float:
        return self._task["direction"] * float(info["x_velocity"])


class AntDir2DEnv(_AntTaskEnv):
    """ant_dir2d: run along a planar direction. task {'angle': theta}, theta ~ U[0, 2*pi);
    reward_task = cos(theta) * x_velocity + sin(theta) * y_velocity."""

    task_keys = ("angle",)

    def _sample_continuous(self, n: int, rng: np.random.Generator) -> list[Task]:
        return [{"angle": float(a)} for a in rng.uniform(0.0, 2.0 * math.pi, size=n)]

    def _task_reward(self, info: dict[str, Any]) -> float:
        angle = self._task["angle"]
        return math.cos(angle) * float(info["x_velocity"]) + math.sin(angle) * float(info["y_velocity"])


class AntVelEnv(VelocityTasks, _AntTaskEnv):
    """ant_vel: run forward at a target speed. task {'velocity': v}, v ~ U[task_low, task_high] = U[0, 3];
    reward_task = -|x_velocity - v| + 1.0."""

    default_task_high = 3.0

    def _task_reward(self, info: dict[str, Any]) -> float:
        return -abs(float(info["x_velocity"]) - self._task["velocity"]) + 1.0


class AntGoalEnv(_AntTaskEnv):
    """ant_goal: walk to a goal position. task {'goal_x', 'goal_y'} ~ U[-3, 3]^2;
    reward_task = -(|x - goal_x| + |y - goal_y|) with (x, y) the torso position after the step, plus a survive
    bonus of 4.0 on healthy steps. The observation keeps the torso x, y (the goal is relative to the origin)."""

    task_keys = ("goal_x", "goal_y")
    survive_reward = 4.0
    exclude_positions = False

    def _sample_continuous(self, n: int, rng: np.random.Generator) -> list[Task]:
        return [{"goal_x": float(x), "goal_y": float(y)} for x, y in rng.uniform(-3.0, 3.0, size=(n, 2))]

    def _task_reward(self, info: dict[str, Any]) -> float:
        distance = abs(float(info["x_position"]) - self._task["goal_x"])
        distance += abs(float(info["y_position"]) - self._task["goal_y"])
        info["goal_distance"] = distance
        return -distance
