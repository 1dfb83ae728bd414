"""humanoid_dir: gymnasium's Humanoid-v5 running forward or backward (the direction-conditioned Humanoid of the
MAML and ProMP benchmarks, like ant_dir). Humanoid-v5's dynamics, observation, termination (torso z outside
[1.0, 2.0]), cost weights and survive bonus are kept; the task term replaces its forward reward:

    reward = direction * reward_forward + reward_survive + reward_ctrl + reward_contact

where reward_forward = 1.25 * x_velocity is Humanoid-v5's own (info keeps it; `info["reward_task"]` is the
signed term, `info["task"]` the current task). Episodes of 200 steps unless --max_episode_steps says otherwise.
Importing this module imports MuJoCo; `envs/__init__.py` only imports it when an env is built."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np
from gymnasium import utils
from gymnasium.envs.mujoco.humanoid_v5 import HumanoidEnv
from numpy.typing import NDArray

from appo.envs.meta.tasks import TaskEnvMixin


class HumanoidDirEnv(TaskEnvMixin, HumanoidEnv):
    """task {'direction': +1 or -1}; reward_task = direction * 1.25 * x_velocity."""

    task_keys = ("direction",)
    finite_tasks = [{"direction": -1.0}, {"direction": 1.0}]
    default_episode_steps: ClassVar[int] = 200

    def __init__(self, task: Mapping[str, float] | None = None, **kwargs: Any) -> None:
        HumanoidEnv.__init__(self, **kwargs)
        # Pickle (EzPickle re-constructs the env) with this signature's keyword arguments, not Humanoid-v5's.
        utils.EzPickle.__init__(self, task=None if task is None else dict(task), **kwargs)
        self._init_task(task)

    def step(self, action: NDArray[np.float32]) -> tuple[NDArray[np.float64], float, bool, bool, dict[str, Any]]:
        obs, _, terminated, truncated, info = super().step(action)
        task_reward = self._task["direction"] * float(info["reward_forward"])
        info["reward_task"] = task_reward
        info["task"] = self.get_task()
        reward = task_reward + info["reward_survive"] + info["reward_ctrl"] + info["reward_contact"]
        return obs, float(reward), terminated, truncated, info

    def _get_reset_info(self) -> dict[str, Any]:
        return {**super()._get_reset_info(), "task": self.get_task()}
