"""The control channel (appo/protocol/control.py) as actor-side EnvRunners see it: with every cell free each env runs
its
own task schedule exactly as the env wrapper used to; an assigned task, policy or weight set takes over from the
env's next episode (trial), and a release hands the env back; invalid values are refused; and the per-step
fields an algorithm asks for (task_ids, episode_ids, weight_sets) say what each step really ran."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch

from appo.config.algorithms import ALGORITHMS, AlgorithmConfig, Traits, register
from appo.config.algorithms.ppo import PPO_PBT_RANGES, PpoCfg, verify_ppo
from appo.config.cfg import Cfg
from appo.config.derive import derive
from appo.envs import UnknownEnvError, make_run_env, make_task_assigner
from appo.envs.meta.schedules import make_schedule
from appo.envs.meta.tasks import Task
from appo.protocol.buffers import allocate_control, allocate_trajectories, numpy_views
from appo.protocol.control import FREE, Assignment, control_channel
from appo.protocol.messages import ActionsReady, InferenceRequest, TrajectoryReady
from appo.sampling.env_runner import EnvRunner

TRIAL_STEPS = 6  # trials of 2 navigation2d episodes of 3 steps (zero actions never reach the goal)


class Recorder(gym.Wrapper):
    """Logs, per env, the task of every step it takes and the info["trial"] of every trial it finishes."""

    def __init__(self, env: gym.Env, steps: list[Task], trials: list[dict]) -> None:
        super().__init__(env)
        self.steps, self.trials = steps, trials

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        self.steps.append(self.env.unwrapped.get_task())  # the task this step runs on
        out = self.env.step(action)
        if "trial" in out[4]:
            self.trials.append(out[4]["trial"])
        return out


class Split:
    """One EnvRunner over recorded navigation2d task envs, its buffers, its control channel, and a driver that
    answers its requests with zero actions and releases every full slot group at once."""

    def __init__(self, cfg: Cfg, worker_idx: int = 0) -> None:
        self.cfg, self.d = cfg, derive(cfg)
        env = make_run_env(cfg)
        self.views = numpy_views(allocate_trajectories(cfg, self.d, env.observation_space, env.action_space))
        self.control = allocate_control(cfg, self.d)
        self.tasks = make_task_assigner(cfg, env, 0).tasks
        self.channel = control_channel(cfg, self.control, len(self.tasks))
        self.step_tasks: dict[int, list[Task]] = defaultdict(list)  # global env index -> task of each step
        self.trials: dict[int, list[dict]] = defaultdict(list)  # global env index -> finished trials
        self.runner = EnvRunner(cfg, self.d, worker_idx, 0, self.views, self._make_env, numpy_views(self.control))
        self.acting: dict[int, list[int]] = defaultdict(list)  # env in split -> weight set asked, per step
        self.rollouts: list[dict[str, np.ndarray]] = []  # per full group: its fields, [env, T]
        self.sent: list[list[TrajectoryReady]] = []  # per full group: the messages to its learners
        self.requests = self.runner.init(seed=cfg.seed)

    def _make_env(self, env_idx: int) -> gym.Env:
        return Recorder(make_run_env(self.cfg, env_idx=env_idx), self.step_tasks[env_idx], self.trials[env_idx])

    def step(self, n: int) -> None:
        """`n` steps of every env of the split."""
        for _ in range(n):
            out: list[Any] = []
            for r in self.requests:
                envs = range(r.num_envs) if r.envs is None else r.envs
                for e in envs:
                    self.acting[e].append(r.policy_id)
                self.views["actions"][r.first_slot + np.asarray(envs), r.t] = 0.0
                out += self.runner.on_actions(ActionsReady(0, 0, r.first_slot, r.t, 0, r.policy_id))
            ready = [m for m in out if type(m) is TrajectoryReady]
            self.requests = [m for m in out if type(m) is InferenceRequest]
            if ready:
                self._snapshot(ready)
                for m in ready:
                    self.requests += self.runner.on_slots_released(m.group_idx, m.policy_id)

    def _snapshot(self, ready: list[TrajectoryReady]) -> None:
        slots = slice(ready[0].first_slot, ready[0].first_slot + self.runner.num_envs)
        names = [n for n in ("dones", "task_ids", "episode_ids", "weight_sets") if n in self.views]
        fields = {n: self.views[n][slots].copy() for n in names}
        fields["slot_policy"] = self.control["slot_policy"].numpy()[slots].copy()
        self.rollouts.append(fields)
        self.sent.append(ready)

    def trial_tasks(self, env_idx: int) -> list[Task]:
        return [trial["task"] for trial in self.trials[env_idx]]

    def env_of(self, i: int) -> int:
        """The global index of env `i` of the split."""
        return self.runner.first_env + i

    def close(self) -> None:
        self.runner.close()


def nav_cfg(**overrides: Any) -> Cfg:
    cfg = Cfg(
        env="navigation2d",
        task_schedule="per_trial",
        episodes_per_trial=2,
        max_episode_steps=3,
        num_workers=2,
        num_envs_per_worker=4,
        worker_num_splits=1,
        rollout=8,
        batch_size=32,
        num_train_tasks=5,
        num_test_tasks=2,
        shared_policy_workers=False,
        seed=3,
    )
    return replace(cfg, **overrides)


def schedule_tasks(cfg: Cfg, tasks: list[Task], env_idx: int, returns: list[float | None]) -> list[Task]:
    """What an independent schedule of env `env_idx` yields, fed `returns` (the previous trials' returns)."""
    schedule = make_schedule(cfg.task_schedule, tasks, cfg.episodes_per_trial, env_idx, cfg.seed)
    return [schedule.next_task(r) for r in returns]


@pytest.mark.parametrize("schedule", ["per_trial", "curriculum"])
def test_a_free_channel_runs_each_envs_own_schedule(schedule: str) -> None:
    """All cells free: every env (of worker 1, so global indices 4..7) sees the tasks its own schedule yields,
    the sequence the env wrapper drew before the runner chose tasks."""
    split = Split(nav_cfg(task_schedule=schedule), worker_idx=1)
    try:
        split.step(12 * TRIAL_STEPS)
        for i in range(split.runner.num_envs):
            env = split.env_of(i)
            trials = split.trials[env]
            assert len(trials) == 12
            returns = [None] + [float(sum(t["returns"])) for t in trials[:-1]]
            assert split.trial_tasks(env) == schedule_tasks(split.cfg, split.tasks, env, returns), env
        firsts = {tuple(split.trial_tasks(split.env_of(i))[0].values()) for i in range(split.runner.num_envs)}
        assert len(firsts) > 1  # each env its own stream, not one shared sequence
    finally:
        split.close()


def test_an_assigned_task_runs_from_the_next_trial_until_released() -> None:
    split = Split(nav_cfg())
    try:
        k, env = 3, split.env_of(1)
        split.channel.assign(env, Assignment(task=k))
        assert split.channel.read(env) == Assignment(FREE, k, FREE)
        split.step(3 * TRIAL_STEPS)  # three trials; the fourth has already started on task k
        assert split.runner.env_task[1] == k
        split.channel.release(env)
        split.step(3 * TRIAL_STEPS)
        free = schedule_tasks(split.cfg, split.tasks, env, [None] * 4)
        # The trial under way at the assignment keeps its task; the schedule is not asked while the env is
        # assigned, so after the release it goes on with its next draw.
        expected = [free[0], split.tasks[k], split.tasks[k], split.tasks[k], free[1], free[2]]
        assert split.trial_tasks(env) == expected
        assert split.runner.env_task[1] == split.tasks.index(free[3])  # the trial started last
        for i in (0, 2, 3):  # the other envs keep their schedules
            other = split.env_of(i)
            assert split.trial_tasks(other) == schedule_tasks(split.cfg, split.tasks, other, [None] * 6)
    finally:
        split.close()


def test_an_assigned_policy_trains_on_the_env_from_the_next_rollout_and_weights_can_be_another_policys() -> None:
    split = Split(nav_cfg(num_policies=2))
    try:
        moved, borrowed = split.env_of(1), split.env_of(2)
        split.channel.assign(moved, Assignment(policy=1))
        split.channel.assign(borrowed, Assignment(policy=1, weights=0))
        split.step(5 * split.cfg.rollout)  # every env ends a trial within each rollout of 8 steps
        assert len(split.sent) == 5
        for ready, fields in zip(split.sent[1:], split.rollouts[1:], strict=True):
            learner_of = {e: m.policy_id for m in ready for e in (range(m.num_envs) if m.envs is None else m.envs)}
            assert sorted(learner_of) == [0, 1, 2, 3]
            assert learner_of[1] == 1 and learner_of[2] == 1  # both envs' trajectories go to policy 1
            assert fields["slot_policy"][1] == 1 and fields["slot_policy"][2] == 0  # ... env 2 acted by set 0
        assert split.acting[2][split.cfg.rollout :] == [0] * 4 * split.cfg.rollout
        assert split.acting[1][split.cfg.rollout :] == [1] * 4 * split.cfg.rollout
    finally:
        split.close()


def test_invalid_assignments_are_refused_and_change_nothing() -> None:
    cfg = nav_cfg(num_policies=2)
    control = allocate_control(cfg, derive(cfg))
    channel = control_channel(cfg, control, num_tasks=5)
    before = control["assignments"].clone()
    with pytest.raises(ValueError, match=r"policy=2 is not in 0\.\.1"):
        channel.assign(0, Assignment(policy=2))
    with pytest.raises(ValueError, match=r"weights=-3 is not in 0\.\.1"):
        channel.assign(0, Assignment(weights=-3))
    with pytest.raises(ValueError, match=r"task=5 is not in 0\.\.4"):
        channel.assign([0, 1], Assignment(task=5))
    with pytest.raises(ValueError, match=r"env 8 is not in 0\.\.7"):
        channel.assign([0, 8], Assignment(task=1))
    with pytest.raises(ValueError, match="task=0 is not available: the run has no tasks"):
        control_channel(cfg, control, num_tasks=0).assign(0, Assignment(task=0))
    assert torch.equal(control["assignments"], before)


def test_only_task_schedules_have_task_assigners() -> None:
    cartpole = gym.make("CartPole-v1")
    assert make_task_assigner(Cfg(env="CartPole-v1"), cartpole, 0) is None
    with pytest.raises(UnknownEnvError, match="--env=CartPole-v1 is not a task family"):
        make_task_assigner(Cfg(env="CartPole-v1", task_schedule="per_trial"), cartpole, 0)


def test_per_step_fields_say_what_each_step_ran() -> None:
    # PPO asking for every per-step field actor workers fill.
    fields = ("task_ids", "episode_ids", "weight_sets")
    register(
        AlgorithmConfig(
            "fields_ppo", PpoCfg, PPO_PBT_RANGES, verify_ppo, "test", traits=Traits(trajectory_fields=fields)
        )
    )
    try:
        split = Split(nav_cfg(algo="fields_ppo", num_policies=2))
        try:
            split.channel.assign(split.env_of(0), Assignment(task=2))
            split.channel.assign(split.env_of(3), Assignment(policy=0, weights=1))
            split.step(6 * split.cfg.rollout)
            assert len(split.rollouts) == 6
            names = ("dones", "task_ids", "episode_ids", "weight_sets")
            per_env = {n: np.concatenate([r[n] for r in split.rollouts], axis=1) for n in names}
            ids_of_envs = []
            for i in range(split.runner.num_envs):
                ran = [split.tasks.index(task) for task in split.step_tasks[split.env_of(i)]]
                assert per_env["task_ids"][i].tolist() == ran
                assert per_env["weight_sets"][i].tolist() == split.acting[i]
                ids, dones = per_env["episode_ids"][i], per_env["dones"][i]
                assert ((ids[1:] != ids[:-1]) == (dones[:-1] > 0)).all()  # a new id exactly after each end
                ids_of_envs.append(set(ids.tolist()))
            assert sum(map(len, ids_of_envs)) == len(set().union(*ids_of_envs))  # no id shared by two envs
            assert set(per_env["task_ids"][0, TRIAL_STEPS:].tolist()) == {2}
            assert set(per_env["weight_sets"][3, split.cfg.rollout :].tolist()) == {1}
        finally:
            split.close()
    finally:
        ALGORITHMS.pop("fields_ppo", None)
