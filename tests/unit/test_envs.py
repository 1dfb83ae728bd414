"""Project envs: gymnasium's env checker, rewards recomputed by hand from info and the simulator, contact forces
actually filled, termination, time limits through make_env, navigation2d dynamics, presets, cheap `import envs`."""

from __future__ import annotations

import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from appo.config.cfg import merge_cfg
from appo.envs import make_env
from appo.envs.meta.family import ANT_META_PRESET, META_PRESET, NAVIGATION2D_PRESET
from appo.envs.meta.tasks import task_family
from appo.envs.mujoco.family import FALLING_ROBOT_PRESET, MUJOCO_PRESET
from appo.envs.presets import env_preset
from tests.conftest import ROOT

MUJOCO_NAMES = ("ant_dir", "ant_dir2d", "ant_vel", "ant_goal", "half_cheetah_vel", "half_cheetah_dir")
ALL_NAMES = [pytest.param(n, marks=pytest.mark.mujoco) for n in MUJOCO_NAMES] + ["navigation2d"]


def _actions(env: gym.Env, n: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    low, high = env.action_space.low, env.action_space.high
    return [rng.uniform(low, high).astype(np.float32) for _ in range(n)]


def _ant_costs(env: gym.Env, action: np.ndarray) -> tuple[float, float]:
    """MAML's Ant costs computed here from the action and the simulator's cfrc_ext, not from the env's code."""
    cfrc = env.unwrapped.data.cfrc_ext
    a = action.astype(np.float64)
    return 0.005 * float(np.sum(np.square(a))), 0.0005 * float(np.sum(np.square(np.clip(cfrc, -1.0, 1.0))))


@pytest.mark.parametrize("name", ALL_NAMES)
def test_env_checker(name: str) -> None:
    env = make_env(name)
    check_env(env.unwrapped, skip_render_check=True)


@pytest.mark.parametrize("name", ALL_NAMES)
def test_make_env_default_time_limit_and_spaces(name: str) -> None:
    env = make_env(name)
    assert isinstance(env, gym.wrappers.TimeLimit) and env._max_episode_steps == 100
    obs, info = env.reset(seed=0)
    assert env.observation_space.contains(obs) and "task" in info
    obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
    assert env.observation_space.contains(obs) and isinstance(reward, float)
    assert make_env(name, max_episode_steps=250)._max_episode_steps == 250  # the override replaces the 100


@pytest.mark.mujoco
def test_ant_dir_reward_by_hand_and_sign_flip() -> None:
    runs = {}
    for direction in (1.0, -1.0):
        env = make_env("ant_dir", task={"direction": direction})
        env.reset(seed=3)
        steps = []
        for action in _actions(env, 25):
            _, reward, terminated, _, info = env.step(action)
            assert not terminated
            ctrl, contact = _ant_costs(env, action)
            assert info["reward_ctrl"] == pytest.approx(-ctrl) and info["reward_contact"] == pytest.approx(-contact)
            assert info["reward_survive"] == 0.05
            assert reward == pytest.approx(direction * info["x_velocity"] - ctrl - contact + 0.05, abs=1e-10)
            assert info["reward_task"] == pytest.approx(direction * info["x_velocity"])
            assert info["task"] == {"direction": direction}
            steps.append((reward, info))
        runs[direction] = steps
    for (r_pos, i_pos), (r_neg, i_neg) in zip(runs[1.0], runs[-1.0], strict=True):
        assert i_pos["x_velocity"] == i_neg["x_velocity"]  # same seed and actions: same trajectory
        costs = i_pos["reward_ctrl"] + i_pos["reward_contact"] + i_pos["reward_survive"]
        assert r_pos - costs == pytest.approx(-(r_neg - costs), abs=1e-10)
    assert any(abs(info["x_velocity"]) > 0.05 for _, info in runs[1.0])


@pytest.mark.mujoco
def test_ant_contact_forces_are_filled_once_it_touches_the_ground() -> None:
    env = make_env("ant_dir")
    obs, _ = env.reset(seed=0)
    contact_costs, cfrc_obs = [], []
    for _ in range(30):  # zero torques: the ant falls from its start height and settles on its legs
        obs, _, _, _, info = env.step(np.zeros(8, dtype=np.float32))
        contact_costs.append(-info["reward_contact"])
        cfrc_obs.append(np.abs(obs[27:]).sum())  # obs = qpos[2:] (13), qvel (14), cfrc_ext[1:] (78)
    assert env.unwrapped.data.ncon > 0
    assert np.abs(env.unwrapped.data.cfrc_ext).sum() > 0
    assert contact_costs[-1] > 1e-4 and cfrc_obs[-1] > 0
    assert sum(c > 0 for c in contact_costs[-10:]) >= 8
    # What the env read is current: recomputing cfrc_ext from the same data gives the same forces.
    import mujoco

    base = env.unwrapped
    read = base.data.cfrc_ext.copy()
    mujoco.mj_rnePostConstraint(base.model, base.data)
    assert np.array_equal(read, base.data.cfrc_ext)
    # The trap this guards against: in this MuJoCo a bare mj_step leaves cfrc_ext at zero despite contacts.
    bare = mujoco.MjData(base.model)
    bare.qpos[:], bare.qvel[:] = base.data.qpos, base.data.qvel
    mujoco.mj_step(base.model, bare, nstep=5)
    assert bare.ncon > 0 and not np.abs(bare.cfrc_ext).any()


@pytest.mark.mujoco
def test_ant_dir2d_reward_is_the_projected_velocity() -> None:
    angle = 2.0
    env = make_env("ant_dir2d", task={"angle": angle})
    env.reset(seed=1)
    for action in _actions(env, 10):
        _, reward, _, _, info = env.step(action)
        ctrl, contact = _ant_costs(env, action)
        along = np.cos(angle) * info["x_velocity"] + np.sin(angle) * info["y_velocity"]
        assert reward == pytest.approx(along - ctrl - contact + 0.05, abs=1e-10)
    # angle 0 is ant_dir's +1 direction.
    env0, env_dir = make_env("ant_dir2d", task={"angle": 0.0}), make_env("ant_dir", task={"direction": 1.0})
    env0.reset(seed=2), env_dir.reset(seed=2)
    for action in _actions(env0, 5):
        assert env0.step(action)[1] == pytest.approx(env_dir.step(action)[1], abs=1e-10)


@pytest.mark.mujoco
def test_ant_vel_reward_by_hand() -> None:
    env = make_env("ant_vel", task={"velocity": 1.5})
    env.reset(seed=4)
    for action in _actions(env, 10):
        _, reward, _, _, info = env.step(action)
        ctrl, contact = _ant_costs(env, action)
        assert reward == pytest.approx(-abs(info["x_velocity"] - 1.5) + 1.0 - ctrl - contact + 0.05, abs=1e-10)


@pytest.mark.mujoco
def test_ant_goal_reward_by_hand_and_position_in_obs() -> None:
    env = make_env("ant_goal", task={"goal_x": 2.0, "goal_y": -1.0})
    obs, _ = env.reset(seed=5)
    assert obs.shape == (107,)
    for action in _actions(env, 10):
        obs, reward, _, _, info = env.step(action)
        qpos = env.unwrapped.data.qpos
        assert obs[:2] == pytest.approx(qpos[:2]) and (info["x_position"], info["y_position"]) == (qpos[0], qpos[1])
        ctrl, contact = _ant_costs(env, action)
        l1 = abs(qpos[0] - 2.0) + abs(qpos[1] + 1.0)
        assert info["goal_distance"] == pytest.approx(l1)
        assert reward == pytest.approx(-l1 + 4.0 - ctrl - contact, abs=1e-10)


@pytest.mark.mujoco
def test_ant_terminates_when_the_torso_leaves_the_healthy_range() -> None:
    env = make_env("ant_vel")
    env.reset(seed=0)
    base = env.unwrapped
    qpos = base.data.qpos.copy()
    qpos[2] = 1.6  # torso far above 1.0: it cannot fall back below 1.0 within one 0.05 s step
    base.set_state(qpos, base.data.qvel.copy())
    _, reward, terminated, truncated, info = env.step(np.zeros(8, dtype=np.float32))
    assert terminated and not truncated
    assert info["reward_survive"] == 0.0  # no survive bonus on the unhealthy step (gymnasium v5)
    assert reward == pytest.approx(info["reward_task"] + info["reward_ctrl"] + info["reward_contact"])


@pytest.mark.mujoco
def test_half_cheetah_rewards_by_hand() -> None:
    vel = make_env("half_cheetah_vel", task={"velocity": 1.25})
    fwd = make_env("half_cheetah_dir", task={"direction": 1.0})
    bwd = make_env("half_cheetah_dir", task={"direction": -1.0})
    for env in (vel, fwd, bwd):
        env.reset(seed=6)
    for action in _actions(vel, 15):
        ctrl = 0.05 * float(np.sum(np.square(action.astype(np.float64))))
        _, r_vel, term, _, i_vel = vel.step(action)
        _, r_fwd, _, _, i_fwd = fwd.step(action)
        _, r_bwd, _, _, i_bwd = bwd.step(action)
        assert not term
        assert i_vel["x_velocity"] == i_fwd["x_velocity"] == i_bwd["x_velocity"]
        v = i_vel["x_velocity"]
        assert r_vel == pytest.approx(-abs(v - 1.25) - ctrl, abs=1e-10)
        assert r_fwd == pytest.approx(v - ctrl, abs=1e-10) and r_bwd == pytest.approx(-v - ctrl, abs=1e-10)
        assert i_fwd["reward_ctrl"] == pytest.approx(-ctrl) and i_bwd["task"] == {"direction": -1.0}


@pytest.mark.mujoco
def test_mujoco_time_limit_override_through_make_env() -> None:
    env = make_env("half_cheetah_dir", max_episode_steps=3)
    env.reset(seed=0)
    flags = [env.step(env.action_space.sample())[3] for _ in range(3)]
    assert flags == [False, False, True]


def test_navigation2d_clips_actions_and_rewards_the_distance() -> None:
    # Actions are in [-1, 1]^2 and move the point by 0.1 times themselves.
    env = make_env("navigation2d", task={"goal_x": 0.3, "goal_y": 0.4})
    obs, _ = env.reset(seed=0)
    assert obs.dtype == np.float32 and np.array_equal(obs, [0.0, 0.0])
    obs, reward, terminated, truncated, info = env.step(np.array([5.0, -0.5], dtype=np.float32))
    assert np.allclose(obs, [0.1, -0.05]) and obs.dtype == np.float32
    assert reward == pytest.approx(-np.hypot(0.3 - 0.1, 0.4 + 0.05)) and info["distance"] == -reward
    assert not terminated and not truncated
    obs, _, _, _, _ = env.step(np.array([-1.0, 1.0]))
    assert np.allclose(obs, [0.0, 0.05])


def test_navigation2d_terminates_at_the_goal() -> None:
    env = make_env("navigation2d", task={"goal_x": 0.2, "goal_y": -0.1})
    env.reset(seed=0)
    assert env.step(np.array([1.0, -0.5]))[2] is False
    _, reward, terminated, truncated, _ = env.step(np.array([1.0, -0.5]))
    assert terminated and not truncated and reward > -0.01
    # Near but not within 0.01: no termination.
    env.reset()
    env.step(np.array([1.0, -1.0]))
    assert env.step(np.array([0.85, 0.0]))[2] is False


@pytest.mark.parametrize(
    ("dx", "dy", "terminated"),
    [
        (0.009, 0.009, True),  # Euclidean 0.0127 > 0.01, but within 0.01 on each axis: the MAML goal test
        (-0.009, 0.009, True),
        (0.011, 0.0, False),  # one axis outside 0.01 is enough to go on, however close the other one is
        (0.0, -0.011, False),
    ],
)
def test_navigation2d_goal_test_is_per_axis(dx: float, dy: float, terminated: bool) -> None:
    goal = np.array([0.05, -0.03])
    env = make_env("navigation2d", task={"goal_x": float(goal[0]), "goal_y": float(goal[1])})
    env.reset(seed=0)
    # One step from the origin lands at goal + (dx, dy) (the action is the move over 0.1, within the clip).
    _, reward, done, truncated, info = env.step((goal + np.array([dx, dy])) / 0.1)
    assert done is terminated and not truncated
    assert reward == pytest.approx(-np.hypot(dx, dy)) and info["distance"] == pytest.approx(np.hypot(dx, dy))


def test_navigation2d_time_limits() -> None:
    env = make_env("navigation2d", max_episode_steps=5)
    env.reset(seed=0)
    flags = [env.step(np.zeros(2, dtype=np.float32))[2:4] for _ in range(5)]
    assert flags == [(False, False)] * 4 + [(False, True)]
    env = make_env("navigation2d", max_episode_steps=150)  # longer than the default 100
    env.reset(seed=0)
    truncated = [env.step(np.zeros(2, dtype=np.float32))[3] for _ in range(150)]
    assert truncated.index(True) == 149


def test_navigation2d_rejects_rendering() -> None:
    with pytest.raises(ValueError, match="render"):
        make_env("navigation2d", render_mode="human")


def test_presets() -> None:
    for name in MUJOCO_NAMES:  # the MuJoCo settings plus the meta-RL defaults of task families
        ant = ANT_META_PRESET if name.startswith("ant_") else {}
        assert env_preset(name) == MUJOCO_PRESET | META_PRESET | ant
        assert env_preset(name) is not MUJOCO_PRESET
    assert env_preset("navigation2d") == NAVIGATION2D_PRESET | META_PRESET
    # The Ant families collect the next iteration while the learner trains; half_cheetah_* do not (docs/results.md,
    # Throughput).
    ant_dir, hcvel = merge_cfg({"env": "ant_dir"}, None), merge_cfg({"env": "half_cheetah_vel"}, None)
    assert (ant_dir.async_rl, ant_dir.collect_ahead, hcvel.async_rl, hcvel.collect_ahead) == (False, True, False, False)
    assert env_preset("HalfCheetah-v5") == MUJOCO_PRESET
    # Robots that fall start with more action noise and take smaller, more numerous steps; the rest of the MuJoCo
    # preset is theirs too (docs/results.md, MuJoCo at 1M env steps).
    for name in ("Hopper-v5", "Walker2d-v5"):
        trunk = {"separate_value_trunk": True} if name == "Hopper-v5" else {}
        assert env_preset(name) == MUJOCO_PRESET | FALLING_ROBOT_PRESET | trunk
        cfg = merge_cfg({"env": name}, None)
        assert (cfg.initial_log_std, cfg.num_epochs, cfg.batch_size, cfg.learning_rate) == (0.0, 10, 256, 0.001)
        assert (
            cfg.batch_size * cfg.num_batches_per_epoch
            == MUJOCO_PRESET["batch_size"] * MUJOCO_PRESET["num_batches_per_epoch"]
        )
    assert merge_cfg({"env": "HalfCheetah-v5"}, None).initial_log_std == MUJOCO_PRESET["initial_log_std"]
    cfg = merge_cfg({"env": "navigation2d"}, None)  # every preset key is a cfg key
    assert cfg.rollout == NAVIGATION2D_PRESET["rollout"] and cfg.learning_rate == NAVIGATION2D_PRESET["learning_rate"]
    assert merge_cfg({"env": "ant_goal"}, None).num_epochs == MUJOCO_PRESET["num_epochs"]
    # Long runs (docs/results.md, MuJoCo at 10M env steps): Walker2d takes Sample Factory's steps with std 1 from 5M
    # env steps on, flags still win, a resumed run keeps its budget's preset; Hopper keeps its own.
    long = {"env": "Walker2d-v5", "train_for_env_steps": 10_000_000}
    cfg = merge_cfg(long, None)
    assert (cfg.initial_log_std, cfg.num_epochs, cfg.batch_size, cfg.learning_rate) == (0.0, 2, 1024, 0.00295)
    # ... and the KL-adaptive rate with a falling KL target; a flag still picks another schedule
    assert (cfg.lr_schedule, cfg.lr_schedule_kl_threshold, cfg.lr_schedule_kl_threshold_final) == (
        "kl_adaptive_minibatch",
        0.008,
        0.0005,
    )
    assert merge_cfg(long | {"lr_schedule": "linear_decay"}, None).lr_schedule == "linear_decay"
    # ... and a value head on its own trunk, which a flag or a resumed run's cfg.json still turns off
    assert cfg.separate_value_trunk
    assert not merge_cfg(long | {"separate_value_trunk": False}, None).separate_value_trunk
    assert not merge_cfg({"env": "Walker2d-v5"}, long | {"separate_value_trunk": False}).separate_value_trunk
    assert merge_cfg({"env": "Walker2d-v5", "train_for_env_steps": 1_000_000}, None).lr_schedule == "linear_decay"
    assert merge_cfg(long | {"num_epochs": 5}, None).num_epochs == 5
    assert merge_cfg({"env": "Walker2d-v5"}, {"env": "Walker2d-v5", "train_for_env_steps": 10_000_000}).num_epochs == 2
    assert merge_cfg({"env": "Walker2d-v5", "train_for_env_steps": 4_999_999}, None).num_epochs == 10
    assert merge_cfg({"env": "Hopper-v5", "train_for_env_steps": 10_000_000}, None).num_epochs == 10
    # Hopper's value head has its own trunk at 1M, not in long runs; a flag or a resumed run wins
    hopper = {"env": "Hopper-v5", "train_for_env_steps": 1_000_000}
    assert merge_cfg(hopper, None).separate_value_trunk
    assert not merge_cfg(hopper | {"separate_value_trunk": False}, None).separate_value_trunk
    assert not merge_cfg({"env": "Hopper-v5"}, hopper | {"separate_value_trunk": False}).separate_value_trunk
    assert not merge_cfg({"env": "Hopper-v5", "train_for_env_steps": 10_000_000}, None).separate_value_trunk
    assert not merge_cfg({"env": "Walker2d-v5", "train_for_env_steps": 1_000_000}, None).separate_value_trunk
    # Humanoid's long runs: a falling ceiling on the policy's std, none in shorter runs
    assert merge_cfg({"env": "Humanoid-v5", "train_for_env_steps": 10_000_000}, None).std_ceiling_final == 0.15
    assert merge_cfg({"env": "Humanoid-v5", "train_for_env_steps": 1_000_000}, None).std_ceiling_final == 0.0
    # Hopper's long runs: a floor under the policy's std, none in shorter runs
    assert merge_cfg({"env": "Hopper-v5", "train_for_env_steps": 10_000_000}, None).std_floor == 0.1
    assert merge_cfg({"env": "Hopper-v5", "train_for_env_steps": 1_000_000}, None).std_floor == 0.0


def test_importing_envs_does_not_import_mujoco() -> None:
    code = "import sys, envs; assert len(envs.PROJECT_ENVS) >= 7; assert 'mujoco' not in sys.modules, 'mujoco'"
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, timeout=60)


