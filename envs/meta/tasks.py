"""Meta-task protocol, the shared task bookkeeping of the project's env families, and train/test task splits.

A task is a small dict of named floats (e.g. ``{"direction": -1.0}`` or ``{"goal_x": 0.3, "goal_y": -0.1}``).
An env of a task family samples tasks from its distribution (a pure function of the rng it is given), keeps
one current task, and only ``set_task`` changes it: ``reset()`` never does. This module imports neither
MuJoCo nor any env module, so it is cheap to import."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, ClassVar, Protocol, runtime_checkable

import gymnasium as gym
import numpy as np

Task = dict[str, float]

# Episode length of every project env unless `max_episode_steps` overrides it (as in the MAML papers).
DEFAULT_EPISODE_STEPS = 100


@runtime_checkable
class TaskFamily(Protocol):
    """What a meta-task env offers. `finite_tasks` is the whole task set of a finite family, else None."""

    finite_tasks: list[Task] | None

    def sample_tasks(self, n: int, rng: np.random.Generator) -> list[Task]:
        """`n` tasks drawn i.i.d. from the family's task distribution; depends on `rng` alone."""
        ...

    def set_task(self, task: Task) -> None:
        """Make `task` the current task (from the next step on; the episode in progress is not reset)."""
        ...

    def get_task(self) -> Task:
        """A copy of the current task."""
        ...


class TaskEnvMixin:
    """Task bookkeeping shared by the project's families; mix in before the gymnasium Env base class.

    Subclasses set `task_keys`, and either `finite_tasks` or override `_sample_continuous`. The env calls
    `_init_task(task)` in its constructor: with None it takes the first task of a sample seeded with 0."""

    task_keys: ClassVar[tuple[str, ...]] = ()
    finite_tasks: ClassVar[list[Task] | None] = None
    default_episode_steps: ClassVar[int] = DEFAULT_EPISODE_STEPS
    _task: Task

    def _init_task(self, task: Mapping[str, float] | None) -> None:
        if task is None:
            task = self.sample_tasks(1, np.random.default_rng(0))[0]
        self.set_task(task)

    def sample_tasks(self, n: int, rng: np.random.Generator) -> list[Task]:
        """`n` i.i.d. tasks: uniform over `finite_tasks` for a finite family, else `_sample_continuous`."""
        if n < 0:
            raise ValueError(f"cannot sample {n} tasks")
        if self.finite_tasks is not None:
            return [dict(self.finite_tasks[i]) for i in rng.integers(len(self.finite_tasks), size=n)]
        return self._sample_continuous(n, rng)

    def _sample_continuous(self, n: int, rng: np.random.Generator) -> list[Task]:
        raise NotImplementedError

    def set_task(self, task: Mapping[str, float]) -> None:
        """Make `task` current; it must have exactly `task_keys`, finite values, and be in `finite_tasks`."""
        if set(task) != set(self.task_keys):
            raise ValueError(f"{type(self).__name__} task needs keys {list(self.task_keys)}, got {sorted(task)}")
        clean = {key: float(task[key]) for key in self.task_keys}
        if not all(math.isfinite(v) for v in clean.values()):
            raise ValueError(f"{type(self).__name__} task has non-finite values: {clean}")
        if self.finite_tasks is not None and clean not in self.finite_tasks:
            raise ValueError(f"{type(self).__name__} task {clean} is not one of {self.finite_tasks}")
        self._task = clean
        ezpickle_kwargs = getattr(self, "_ezpickle_kwargs", None)
        if isinstance(ezpickle_kwargs, dict):  # MuJoCo envs pickle by re-construction: keep the current task
            ezpickle_kwargs["task"] = dict(clean)

    def get_task(self) -> Task:
        """A copy of the current task."""
        return dict(self._task)


class VelocityTasks:
    """Mixin (before the env class) for target-speed families: task {'velocity': v}, v ~ U[task_low,
    task_high], with `default_task_high` per family; the bounds are kept for pickling."""

    task_keys: ClassVar[tuple[str, ...]] = ("velocity",)
    default_task_high: ClassVar[float] = 1.0

    def __init__(
        self,
        task: Mapping[str, float] | None = None,
        task_low: float = 0.0,
        task_high: float | None = None,
        **kwargs: Any,
    ) -> None:
        self.task_low = float(task_low)
        self.task_high = float(self.default_task_high if task_high is None else task_high)
        super().__init__(task=task, **kwargs)
        self._ezpickle_kwargs.update(task_low=self.task_low, task_high=self.task_high)

    def _sample_continuous(self, n: int, rng: np.random.Generator) -> list[Task]:
        return [{"velocity": float(v)} for v in rng.uniform(self.task_low, self.task_high, size=n)]


def task_family(env: gym.Env) -> TaskFamily:
    """The task family under `env`'s wrappers (gymnasium wrappers do not forward `set_task`)."""
    base = getattr(env, "unwrapped", env)
    if not isinstance(base, TaskFamily):
        raise TypeError(f"{type(base).__name__} is not a task family (needs sample_tasks/set_task/get_task)")
    return base


def _task_key(task: Task) -> tuple[tuple[str, float], ...]:
    return tuple(sorted(task.items()))


def task_split(env: gym.Env, num_train: int, num_test: int, seed: int) -> tuple[list[Task], list[Task]]:
    """Seeded, deterministic train and test task lists for `env`'s family (wrappers allowed).

    Continuous families: `num_train` train tasks and `num_test` test tasks, disjoint (no test task equals a
    train task, nor another test task). Train and test come from independent streams spawned from `seed`, so
    the train tasks for a seed do not depend on `num_test`.

    Finite families (those with `finite_tasks`, e.g. ant_dir and half_cheetah_dir with directions -1/+1):
    both lists are the full task set, in `finite_tasks` order, whatever `num_train`/`num_test` are; there
    are not enough tasks to hold any out, so such families measure adaptation, not generalisation."""
    family = task_family(env)
    if family.finite_tasks is not None:
        return [dict(t) for t in family.finite_tasks], [dict(t) for t in family.finite_tasks]
    if num_train < 0 or num_test < 0:
        raise ValueError(f"task_split needs num_train, num_test >= 0, got {num_train}, {num_test}")
    train_seq, test_seq = np.random.SeedSequence(seed).spawn(2)
    train = family.sample_tasks(num_train, np.random.default_rng(train_seq))
    seen = {_task_key(t) for t in train}
    test_rng = np.random.default_rng(test_seq)
    test: list[Task] = []
    for _ in range(100):  # a draw equal to an earlier task has probability ~0; bound the loop anyway
        if len(test) == num_test:
            break
        for task in family.sample_tasks(num_test - len(test), test_rng):
            if _task_key(task) not in seen:
                seen.add(_task_key(task))
                test.append(task)
    if len(test) < num_test:
        raise RuntimeError(f"could not draw {num_test} test tasks disjoint from the train tasks")
    return train, test
