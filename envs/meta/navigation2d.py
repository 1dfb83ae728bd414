"""2D point navigation (MAML: Finn et al. 2017, sec. 5.3; pytorch-maml-rl's 2DNavigation-v0). Pure numpy.

A point starts at the origin; an action a in [-1, 1]^2 (clipped) moves it by the velocity `max_speed * a`
(0.1 by default, so each axis moves at most 0.1 per step, as in the references, which take the velocity
itself as the action and clip it to [-0.1, 0.1]). The action is normalised like the MuJoCo envs' so that a
Gaussian policy's noise has the same meaning here as there: with the velocity as the action, the preset's
initial std (~0.2) was twice the box, most actions were clipped, and the means drifted far outside it where
the clipped actions give no gradient. The
reward is minus the Euclidean distance to the goal after the move; the episode terminates once the position
is within 0.01 of the goal on each axis, |dx| < 0.01 and |dy| < 0.01 (a square, as in cbfinn/maml_rl and
pytorch-maml-rl, not the Euclidean disc), so a corner at Euclidean 0.0127 ends it. The time limit, 100 steps
by default, is the TimeLimit that `make_env` applies. Task {'goal_x', 'goal_y'} ~ U[-0.5, 0.5]^2. Observation:
the position, float32."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from numpy.typing import NDArray

from appo.envs.meta.tasks import Task, TaskEnvMixin


class Navigation2DEnv(TaskEnvMixin, gym.Env[NDArray[np.float32], NDArray[np.float32]]):
    """navigation2d: reach a goal point. See the module docstring for the dynamics and the reward."""

    metadata = {"render_modes": []}
    task_keys = ("goal_x", "goal_y")

    def __init__(
        self,
        task: Mapping[str, float] | None = None,
        goal_low: float = -0.5,
        goal_high: float = 0.5,
        max_speed: float = 0.1,
        goal_radius: float = 0.01,
        render_mode: str | None = None,
    ) -> None:
        if render_mode is not None:
            raise ValueError(f"navigation2d has no render modes (got render_mode={render_mode!r})")
        self.render_mode = render_mode
        self.goal_low, self.goal_high = float(goal_low), float(goal_high)
        self.max_speed, self.goal_radius = float(max_speed), float(goal_radius)
        self.observation_space = spaces.Box(-np.inf, np.inf, shape=(2,), dtype=np.float32)
        self.action_space = spaces.Box(-1.0, 1.0, shape=(2,), dtype=np.float32)
        self._position = np.zeros(2, dtype=np.float64)
        self._goal = np.zeros(2, dtype=np.float64)
        self._init_task(task)

    def _sample_continuous(self, n: int, rng: np.random.Generator) -> list[Task]:
        goals = rng.uniform(self.goal_low, self.goal_high, size=(n, 2))
        return [{"goal_x": float(x), "goal_y": float(y)} for x, y in goals]

    def set_task(self, task: Mapping[str, float]) -> None:
        super().set_task(task)
        self._goal = np.array([self._task["goal_x"], self._task["goal_y"]], dtype=np.float64)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[NDArray[np.float32], dict[str, Any]]:
        super().reset(seed=seed)
        self._position = np.zeros(2, dtype=np.float64)
        return self._position.astype(np.float32), {"task": self.get_task()}

    def step(self, action: NDArray[np.float32]) -> tuple[NDArray[np.float32], float, bool, bool, dict[str, Any]]:
        # Python floats, not 2-element numpy arrays: the same float64 arithmetic at a third of the cost per step
        # (MAML-TRPO steps navigation2d millions of times per run).
        ax, ay = np.asarray(action, dtype=np.float64).reshape(2).tolist()
        (px, py), (gx, gy) = self._position.tolist(), self._goal.tolist()
        x = px + self.max_speed * min(max(ax, -1.0), 1.0)
        y = py + self.max_speed * min(max(ay, -1.0), 1.0)
        self._position = np.array([x, y])
        dx, dy = x - gx, y - gy
        distance = float(np.hypot(dx, dy))  # numpy's hypot: math.hypot differs in the last bit
        # Per-axis test, as in the MAML references: the reward is Euclidean but the goal region is a square.
        reached = abs(dx) < self.goal_radius and abs(dy) < self.goal_radius
        info = {"task": self.get_task(), "distance": distance}
        return np.array([x, y], dtype=np.float32), -distance, reached, False, info
