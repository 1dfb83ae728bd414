"""Task schedules and the meta-task wrapper: tasks handed out as specified, deterministic per seed; trial
boundaries (the only place the engine sees an episode end, so the only place the recurrent state resets)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from appo.config.cfg import Cfg
from appo.config.derive import derive
from appo.envs import make_env, make_run_env, trial_length
from appo.envs.meta.schedules import CurriculumSchedule, difficulty, make_schedule
from appo.envs.meta.tasks import task_split
from appo.envs.meta.wrappers import MetaTaskWrapper
from appo.protocol.buffers import allocate_control, allocate_trajectories
from appo.protocol.messages import ActionsReady, TrajectoryReady
from appo.sampling.env_runner import EnvRunner

TASKS = [{"velocity": v} for v in (0.5, 2.0, 1.0, 3.0, 0.1, 2.5, 1.5, 0.8)]


def test_per_episode_and_per_trial_are_seeded_draws_from_the_task_list():
    a = make_schedule("per_trial", TASKS, 3, env_idx=1, seed=7)
    b = make_schedule("per_trial", TASKS, 3, env_idx=1, seed=7)
    other = make_schedule("per_trial", TASKS, 3, env_idx=2, seed=7)
    draws_a = [a.next_task(None) for _ in range(20)]
    assert draws_a == [b.next_task(None) for _ in range(20)]
    assert draws_a != [other.next_task(None) for _ in range(20)]  # each env its own stream
    assert all(t in TASKS for t in draws_a) and a.episodes_per_trial == 3
    assert make_schedule("per_episode", TASKS, 3, 0, 0).episodes_per_trial == 1


def test_fixed_spreads_envs_over_tasks_and_never_changes():
    tasks = [make_schedule("fixed", TASKS, 2, env_idx=i, seed=0).next_task(None) for i in range(len(TASKS))]
    assert tasks == TASKS
    s = make_schedule("fixed", TASKS, 2, env_idx=3, seed=0)
    assert {tuple(s.next_task(r).items()) for r in (1.0, -5.0, 9.0)} == {tuple(TASKS[3].items())}


def test_curriculum_widens_only_when_returns_rise():
    easy_first = sorted(TASKS, key=difficulty)
    rising = CurriculumSchedule(TASKS, 1, seed=0, start=0.25, step=0.25, window=5)
    for _ in range(20):
        task = rising.next_task(None)
        assert task in easy_first[:2]  # the easiest quarter
    for i in range(40):
        rising.next_task(float(i))  # returns keep rising
    assert rising.fraction == 1.0
    falling = CurriculumSchedule(TASKS, 1, seed=0, start=0.25, step=0.25, window=5)
    for i in range(40):
        falling.next_task(float(-i))
    assert falling.fraction == 0.25


@pytest.mark.parametrize("name", ["per_episode", "per_trial", "fixed", "curriculum", "sequence"])
def test_schedules_answer_indices_into_the_task_list_as_given(name: str) -> None:
    """`next_index` names the task by its position in the list the schedule was given (the unit the control
    channel speaks), and `next_task` is that task: two schedules of one seed agree draw for draw."""
    by_index = make_schedule(name, TASKS, 2, env_idx=3, seed=5)
    by_task = make_schedule(name, TASKS, 2, env_idx=3, seed=5)
    returns = [None, *np.linspace(-1.0, 5.0, 39)]
    indices = [by_index.next_index(r) for r in returns]
    assert all(0 <= i < len(TASKS) for i in indices)
    assert [TASKS[i] for i in indices] == [by_task.next_task(r) for r in returns]


def test_curriculum_draws_do_not_depend_on_the_order_tasks_are_given_in():
    """The curriculum sorts by difficulty behind a permutation: shuffling its task list changes the indices
    it answers but not the tasks it draws."""
    shuffled = [TASKS[i] for i in (4, 0, 7, 2, 5, 1, 6, 3)]
    a = CurriculumSchedule(TASKS, 1, seed=2, start=0.5, step=0.25, window=3)
    b = CurriculumSchedule(shuffled, 1, seed=2, start=0.5, step=0.25, window=3)
    returns = [None, *(float(i) for i in range(30))]
    draws = [a.next_task(r) for r in returns]
    assert draws == [b.next_task(r) for r in returns]
    assert a.fraction == 1.0 and len({tuple(t.items()) for t in draws}) > 4  # it did widen past the easy half


def test_sequence_hands_out_tasks_in_order():
    s = make_schedule("sequence", TASKS[:3], 2, 0, 0)
    assert [s.next_task(None) for _ in range(4)] == [TASKS[0], TASKS[1], TASKS[2], TASKS[0]]


def test_unknown_schedule_is_a_clear_error():
    with pytest.raises(ValueError, match="--task_schedule=weekly: must be one of"):
        make_schedule("weekly", TASKS, 1, 0, 0)


def _nav(visibility: str = "hidden", k: int = 2) -> MetaTaskWrapper:
    env = make_env("navigation2d", max_episode_steps=4)
    train, _ = task_split(env, 5, 2, seed=0)
    return MetaTaskWrapper(env, make_schedule("per_trial", train, k, 0, 0), visibility)


def test_wrapper_trial_is_one_engine_episode_with_augmented_observations():
    env = _nav()
    obs, _ = env.reset(seed=0)
    assert obs.shape == (2 + 2 + 2,) and env.observation_space.shape == (6,)
    assert np.all(obs[2:] == 0)  # no previous action, reward or done yet
    task = env.task
    ends = []
    for _ in range(8):
        action = np.array([0.05, -0.05], np.float32)
        obs, reward, terminated, truncated, info = env.step(action)
        assert env.task == task  # one task for the whole trial
        np.testing.assert_allclose(obs[2:4], action)
        assert obs[4] == pytest.approx(reward)
        ends.append((obs[5], terminated, truncated))
    # Inner episodes of 4 steps: the first ends at step 4 inside the trial (flag, no engine done),
    # the second at step 8, where the trial (the engine's episode) ends: at the inner time limit, so truncated.
    assert [e[0] for e in ends] == [0, 0, 0, 1, 0, 0, 0, 1]
    assert [e[2] for e in ends] == [False] * 7 + [True] and not any(e[1] for e in ends)
    assert len(info["trial"]["returns"]) == 2 and info["trial"]["lengths"] == [4, 4]
    assert info["trial"]["task"] == task


def test_wrapper_runs_the_task_it_is_given_and_its_schedule_only_without_one():
    env = _nav(k=1)
    train = env.schedule.tasks
    own = make_schedule("per_trial", train, 1, 0, 0)  # an independent copy of the wrapper's schedule
    env.reset(seed=0, options={"task": train[3]})
    assert env.task == train[3] and env.unwrapped.get_task() == train[3]
    for _ in range(4):
        _, _, terminated, truncated, info = env.step(np.zeros(2, np.float32))
    assert truncated and not terminated and info["trial"]["task"] == train[3] and len(info["trial"]["returns"]) == 1
    env.reset()  # no task given: the schedule draws, and it was not asked for the given trial
    assert env.task == own.next_task(None)
    with pytest.raises(ValueError, match="needs keys"):
        env.reset(options={"task": {"velocity": 1.0}})


def test_a_trial_ends_as_its_last_episode_ends():
    """Reaching the goal in the last episode terminates the trial; the first episode's end never ends it."""
    env = _nav(k=2)
    goal = {"goal_x": 0.05, "goal_y": 0.0}
    env.reset(seed=0, options={"task": goal})
    step = np.array([0.5, 0.0], np.float32)  # 0.05 along x: onto the goal in one step
    first = env.step(step)
    assert not first[2] and not first[3] and first[0][-1] == 1.0  # the inner episode is over, the trial is not
    second = env.step(step)
    assert second[2] and not second[3] and second[4]["trial"]["lengths"] == [1, 1]


