"""lunar_lander_wind and humanoid_dir: the lander's tasks change its dynamics (two tasks, the same
actions and seed, different trajectories: the seed system's lander never switched its wind on), tasks are seeded
and split like the other families', humanoid_dir's reward is Humanoid-v5's with the forward term signed, both pass
gymnasium's env checker and become RL^2 trials through make_run_env."""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from appo.config.cfg import Cfg
from appo.envs import make_env, make_run_env
from appo.envs.meta.tasks import task_family, task_split

pytest.importorskip("Box2D", reason="lunar_lander_wind needs the box2d extra")


def lander_trajectory(task: dict, steps: int = 80) -> np.ndarray:
    env = make_env("lunar_lander_wind", task=task)
    obs, _ = env.reset(seed=7)
    observations = [obs]
    for _ in range(steps):  # engines off: the lander falls, and the wind pushes it
        obs, _, terminated, truncated, info = env.step(np.zeros(2, np.float32))
        observations.append(obs)
        assert info["task"] == task
        if terminated or truncated:
            break
    env.close()
    return np.array(observations)


def test_lander_tasks_are_different_dynamics():
    calm = lander_trajectory({"wind_power": 0.0, "turbulence_power": 0.0})
    windy = lander_trajectory({"wind_power": 20.0, "turbulence_power": 2.0})
    again = lander_trajectory({"wind_power": 20.0, "turbulence_power": 2.0})
    np.testing.assert_array_equal(windy, again)  # the same task, actions and seed: the same trajectory
    n = min(len(calm), len(windy))
    assert np.abs(calm[:n, 0] - windy[:n, 0]).max() > 0.05  # horizontal position: the wind moved it
    assert np.abs(calm[:n, 4] - windy[:n, 4]).max() > 0.01  # angle: the turbulence turned it


def test_lander_tasks_are_seeded_and_split():
    env = make_env("lunar_lander_wind")
    train, test = task_split(env, 40, 10, seed=3)
    assert (
        len(train) == 40
        and len(test) == 10
        and not {tuple(t.items()) for t in train} & {tuple(t.items()) for t in test}
    )
    assert task_split(env, 40, 10, seed=3) == (train, test)
    for t in train + test:
        assert 0.0 <= t["wind_power"] <= 20.0 and 0.0 <= t["turbulence_power"] <= 2.0
    with pytest.raises(ValueError, match="needs keys"):
        task_family(env).set_task({"wind_power": 1.0})
    env.close()


@pytest.mark.mujoco
def test_humanoid_dir_reward_is_the_signed_forward_term():
    for direction in (-1.0, 1.0):
        env = make_env("humanoid_dir", task={"direction": direction})
        env.reset(seed=0)
        action = np.random.default_rng(0).uniform(-0.4, 0.4, env.action_space.shape).astype(np.float32)
        _, reward, _, _, info = env.step(action)
        assert info["reward_task"] == pytest.approx(direction * info["reward_forward"])
        expected = info["reward_task"] + info["reward_survive"] + info["reward_ctrl"] + info["reward_contact"]
        assert reward == pytest.approx(expected) and info["task"] == {"direction": direction}
        assert env._max_episode_steps == 200
        env.close()


@pytest.mark.parametrize("name", ["lunar_lander_wind", pytest.param("humanoid_dir", marks=pytest.mark.mujoco)])
def test_checker_and_rl2_trials(name: str):
    env = make_env(name)
    check_env(env.unwrapped, skip_render_check=True)
    env.close()
    cfg = Cfg(env=name, task_schedule="per_trial", episodes_per_trial=2, max_episode_steps=5)
    trial = make_run_env(cfg)
    obs, _ = trial.reset(seed=0)
    inner = make_env(name).observation_space.shape[0]
    assert obs.shape[0] > inner  # the previous action, reward and episode end appended (hidden tasks)
    steps, info = 0, {}
    while True:
        obs, _, terminated, truncated, info = trial.step(trial.action_space.sample())
        steps += 1
        if terminated or truncated:
            break
    assert len(info["trial"]["returns"]) == 2 and steps <= 10
    trial.close()
