"""A Discrete action space that starts elsewhere than 0 (gymnasium's `Discrete(n, start=k)`): the policy picks an
index 0..n-1 and every path that hands actions to an env gives it index + k: the actor workers' runner (single envs
and multi-agent rows, appo/envs/agent_spaces.py), evaluation's episodes (appo/sampling/evaluator.py), the numpy
policy (`appo.load_policy`: tests/integration/test_discrete_start_training.py), and the previous action a meta-RL
wrapper shows the policy (envs/meta/wrappers.py)."""

from __future__ import annotations

from functools import partial

import gymnasium as gym
import numpy as np

from appo.config.cfg import Cfg
from appo.envs.meta.schedules import TaskSchedule
from appo.envs.meta.wrappers import MetaTaskWrapper
from appo.envs.multi_agent.agent_spaces import SharedSpaces
from appo.envs.multi_agent.multi_agent import AgentEnv
from appo.models.registry import make_model
from appo.sampling.agent_split import AgentEnvRunner
from appo.sampling.evaluator import run_episode
from tests.support.drive_runner import drive, make_runner
from tests.support.offset_actions import ACTIONS, START, OffsetActionsEnv, OffsetActionsGame

OBS = OffsetActionsEnv.observation_space


def test_the_runner_hands_a_single_agent_env_the_index_plus_the_start() -> None:
    runner, views = make_runner(lambda i: OffsetActionsEnv(), OBS, ACTIONS, 2, 4)
    drive(runner, views, 8, lambda k: np.array([k % 3, (k + 1) % 3]))
    assert runner.envs[0].taken == [START + k % 3 for k in range(8)]
    assert runner.envs[1].taken == [START + (k + 1) % 3 for k in range(8)]
    assert not runner.env_errors.any()
    # The env's own observation of its last action: the action it took, not the index.
    assert views["obs"][runner.first : runner.first + 2, 0, 1].tolist() == [START + 7 % 3, START + 8 % 3]


def test_evaluation_episodes_hand_the_env_the_index_plus_the_start() -> None:
    env = OffsetActionsEnv()
    model = make_model(Cfg(env="offset_actions"), OBS, ACTIONS).eval()
    total, length, _ = run_episode(env, model, 0, deterministic=False, seed=0)
    assert length == 5 and len(env.taken) == 5 and all(ACTIONS.contains(a) for a in env.taken)


def test_a_meta_rl_wrapper_shows_the_last_action_by_its_index() -> None:
    env = MetaTaskWrapper(OffsetActionsEnv(), TaskSchedule(OffsetActionsEnv.finite_tasks, 1, 0), "hidden")
    env.reset(seed=0)
    obs, *_ = env.step(START + 2)
    # [the env's obs (2), the previous action one-hot (3), reward, inner episode ended]
    assert obs[2:5].tolist() == [0, 0, 1]


def test_agents_with_a_shared_start_get_the_index_plus_the_start() -> None:
    spaces = SharedSpaces({a: OBS for a in "ab"}, {a: ACTIONS for a in "ab"})
    assert not spaces.padded and spaces.action_space == gym.spaces.Discrete(3)  # what the policy picks from: 0..2
    assert [spaces.env_action("a", np.array([k])) for k in range(3)] == [START, START + 1, START + 2]


def test_the_runner_hands_multi_agent_rows_the_index_plus_the_start() -> None:
    probe = AgentEnv(OffsetActionsGame(0), "offset_game")
    assert probe.action_space == gym.spaces.Discrete(3)
    runner, views = make_runner(
        lambda g: AgentEnv(OffsetActionsGame(g), "offset_game"),
        probe.observation_space,
        probe.action_space,
        2,
        4,
        partial(AgentEnvRunner, agents_per_env=3),
        agents_per_env=3,
    )
    drive(runner, views, 12, lambda k: np.full(6, k % 3))  # the game refuses (ValueError) actions outside its space
    assert not runner.env_errors.any()
    runner.decorrelate(0.05)  # random actions from the rows' space, through the same conversion