def test_visible_wrapper_appends_the_task():
    env = _nav("visible")
    obs, _ = env.reset(seed=0)
    assert obs.shape == (4,)
    np.testing.assert_allclose(obs[2:], [env.task[k] for k in sorted(env.task)])


def test_rnn_state_resets_exactly_at_trial_boundaries():
    """EnvRunner over navigation2d trials (2 episodes of 3 steps): the stored next state is zeroed after the
    6th, 12th, ... step and nowhere else, and every finished trial's task comes from the train split."""
    cfg = Cfg(
        env="navigation2d",
        task_schedule="per_trial",
        episodes_per_trial=2,
        max_episode_steps=3,
        num_workers=1,
        num_envs_per_worker=2,
        worker_num_splits=1,
        rollout=16,
        batch_size=32,
        use_rnn=True,
        rnn_size=4,
        num_train_tasks=6,
        num_test_tasks=2,
    )
    d = derive(cfg)
    obs_space = make_run_env(cfg).observation_space
    bufs = allocate_trajectories(cfg, d, obs_space, make_env("navigation2d").action_space)
    views = {k: v.numpy() for k, v in bufs.items()}
    control = {k: v.numpy() for k, v in allocate_control(cfg, d).items()}
    runner = EnvRunner(cfg, d, 0, 0, views, lambda i: make_run_env(cfg, env_idx=i), control)
    (request,) = runner.init(seed=0)
    reset_at = []
    for step in range(1, 16):
        slots, t = slice(request.first_slot, request.first_slot + request.num_envs), request.t
        views["actions"][slots, t] = 0.01
        views["rnn_states"][slots, t + 1] = 1.0  # what the policy worker writes: the state after this step
        out = runner.on_actions(ActionsReady(0, 0, request.first_slot, t, 0))
        if not views["rnn_states"][slots, t + 1].all():
            assert (views["rnn_states"][slots, t + 1] == 0).all()
            reset_at.append(step)
        request = out[-1]
        assert not any(isinstance(m, TrajectoryReady) for m in out)
    assert reset_at == [6, 12]
    train, _ = task_split(make_env("navigation2d"), 6, 2, seed=0)
    finished = runner.pop_finished()
    assert len(finished) == 4 and all(e.trial["task"] in train for e in finished)
    assert torch.is_tensor(bufs["obs"])


