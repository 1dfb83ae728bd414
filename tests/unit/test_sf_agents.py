"""Sample Factory's multi-agent contract as a Parallel env (appo/envs/sf_agents.py), on a game of that contract
(tests/support/agent_games.py SfStyleGame): lists become dicts by agent name, an agent whose info turns
`is_active` False leaves the game and joins again when it turns True, an episode that ends for every agent ends the
game and the env's own reset starts the next one (no second reset), and make_env serves such an env as an AgentEnv;
an episode that ends for one agent alone stops with one line naming the agent."""

from __future__ import annotations

import numpy as np
import pytest

from appo.envs import make_env
from appo.envs.multi_agent.multi_agent import AgentEnv, AgentEnvError, run_game
from appo.envs.multi_agent.sf_agents import SfAgents, is_sf_multi_agent
from tests.support.agent_games import LeaveJoinGame, SfStyleGame


def test_the_contract_is_told_apart_from_pettingzoos_and_single_agent_envs() -> None:
    assert is_sf_multi_agent(SfStyleGame())
    assert not is_sf_multi_agent(LeaveJoinGame())
    import gymnasium as gym

    assert not is_sf_multi_agent(gym.make("CartPole-v1"))


def test_an_inactive_agent_leaves_and_joins_and_the_envs_own_reset_starts_the_next_game() -> None:
    game = SfStyleGame(length=6, sleep=2, wake=4)
    env = SfAgents(game, "sf")
    assert env.possible_agents == ["agent_0", "agent_1"]
    obs, _ = env.reset(seed=3)
    assert env.agents == ["agent_0", "agent_1"] and game.resets == 1
    np.testing.assert_array_equal(obs["agent_1"], [0, 1, 0, -1])
    trace = []
    for _ in range(6):
        acting = list(env.agents)
        obs, rewards, terms, truncs, _ = env.step({a: 1 for a in acting})
        trace.append((acting, sorted(obs), rewards, {a: terms[a] for a in acting}, list(env.agents)))
    # step 2: agent_1 turns inactive and leaves (terminated); step 4: it is active again and joins, acting from 5.
    assert [t[0] for t in trace] == [["agent_0", "agent_1"]] * 2 + [["agent_0"]] * 2 + [["agent_0", "agent_1"]] * 2
    assert trace[1][3] == {"agent_0": False, "agent_1": True} and trace[1][4] == ["agent_0"]
    assert trace[3][1] == ["agent_0", "agent_1"] and trace[3][4] == ["agent_0", "agent_1"]  # joined with its obs
    assert trace[1][2] == {"agent_0": 1.5, "agent_1": 1.5}  # an action of 1 plus the step over 4
    assert trace[5][3] == {"agent_0": True, "agent_1": True} and env.agents == []  # both ended: the game is over
    obs, _ = env.reset()  # the next episode, which the env started itself: no reset of the env
    assert game.resets == 1 and env.agents == ["agent_0", "agent_1"]
    np.testing.assert_array_equal(obs["agent_0"], [0, 0, 1, -1])
    env.reset(seed=4)  # a seeded reset is the env's own
    assert game.resets == 2


def test_make_env_serves_it_as_rows_and_a_game_plays_through() -> None:
    env = make_env("tests.support.agent_games:SfStyleGame")
    assert isinstance(env, AgentEnv) and env.num_agents == 2
    ret, length, info = run_game(env, lambda obs, reset: np.ones((len(obs), 1), np.int64), seed=0)
    # agent_0 plays 6 steps (6 + 21/4), agent_1 two lives of 2 steps (2.75 and 4.75): the mean of the rows' returns
    assert length == 6 and info["agent_returns"] == [11.25, 7.5] and ret == pytest.approx(9.375)


def test_an_episode_that_ends_for_one_agent_alone_is_refused_with_one_line() -> None:
    env = make_env("tests.support.agent_games:desync_sf_game")
    with pytest.raises(AgentEnvError) as err:
        run_game(env, lambda obs, reset: np.zeros((len(obs), 1), np.int64), seed=0)
    message = str(err.value)
    assert "\n" not in message and "'agent_0'" in message and "is_active" in message
