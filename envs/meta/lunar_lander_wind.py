"""lunar_lander_wind: gymnasium's LunarLander-v3 (continuous actions: 2 engine throttles) with its wind switched on,
the tasks being the wind's strength. A task is {'wind_power': w, 'turbulence_power': t}, drawn uniformly from
w in [0, 20] and t in [0, 2] (gymnasium's recommended ranges; with enable_wind the defaults are 15 and 1.5). The
wind is gymnasium's: a horizontal force tanh(sin(2 k x) + sin(pi k x)) * w and a torque of the same form * t,
k = 0.01, its phase x drawn from the env's generator at every reset. Everything else (dynamics, observation,
rewards, termination, 1000-step limit) is LunarLander-v3's; the constructor's `continuous=False` gives its 4
discrete actions instead. Needs the box2d extra (`pip install -e '.[box2d]'`).

(In DH-MAML, the seed system, the wind is never switched on, so its "tasks" are all the same env: here two tasks
give different trajectories for the same actions and seed: tests/unit/test_lander_humanoid.py.)"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

import numpy as np
from gymnasium.envs.box2d.lunar_lander import LunarLander
from gymnasium.utils import EzPickle

from appo.envs.meta.tasks import Task, TaskEnvMixin

WIND_POWER = (0.0, 20.0)
TURBULENCE_POWER = (0.0, 2.0)


class LunarLanderWindEnv(TaskEnvMixin, LunarLander):
    task_keys = ("turbulence_power", "wind_power")
    default_episode_steps: ClassVar[int] = 1000

    def __init__(self, task: Mapping[str, float] | None = None, continuous: bool = True, **kwargs: Any) -> None:
        LunarLander.__init__(self, continuous=continuous, enable_wind=True, **kwargs)
        # Pickle and deep-copy (EzPickle re-constructs the env) with this signature's keyword arguments: LunarLander
        # records its own positionally, and the task (kept current by set_task) would not fit them.
        EzPickle.__init__(self, task=None if task is None else dict(task), continuous=continuous, **kwargs)
        self._init_task(task)

    def _sample_continuous(self, n: int, rng: np.random.Generator) -> list[Task]:
        wind = rng.uniform(*WIND_POWER, size=n)
        turbulence = rng.uniform(*TURBULENCE_POWER, size=n)
        return [{"turbulence_power": float(t), "wind_power": float(w)} for w, t in zip(wind, turbulence, strict=True)]

    def set_task(self, task: Mapping[str, float]) -> None:
        super().set_task(task)
        self.wind_power = self._task["wind_power"]  # read by LunarLander.step at every step
        self.turbulence_power = self._task["turbulence_power"]

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = super().step(action)
        return obs, reward, terminated, truncated, {**info, "task": self.get_task()}