def _trial_returns(env: MetaTaskWrapper) -> list[float]:
    """Step one whole trial (an engine episode) with zero actions; the per-episode returns it reports."""
    env.reset(seed=0)
    for _ in range(1000):
        _, _, terminated, truncated, info = env.step(np.zeros(2, np.float32))
        if terminated or truncated:
            return info["trial"]["returns"]
    raise AssertionError("the trial never ended")


@pytest.mark.parametrize(("schedule", "episodes"), [("per_episode", 1), ("per_trial", 3)])
def test_meta_test_trials_are_as_long_as_training_trials(schedule: str, episodes: int) -> None:
    """per_episode trains on 1-episode trials whatever --episodes_per_trial says: the held-out test split (the
    evaluator's meta-test) and enjoy.py must run 1-episode trials too, or their returns are not comparable."""
    from appo.tools.evaluate import EnjoyCfg, choose_tasks

    cfg = EnjoyCfg(
        env="navigation2d",
        task_schedule=schedule,
        episodes_per_trial=3,
        max_episode_steps=3,
        num_train_tasks=4,
        num_test_tasks=2,
    )
    assert trial_length(cfg) == episodes
    for split in ("train", "test"):
        env = make_run_env(cfg, split=split)
        for _ in range(2):  # the first trial and a later one, on another task
            assert len(_trial_returns(env)) == episodes, split
    # enjoy.py replaces the test env's schedule (--task): still the training trial length, whichever task.
    for task in ("random", "1"):
        env = make_run_env(cfg, split="test")
        choose_tasks(dataclasses.replace(cfg, task=task), env)
        assert env.schedule.episodes_per_trial == episodes and len(_trial_returns(env)) == episodes


def test_trial_length_without_a_task_schedule_is_one_episode() -> None:
    assert trial_length(Cfg(env="CartPole-v1", task_schedule="none", episodes_per_trial=4)) == 1
    assert trial_length(Cfg(env="navigation2d", task_schedule="fixed", episodes_per_trial=4)) == 4
