"""Every project env pickles and deep-copies with its current task (spawned processes, Ray and vector envs copy
envs so): a registry-wide check, each copy stepping like the original from the same seed."""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest

from appo.envs import PROJECT_ENVS, TASK_FAMILIES

pytest.importorskip("mujoco")


@pytest.mark.parametrize("name", sorted(TASK_FAMILIES))
def test_a_project_env_pickles_and_deep_copies_with_its_task(name: str) -> None:
    if name == "lunar_lander_wind":
        pytest.importorskip("Box2D")
    env = PROJECT_ENVS[name]().unwrapped
    try:
        task = env.sample_tasks(3, np.random.default_rng(1))[-1]
        env.set_task(task)
        for clone in (pickle.loads(pickle.dumps(env)), copy.deepcopy(env)):
            try:
                assert type(clone) is type(env)
                assert clone.get_task() == env.get_task(), name
                first = env.reset(seed=5)[0], clone.reset(seed=5)[0]
                np.testing.assert_array_equal(np.asarray(first[0]), np.asarray(first[1]), err_msg=name)
                action = env.action_space.sample()
                np.testing.assert_array_equal(
                    np.asarray(env.step(action)[0]), np.asarray(clone.step(action)[0]), err_msg=name
                )
            finally:
                clone.close()
    finally:
        env.close()
