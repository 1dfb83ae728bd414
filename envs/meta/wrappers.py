"""MetaTaskWrapper: turns a task-family env into trials for the engine.

A *trial* is what the engine sees as one episode: `episodes_per_trial` episodes of the inner env on one
task, given by `reset(options={"task": ...})` (in a run: the actor's EnvRunner, from the control channel or
the env's task assigner) or else drawn from the wrapper's schedule (envs/meta/schedules.py) when the trial
starts. Inner episode ends inside a trial are hidden from the engine, so the recurrent state is carried
across them and reset only at trial boundaries (RL^2). A trial ends as its last episode ends: a termination,
or a truncation at the inner env's time limit.

Observations are augmented by `visibility`:
- hidden (meta-RL): the previous action, the previous reward and a flag that an inner episode just ended
  are appended, so the policy can infer the task from its own experience;
- visible (multi-task baseline): the task's values are appended.
At a trial's end `info["trial"]` holds the return and length of each of its episodes and the task.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from appo.envs.meta.schedules import TaskSchedule
from appo.envs.meta.tasks import Task, task_family


def _action_width(space: gym.Space) -> int:
    return int(space.n) if isinstance(space, gym.spaces.Discrete) else int(np.prod(space.shape))


class MetaTaskWrapper(gym.Wrapper):
    def __init__(self, env: gym.Env, schedule: TaskSchedule, visibility: str) -> None:
        super().__init__(env)
        if visibility not in ("hidden", "visible"):
            raise ValueError(f"--task_visibility={visibility}: must be hidden or visible")
        self.family = task_family(env)
        self.schedule = schedule
        self.visibility = visibility
        self.task_keys = sorted(self.family.get_task())
        base = env.observation_space
        # Fixed per env, so the per-step augmentation only copies (it runs at every step of every actor's env).
        self.obs_size = int(np.prod(base.shape))
        self.action_width = _action_width(env.action_space)
        self.is_discrete = isinstance(env.action_space, gym.spaces.Discrete)
        self.action_start = int(env.action_space.start) if self.is_discrete else 0  # Discrete(n, start=k)'s k
        extra = self.action_width + 2 if visibility == "hidden" else len(self.task_keys)
        size = self.obs_size + extra
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, (size,), np.float32)
        self.task: Task = self.family.get_task()
        self.last_trial_return: float | None = None
        self.returns: list[float] = []
        self.lengths: list[int] = []

    def _augment(self, obs: np.ndarray, action: Any, reward: float, inner_done: bool) -> np.ndarray:
        """[obs, then the task (visible) or the previous action (one-hot if discrete), reward and inner done]."""
        out = np.empty(self.observation_space.shape[0], dtype=np.float32)
        n = self.obs_size
        out[:n] = np.asarray(obs).reshape(-1)
        if self.visibility == "visible":
            out[n:] = [self.task[k] for k in self.task_keys]
            return out
        out[n : n + self.action_width] = 0.0
        if action is not None:
            if self.is_discrete:
                out[n + int(action) - self.action_start] = 1.0
            else:
                out[n : n + self.action_width] = np.asarray(action).reshape(-1)
        out[-2] = reward
        out[-1] = float(inner_done)
        return out

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        """Start a new trial on `options["task"]`: in a run the actor's EnvRunner chooses every trial's task
        (appo/protocol/control.py). Without it (standalone: the evaluator's meta-test, enjoy.py) the wrapper's own
        schedule picks. Either way the trial lasts the schedule's `episodes_per_trial` episodes."""
        if options is not None and "task" in options:
            self.task = dict(options["task"])
            options = {k: v for k, v in options.items() if k != "task"} or None  # the inner env's own options
        else:
            self.task = self.schedule.next_task(self.last_trial_return)
        self.family.set_task(self.task)
        obs, info = self.env.reset(seed=seed, options=options)
        self.returns, self.lengths = [0.0], [0]
        return self._augment(obs, None, 0.0, False), info

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.returns[-1] += float(reward)
        self.lengths[-1] += 1
        inner_done = terminated or truncated
        trial_over = False
        if inner_done:
            if len(self.returns) < self.schedule.episodes_per_trial:
                obs, _ = self.env.reset()  # same task: the trial goes on
                self.returns.append(0.0)
                self.lengths.append(0)
            else:
                trial_over = True
                self.last_trial_return = sum(self.returns)
                info["trial"] = {"returns": list(self.returns), "lengths": list(self.lengths), "task": self.task}
        # The trial ends as its last episode did: at a time limit it is a truncation, so --value_bootstrap
        # bootstraps there as for any time limit (a policy that cannot see the clock would otherwise learn the
        # second episode from returns that shrink to nothing towards the trial's end).
        ends = (trial_over and terminated, trial_over and not terminated)
        return self._augment(obs, action, float(reward), inner_done), float(reward), *ends, info


def task_bucket(task: Task) -> str:
    """A short label grouping tasks for per-task statistics: values rounded to the nearest 0.5, so a
    continuous family gets a handful of buckets (ant_vel: 7) rather than one per task. A task of more than
    MAX_BUCKET_KEYS values (a bandit's arms, a tabular MDP's tables: hundreds) is labelled by the mean of its
    values alone, rounded the same way: one tensorboard tag per value would be kilobytes long and one per task."""
    if len(task) > MAX_BUCKET_KEYS:
        mean = sum(task.values()) / len(task)
        return f"mean_of_{len(task)}={round(mean * 2) / 2:+.1f}"
    return ",".join(f"{k}={round(v * 2) / 2:+.1f}" for k, v in sorted(task.items()))


MAX_BUCKET_KEYS = 4
