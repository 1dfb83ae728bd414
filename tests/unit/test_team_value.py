"""A centralised value (--value_input=team|state; envs/multi_agent/team_value.py): what the actor workers write beside
every observation (appo/sampling/agent_split.py), checked step by step against games stepped through their own API
across agents leaving and joining, game resets and rollout ends; what the model reads and what acting and export carry;
and the one-line refusals."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from appo.config.cfg import Cfg
from appo.driver.preflight import multi_agent_problem
from appo.envs import make_env
from appo.envs.multi_agent.multi_agent import AgentEnv, AgentEnvError
from appo.models.registry import make_model
from appo.protocol.buffers import trajectory_spec
from appo.protocol.messages import InferenceRequest, TrajectoryReady
from tests.support.agent_games import AGENTS, LeaveJoinGame, StateGame, UnequalSpacesGame
from tests.unit.test_agent_runner import ReferenceGame, answer, runner_for

K = len(AGENTS)
SPREAD = "mpe2.simple_spread_v3:parallel_env"


def expected_team(refs: list[ReferenceGame], value_input: str) -> np.ndarray:
    """Every row's value input, from games stepped through their own API: all of the game's observation rows (zeros
    for agents out of it) or its global state, then the row's one-hot and the game's steps since its reset."""
    rows = []
    for ref in refs:
        shared = ref.obs.reshape(-1) if value_input == "team" else ref.env.state()
        clock = np.full((K, 1), ref.env.steps, dtype=np.float32)
        rows.append(np.concatenate([np.tile(shared, (K, 1)), np.eye(K, dtype=np.float32), clock], axis=1))
    return np.concatenate(rows)


@pytest.mark.parametrize("value_input", ["team", "state"])
def test_every_rows_value_input_follows_its_game_step_by_step(value_input: str) -> None:
    cfg, d, views, runner, built = runner_for(StateGame, rollout=4, worker_idx=1, value_input=value_input)
    n, T = d.envs_per_split, cfg.rollout
    width = (4 * K if value_input == "team" else 7) + K + 1
    assert views["team_obs"].shape[1:] == (T + 1, width)
    (request,) = runner.init(seed=0)
    refs = [ReferenceGame(index, StateGame) for index in built]
    rng = np.random.default_rng(3)
    rollouts = absent = resets = 0
    for _ in range(9 * T):
        first, t = request.first_slot, request.t
        slots = slice(first, first + n)
        np.testing.assert_array_equal(views["team_obs"][slots, t], expected_team(refs, value_input), f"t={t}")
        actions = rng.integers(0, 3, n)
        out = answer(runner, views, request, actions)
        before = sum(ref.resets for ref in refs)
        for g, ref in enumerate(refs):
            ref.step(actions[g * K : (g + 1) * K], [])
        resets += sum(ref.resets for ref in refs) - before
        team = views["team_obs"][slots, t + 1]
        np.testing.assert_array_equal(team, expected_team(refs, value_input), f"t={t + 1}")
        absent += int((views["valid"][slots, t] == 0).sum())
        ready = [m for m in out if type(m) is TrajectoryReady]
        requests = [m for m in out if type(m) is InferenceRequest]
        if ready:
            rollouts += 1
            requests += runner.on_slots_released(ready[0].group_idx, 0, ready[0].incarnation)
        (request,) = requests
    assert rollouts == 9 and resets >= 4 and absent > 0  # games restarted, agents were out of their games


def test_the_team_input_is_the_spread_agents_observations_in_order_or_the_envs_state() -> None:
    team = make_env(SPREAD, value_input="team")
    state = make_env(SPREAD, value_input="state")
    obs, _ = team.reset(seed=5)
    state.reset(seed=5)
    assert team.observation_space.team_space.shape == (3 * 18 + 3 + 1,)
    rows = team.team_input(obs)
    np.testing.assert_array_equal(rows[:, :54], np.tile(obs.reshape(-1), (3, 1)))
    np.testing.assert_array_equal(rows[:, 54:57], np.eye(3))
    assert (rows[:, 57] == 0).all()  # the game's clock, at its start
    team.step(np.zeros((3, 1), dtype=np.int64), np.ones(3, dtype=bool))
    assert (team.team_input(obs)[:, 57] == 1).all()
    # mpe2's global state is every agent's observation, concatenated: both inputs agree here.
    np.testing.assert_allclose(state.team_input(obs), rows, atol=1e-6)
    for env in (team, state):
        env.close()


def test_the_value_reads_the_team_input_and_acting_reads_only_the_policy() -> None:
    env = make_env(SPREAD, value_input="team")
    cfg = Cfg(value_input="team", use_rnn=True, rnn_size=16)
    model = make_model(cfg, env.observation_space, env.action_space)
    assert model.value_head is None and model.team_encoder is not None
    N, T = 2, 5
    obs = torch.randn(N, T, 18)
    team = torch.randn(N, T, 58)
    actions = torch.zeros(N, T, 1, dtype=torch.int64)
    rnn, dones = torch.zeros(N, T, 16), torch.zeros(N, T)
    out = model(obs, actions, rnn, dones, T, team=team)
    other = model(obs, actions, rnn, dones, T, team=team + 1.0)
    assert not torch.allclose(out.values, other.values)  # the value follows the team input ...
    torch.testing.assert_close(out.log_probs, other.log_probs)  # ... and the policy does not see it
    torch.testing.assert_close(model.values(obs, rnn, dones, T, team=team), out.values)
    torch.testing.assert_close(model.value_of(obs[:, 0], rnn[:, 0], team=team[:, 0]), out.values[:, 0])
    acted = model.act(obs[:, 0], rnn[:, 0])  # acting has no team input: zero values, the same actions' law
    assert torch.equal(acted.values, torch.zeros(N))
    spec = trajectory_spec(Cfg(rollout=T), env.observation_space, env.action_space, multi_agent=True)
    assert spec["team_obs"].shape == (T + 1, 58)
    env.close()


def test_a_value_input_the_env_cannot_give_is_one_line() -> None:
    with pytest.raises(AgentEnvError, match=r"^--value_input=state: --env=leave_join has no global state .*team"):
        AgentEnv(LeaveJoinGame(0), "leave_join", value_input="state")
    assert AgentEnv(StateGame(0), "state_game", value_input="state").observation_space.team_space.shape == (11,)
    problem = multi_agent_problem(Cfg(env="CartPole-v1", value_input="team"), multi_agent=False)
    assert problem == "--value_input=team: needs a multi-agent env (--env=CartPole-v1 has one agent)"
    dict_obs = gym.spaces.Dict({"a": gym.spaces.Box(0, 1, (2,), np.float32)})

    class DictGame(LeaveJoinGame):
        def observation_space(self, agent: str) -> gym.Space:
            return dict_obs

    with pytest.raises(AgentEnvError, match=r"^--value_input=team: --env=dict_game has Dict observations"):
        AgentEnv(DictGame(0), "dict_game", value_input="team")


def test_agents_of_different_spaces_give_their_padded_rows_to_the_team_input() -> None:
    env = AgentEnv(UnequalSpacesGame(0), "unequal", value_input="team")
    width = env.spaces.observation_space.shape[0]  # each row padded, with its kind one-hot
    obs, active = env.reset()
    rows = env.team_input(obs)
    assert rows.shape == (K, K * width + K + 1)
    np.testing.assert_array_equal(rows[:, : K * width], np.tile(obs.reshape(-1), (K, 1)))
    assert not active[2] and not rows[:, 2 * width : 3 * width].any()  # "c" has not joined: its part is zeros