def test_task_family_through_the_time_limit() -> None:
    env = make_env("navigation2d")
    assert task_family(env) is env.unwrapped


def test_a_registered_env_whose_package_is_missing_says_so():
    """A registered id whose package is missing (LunarLander-v3 without box2d) is not "not a registered id": the
    one-line error names the env and gymnasium's own message of what to install."""
    import gymnasium as gym

    from appo.envs import UnknownEnvError, make_env

    if "AppoMissingDependency-v0" not in gym.registry:
        gym.register("AppoMissingDependency-v0", entry_point="tests.support.missing_dependency_env:Env")
    with pytest.raises(UnknownEnvError) as raised:
        make_env("AppoMissingDependency-v0")
    assert str(raised.value) == "--env=AppoMissingDependency-v0: Box2D is not installed, run `pip install box2d`"


def test_presets_are_ppos_and_other_algorithms_take_only_the_task_settings():
    """Regression: SAC took PPO's Pendulum preset (gamma 0.95; rl-zoo's SAC uses 0.99)."""
    from appo.config.cfg import merge_cfg
    from appo.envs.presets import TASK_KEYS, env_preset

    assert merge_cfg({"env": "Pendulum-v1"}, None).gamma == 0.95  # PPO's preset
    sac = merge_cfg({"env": "Pendulum-v1", "algo": "sac"}, None)
    assert sac.gamma == 0.99 and sac.lr_schedule == "constant"
    assert env_preset("Pendulum-v1", "sac") == {} and env_preset("HalfCheetah-v5", "udrl") == {}
    ant = env_preset("ant_dir", "sac")
    assert ant and set(ant) <= TASK_KEYS and ant == {k: v for k, v in env_preset("ant_dir").items() if k in TASK_KEYS}
