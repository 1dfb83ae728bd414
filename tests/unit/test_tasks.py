"""Task families: seeded samplers within their distributions, train/test splits (disjoint; finite families get
the full set), set_task validation, reset keeping the task, default tasks, and the TaskFamily protocol."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest

from appo.envs import PROJECT_ENVS, make_env
from appo.envs.meta.tasks import TaskFamily, task_family, task_split

MUJOCO_NAMES = ("ant_dir", "ant_dir2d", "ant_vel", "ant_goal", "half_cheetah_vel", "half_cheetah_dir")
FINITE = {"ant_dir", "half_cheetah_dir"}
ALL_NAMES = [pytest.param(n, marks=pytest.mark.mujoco) for n in MUJOCO_NAMES] + ["navigation2d"]
CONTINUOUS_NAMES = [p for p in ALL_NAMES if (p if isinstance(p, str) else p.values[0]) not in FINITE]


def _family(name: str, **kwargs: object) -> TaskFamily:
    return task_family(make_env(name, **kwargs))


def test_every_family_is_registered() -> None:
    assert set(PROJECT_ENVS) >= {*MUJOCO_NAMES, "navigation2d"}


@pytest.mark.parametrize("name", ALL_NAMES)
def test_family_protocol_and_default_task(name: str) -> None:
    env = make_env(name)
    family = task_family(env)
    assert isinstance(family, TaskFamily)
    assert family is env.unwrapped
    assert hasattr(type(family), "finite_tasks")
    assert (family.finite_tasks is not None) == (name in FINITE)
    # The default task is the first of a sample seeded with 0, the same in every fresh env.
    assert family.get_task() == family.sample_tasks(1, np.random.default_rng(0))[0]
    assert _family(name).get_task() == family.get_task()


@pytest.mark.parametrize("name", ALL_NAMES)
def test_sampler_is_deterministic_per_seed(name: str) -> None:
    family = _family(name)
    first = family.sample_tasks(20, np.random.default_rng(123))
    again = _family(name).sample_tasks(20, np.random.default_rng(123))
    other = family.sample_tasks(20, np.random.default_rng(124))
    assert first == again
    assert first != other
    assert len(first) == 20 and all(isinstance(v, float) for t in first for v in t.values())
    assert family.sample_tasks(0, np.random.default_rng(0)) == []


@pytest.mark.parametrize(
    ("name", "kwargs", "key", "low", "high"),
    [
        pytest.param("ant_dir2d", {}, "angle", 0.0, 2 * math.pi, marks=pytest.mark.mujoco),
        pytest.param("ant_vel", {}, "velocity", 0.0, 3.0, marks=pytest.mark.mujoco),
        pytest.param("ant_goal", {}, "goal_x", -3.0, 3.0, marks=pytest.mark.mujoco),
        pytest.param("ant_goal", {}, "goal_y", -3.0, 3.0, marks=pytest.mark.mujoco),
        pytest.param("half_cheetah_vel", {}, "velocity", 0.0, 2.0, marks=pytest.mark.mujoco),
        pytest.param("half_cheetah_vel", {"task_high": 3.0}, "velocity", 0.0, 3.0, marks=pytest.mark.mujoco),
        ("navigation2d", {}, "goal_x", -0.5, 0.5),
        ("navigation2d", {}, "goal_y", -0.5, 0.5),
    ],
)
def test_sampler_covers_its_range(name: str, kwargs: dict, key: str, low: float, high: float) -> None:
    values = np.array([t[key] for t in _family(name, **kwargs).sample_tasks(2000, np.random.default_rng(0))])
    assert values.min() >= low and values.max() <= high
    # Uniform over [low, high]: both ends are reached to within 1% of the width.
    assert values.min() < low + 0.01 * (high - low) and values.max() > high - 0.01 * (high - low)


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.mujoco) for n in sorted(FINITE)])
def test_finite_family_samples_both_directions(name: str) -> None:
    family = _family(name)
    assert family.finite_tasks == [{"direction": -1.0}, {"direction": 1.0}]
    directions = [t["direction"] for t in family.sample_tasks(200, np.random.default_rng(0))]
    assert set(directions) == {-1.0, 1.0}
    assert 60 < directions.count(1.0) < 140


@pytest.mark.parametrize("name", CONTINUOUS_NAMES)
def test_split_is_seeded_disjoint_and_sized(name: str) -> None:
    env = make_env(name)
    train, test = task_split(env, 40, 10, seed=7)
    assert len(train) == 40 and len(test) == 10
    keys = [tuple(sorted(t.items())) for t in train + test]
    assert len(set(keys)) == 50  # disjoint, and no repeats within either list
    assert task_split(make_env(name), 40, 10, seed=7) == (train, test)
    assert task_split(env, 40, 10, seed=8) != (train, test)
    # The train tasks of a seed do not depend on how many test tasks are asked for.
    assert task_split(env, 40, 3, seed=7)[0] == train
    assert task_split(env, 0, 0, seed=7) == ([], [])


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.mujoco) for n in sorted(FINITE)])
def test_split_of_a_finite_family_is_the_full_set_for_both(name: str) -> None:
    env = make_env(name)
    full = [{"direction": -1.0}, {"direction": 1.0}]
    assert task_split(env, 40, 10, seed=0) == (full, full)
    assert task_split(env, 1, 1, seed=3) == (full, full)
    train, _ = task_split(env, 1, 1, seed=3)
    train[0]["direction"] = 5.0  # the returned lists are copies
    assert task_family(env).finite_tasks == full


def test_split_rejects_non_families_and_negative_counts() -> None:
    with pytest.raises(TypeError, match="not a task family"):
        task_split(gym.make("CartPole-v1"), 1, 1, seed=0)
    with pytest.raises(ValueError):
        task_split(make_env("navigation2d"), -1, 1, seed=0)


@pytest.mark.parametrize("name", ALL_NAMES)
def test_reset_keeps_the_task_and_set_task_changes_it(name: str) -> None:
    env = make_env(name)
    family = task_family(env)
    task = family.sample_tasks(3, np.random.default_rng(5))[-1]
    family.set_task(task)
    for seed in (None, 0, 1):
        _, info = env.reset(seed=seed)
        assert family.get_task() == task and info["task"] == task
    _, _, _, _, info = env.step(env.action_space.sample())
    assert info["task"] == task
    got = family.get_task()
    got[next(iter(got))] = 99.0  # get_task returns a copy
    assert family.get_task() == task


@pytest.mark.parametrize("name", ALL_NAMES)
def test_set_task_validates(name: str) -> None:
    family = _family(name)
    before = family.get_task()
    with pytest.raises(ValueError, match="keys"):
        family.set_task({"no_such_key": 1.0})
    with pytest.raises(ValueError):
        family.set_task({k: float("nan") for k in before})
    if name in FINITE:
        with pytest.raises(ValueError, match="not one of"):
            family.set_task({"direction": 0.5})
    assert family.get_task() == before


def test_task_kwarg_sets_the_initial_task() -> None:
    env = make_env("navigation2d", task={"goal_x": 0.25, "goal_y": -0.125})
    assert task_family(env).get_task() == {"goal_x": 0.25, "goal_y": -0.125}


@pytest.mark.mujoco
def test_mujoco_env_pickles_with_its_current_task() -> None:
    import pickle

    env = make_env("half_cheetah_vel", task_high=3.0).unwrapped
    env.set_task({"velocity": 2.75})
    clone = pickle.loads(pickle.dumps(env))
    assert clone.get_task() == {"velocity": 2.75}
    assert clone.task_high == 3.0 and clone._ctrl_cost_weight == 0.05
