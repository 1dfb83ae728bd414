"""Task schedules: which task an env runs next, and how many episodes a trial lasts. Pure objects with a
seeded rng and no env in sight. A schedule answers with an index into the task list it was given
(`next_index`), so the one choosing (an actor's EnvRunner through a `TaskAssigner`, which the control channel
can override) can name the task by that index; standalone, envs/meta/wrappers.py asks `next_task` at every trial
start (the evaluator's meta-test, enjoy.py).

- per_episode: a new task every episode (trials of one episode).
- per_trial: a new task every `episodes_per_trial` episodes; the recurrent state is carried across the
  episodes of a trial and reset only between trials (RL^2, Duan et al. 2016).
- fixed: one task per env for the whole run, spread over the task set by env index.
- curriculum: tasks ordered by difficulty (norm of the task values: slower target velocities and nearer
  goals first); the env samples from the easiest fraction, widened as its average trial return rises.
- sequence: the given tasks in order, one trial each (meta-test on held-out tasks).
"""

from __future__ import annotations

import math

import numpy as np

from appo.envs.meta.tasks import Task

SCHEDULES = ("none", "per_episode", "per_trial", "fixed", "curriculum")


class TaskSchedule:
    """Uniform random tasks from `tasks`, trials of `episodes_per_trial` episodes."""

    def __init__(self, tasks: list[Task], episodes_per_trial: int, seed: int) -> None:
        if not tasks:
            raise ValueError("a task schedule needs at least one task")
        self.tasks = tasks
        self.episodes_per_trial = episodes_per_trial
        self.rng = np.random.default_rng(seed)

    def next_index(self, last_trial_return: float | None) -> int:
        """The next trial's task, as an index into `tasks`; `last_trial_return` is the return of the env's
        previous trial (None before its first)."""
        return int(self.rng.integers(len(self.tasks)))

    def next_task(self, last_trial_return: float | None) -> Task:
        """A copy of the next trial's task (`next_index` looked up in `tasks`)."""
        return dict(self.tasks[self.next_index(last_trial_return)])


class FixedSchedule(TaskSchedule):
    def __init__(self, tasks: list[Task], episodes_per_trial: int, env_idx: int) -> None:
        super().__init__(tasks, episodes_per_trial, seed=env_idx)
        self.index = env_idx % len(tasks)

    def next_index(self, last_trial_return: float | None) -> int:
        return self.index


class SequenceSchedule(TaskSchedule):
    def __init__(self, tasks: list[Task], episodes_per_trial: int) -> None:
        super().__init__(tasks, episodes_per_trial, seed=0)
        self.index = 0

    def next_index(self, last_trial_return: float | None) -> int:
        index = self.index % len(self.tasks)
        self.index += 1
        return index


class CurriculumSchedule(TaskSchedule):
    """Starts on the easiest `start` fraction of the tasks; every `window` trials, if the running average
    trial return rose since the last check, `step` more of the task set opens up."""

    def __init__(
        self,
        tasks: list[Task],
        episodes_per_trial: int,
        seed: int,
        start: float = 0.25,
        step: float = 0.1,
        window: int = 10,
    ) -> None:
        super().__init__(tasks, episodes_per_trial, seed)
        # Indices into `tasks`, easiest first (a stable sort: equally hard tasks keep their given order).
        self.order = sorted(range(len(tasks)), key=lambda i: difficulty(tasks[i]))
        self.fraction, self.step, self.window = start, step, window
        self.average: float | None = None
        self.last_check: float | None = None
        self.trials = 0

    def next_index(self, last_trial_return: float | None) -> int:
        if last_trial_return is not None:
            self._observe(last_trial_return)
        open_tasks = max(1, math.ceil(self.fraction * len(self.tasks)))
        return self.order[int(self.rng.integers(open_tasks))]

    def _observe(self, trial_return: float) -> None:
        self.trials += 1
        self.average = trial_return if self.average is None else 0.9 * self.average + 0.1 * trial_return
        if self.trials % self.window == 0:
            if self.last_check is not None and self.average > self.last_check:
                self.fraction = min(1.0, self.fraction + self.step)
            self.last_check = self.average


class TaskAssigner:
    """An env's own task assigner in a run: the run's train tasks and the schedule that draws from them for
    that env. The actor's EnvRunner asks it at each trial start of the env whose control-channel TASK cell
    is free (appo/protocol/control.py); `next` answers an index into `tasks`, the unit the control channel speaks."""

    def __init__(self, tasks: list[Task], schedule: TaskSchedule) -> None:
        self.tasks = tasks
        self.schedule = schedule

    def next(self, last_trial_return: float | None) -> int:
        """The env's next task as an index into `tasks`, given its previous trial's return (None: none yet)."""
        return self.schedule.next_index(last_trial_return)


def difficulty(task: Task) -> float:
    return math.sqrt(sum(v * v for v in task.values()))


def make_schedule(name: str, tasks: list[Task], episodes_per_trial: int, env_idx: int, seed: int) -> TaskSchedule:
    """The schedule called `name` for env number `env_idx` (its own rng stream)."""
    stream = seed * 1_000_003 + env_idx
    if name == "per_episode":
        return TaskSchedule(tasks, 1, stream)
    if name == "per_trial":
        return TaskSchedule(tasks, episodes_per_trial, stream)
    if name == "fixed":
        return FixedSchedule(tasks, episodes_per_trial, env_idx)
    if name == "curriculum":
        return CurriculumSchedule(tasks, episodes_per_trial, stream)
    if name == "sequence":
        return SequenceSchedule(tasks, episodes_per_trial)
    raise ValueError(f"--task_schedule={name}: must be one of {', '.join(SCHEDULES)}")
