"""The split runner of multi-agent games (appo/sampling/agent_split.py AgentEnvRunner) and the env contract it relies
on (appo/envs/multi_agent.py AgentEnv), driven as an actor worker drives them: actions written into the shared
buffers, one ActionsReady per step, slot groups released as a learner would. A reference loop steps the same games
directly (their own dict API) and says what every row must hold: observations, rewards, dones, truncations, `valid`
and the reported episodes of each agent, across agents leaving early, joining late, game resets and rollout ends.
Contract breaks stop the runner with a one-line AgentEnvError that names the agent."""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium import spaces

from appo.config.cfg import Cfg
from appo.config.derive import derive
from appo.envs import make_env
from appo.envs.multi_agent.multi_agent import AgentEnv, AgentEnvError, run_game
from appo.protocol.buffers import allocate_control, allocate_trajectories, numpy_views
from appo.protocol.messages import ActionsReady, InferenceRequest, TrajectoryReady
from appo.sampling.agent_split import AgentEnvRunner
from appo.sampling.split_envs import FinishedEpisode
from tests.support.agent_games import AGENTS, BrokenGame, LeaveJoinGame, MixedActionsGame, UnequalSpacesGame

K = len(AGENTS)
ROW = {agent: j for j, agent in enumerate(AGENTS)}


def runner_for(
    make_game, num_policies: int = 1, rollout: int = 4, worker_idx: int = 1, games: int = 2, value_input: str = "local"
):
    """The one split of actor worker `worker_idx` (of two) over `games` games of 3 agents, its buffers and control."""
    cfg = Cfg(
        env="leave_join",
        num_workers=2,
        num_envs_per_worker=games,
        worker_num_splits=1,
        rollout=rollout,
        batch_size=K * games * rollout,
        num_policies=num_policies,
    )
    d = derive(cfg, agents_per_env=K, multi_agent=True)
    space = AgentEnv(make_game(0), "leave_join", value_input=value_input)
    views = numpy_views(allocate_trajectories(cfg, d, space.observation_space, space.action_space))
    control = numpy_views(allocate_control(cfg, d))
    built: list[int] = []

    def env_fn(index: int) -> AgentEnv:
        built.append(index)
        return AgentEnv(make_game(index), "leave_join", value_input=value_input)

    runner = AgentEnvRunner(cfg, d, worker_idx, 0, views, env_fn, control, agents_per_env=K)
    return cfg, d, views, runner, built


class ReferenceGame:
    """One game stepped through its own API: what its rows must read (agent_split.py's module docstring)."""

    def __init__(self, index: int, game: type = LeaveJoinGame) -> None:
        self.env = game(index)
        self.returns, self.lengths = np.zeros(K), np.zeros(K, dtype=np.int64)
        self.resets = 0
        self.obs = self._rows(self.env.reset()[0])

    def _rows(self, obs: dict) -> np.ndarray:
        """Observations of the agents in the game; zeros for rows out of it (left, or not joined yet)."""
        out = np.zeros((K, 4), np.float32)
        for agent in self.env.agents:
            out[ROW[agent]] = obs[agent]
        return out

    def step(self, actions: np.ndarray, finished: list) -> tuple[np.ndarray, ...]:
        reward, done = np.zeros(K, np.float32), np.ones(K, np.float32)
        truncated, valid = np.zeros(K, np.float32), np.zeros(K, np.float32)
        acting = list(self.env.agents)
        obs, rewards, terms, truncs, _ = self.env.step({a: int(actions[ROW[a]]) for a in acting})
        for agent in acting:
            j = ROW[agent]
            reward[j], valid[j] = rewards[agent], 1.0
            done[j] = float(terms[agent] or truncs[agent])
            truncated[j] = float(truncs[agent] and not terms[agent])
            self.returns[j] += rewards[agent]
            self.lengths[j] += 1
            if done[j]:
                finished.append(FinishedEpisode(float(self.returns[j]), int(self.lengths[j]), 0, agent=agent))
                self.returns[j], self.lengths[j] = 0.0, 0
        if not self.env.agents:  # every agent left: the game starts again
            obs = self.env.reset()[0]
            self.resets += 1
        self.obs = self._rows(obs)
        return reward, done, truncated, valid


def answer(runner: AgentEnvRunner, views, request: InferenceRequest, actions: np.ndarray) -> list:
    """As a policy worker answers: the actions into the request's slots, then ActionsReady."""
    first, t = request.first_slot, request.t
    views["actions"][first : first + len(actions), t, 0] = actions
    return runner.on_actions(ActionsReady(request.worker_idx, request.split_idx, first, t, request.incarnation, 0))


def test_every_row_matches_a_reference_loop_across_leaving_joining_resets_and_rollouts() -> None:
    cfg, d, views, runner, built = runner_for(LeaveJoinGame, rollout=4, worker_idx=1)
    n, T = d.envs_per_split, cfg.rollout
    assert n == 2 * K and runner.num_games == 2
    (request,) = runner.init(seed=0)
    assert built == [2, 3]  # the run-wide game indices: worker 1 has the run's games 2 and 3
    refs = [ReferenceGame(index) for index in built]
    expected_finished: list = []
    got_finished: list = []
    rng = np.random.default_rng(7)
    rollouts = ends_at_rollout_end = absent_row_steps = 0
    for _ in range(13 * T):  # 13 rollouts, in the slot groups the releases hand back
        first, t = request.first_slot, request.t
        slots = slice(first, first + n)
        expected_obs = np.concatenate([ref.obs for ref in refs])
        np.testing.assert_array_equal(views["obs"][slots, t], expected_obs, err_msg=f"obs at t={t}")
        actions = rng.integers(0, 3, n)
        out = answer(runner, views, request, actions)
        resets_before = sum(ref.resets for ref in refs)
        steps = [ref.step(actions[g * K : (g + 1) * K], expected_finished) for g, ref in enumerate(refs)]
        reward, done, truncated, valid = (np.concatenate(field) for field in zip(*steps, strict=True))
        np.testing.assert_array_equal(views["rewards"][slots, t], reward, err_msg=f"rewards at t={t}")
        np.testing.assert_array_equal(views["dones"][slots, t], done, err_msg=f"dones at t={t}")
        np.testing.assert_array_equal(views["truncated"][slots, t], truncated, err_msg=f"truncated at t={t}")
        np.testing.assert_array_equal(views["valid"][slots, t], valid, err_msg=f"valid at t={t}")
        np.testing.assert_array_equal(
            views["obs"][slots, t + 1], np.concatenate([ref.obs for ref in refs]), err_msg=f"obs at t={t + 1}"
        )
        absent_row_steps += int((valid == 0).sum())
        got_finished += runner.pop_finished()
        assert got_finished == expected_finished, f"episodes differ after t={t} of rollout {rollouts}"
        if t == T - 1:
            ends_at_rollout_end += sum(ref.resets for ref in refs) - resets_before
        ready = [m for m in out if type(m) is TrajectoryReady]
        requests = [m for m in out if type(m) is InferenceRequest]
        if ready:  # the rollout is handed over: the learner trains on it and releases its slots
            rollouts += 1
            assert [(m.first_slot, m.num_envs, m.envs) for m in ready] == [(first, n, None)]
            requests += runner.on_slots_released(ready[0].group_idx, 0, ready[0].incarnation)
        (request,) = requests
        assert request.t == (0 if ready else t + 1)
    assert rollouts == 13
    # The run went through what the test is about: several games per game slot, games that ended on a rollout's
    # last step (their next game starts the next rollout), agents out of their game, and agents' episodes of
    # different lengths: "a" leaves early, "c" joins late, "b" plays whole games.
    assert all(ref.resets >= 6 for ref in refs)
    assert ends_at_rollout_end >= 1
    assert absent_row_steps > 0
    assert len({e.length for e in expected_finished}) >= 4


def test_a_games_rows_are_reset_once_together_and_absent_agents_start_as_zeros() -> None:
    cfg, d, views, runner, _ = runner_for(LeaveJoinGame, rollout=3, worker_idx=0, games=1)
    (request,) = runner.init(seed=0)
    first = request.first_slot
    obs0 = views["obs"][first : first + K, 0]
    # "a" and "b" play from the reset; "c" has not joined: a zero row that does not act at the first step.
    np.testing.assert_array_equal(obs0[:2], [[0, 0, -1, 0], [0, 1, -1, 0]])
    np.testing.assert_array_equal(obs0[2], np.zeros(4))
    assert runner.games[0].env.games == 0, "the game was reset more than once for its three rows"
    answer(runner, views, request, np.array([2, 1, 0]))
    assert views["valid"][first : first + K, 0].tolist() == [1.0, 1.0, 0.0]
    assert views["dones"][first : first + K, 0].tolist() == [0.0, 0.0, 1.0]  # nothing bootstraps across "c"
    assert views["rewards"][first : first + K, 0].tolist() == [2.25, 2.25, 0.0]
    # Game 0 of index 0: "c" joins after step 1, so it acts at the second step.
    np.testing.assert_array_equal(views["obs"][first + 2, 1], [1, 2, -1, 0])


@pytest.mark.parametrize(("fault", "message"), [("missing", r"live agent 'b'"), ("nan", r"agent 'b' got a non-finite")])
def test_a_contract_break_stops_the_runner_with_one_line_naming_the_agent(fault: str, message: str) -> None:
    cfg, d, views, runner, _ = runner_for(lambda index: BrokenGame(fault, at_step=2, index=index), worker_idx=0)
    (request,) = runner.init(seed=0)
    (request,) = answer(runner, views, request, np.zeros(d.envs_per_split, dtype=np.int64))
    with pytest.raises(AgentEnvError, match=message) as raised:
        answer(runner, views, request, np.zeros(d.envs_per_split, dtype=np.int64))
    text = str(raised.value)
    assert "\n" not in text and "--env=leave_join" in text, text
    assert runner.env_errors.sum() == 0, "a contract break is not an env error to recover from"


def test_a_game_that_raises_is_rebuilt_and_its_agents_episodes_dropped() -> None:
    """An env that crashes (not a contract break) costs its game, not the worker: every row of the game ends there
    like a time limit, nothing of it is reported, and the rebuilt game starts from its reset."""
    built: list[int] = []

    def make_game(index: int) -> BrokenGame:
        built.append(index)
        return BrokenGame("raise", at_step=2, index=index) if index == 0 and len(built) == 2 else LeaveJoinGame(index)

    cfg, d, views, runner, _ = runner_for(make_game, worker_idx=0)
    (request,) = runner.init(seed=0)
    first = request.first_slot
    (request,) = answer(runner, views, request, np.ones(d.envs_per_split, dtype=np.int64))
    answer(runner, views, request, np.ones(d.envs_per_split, dtype=np.int64))
    assert built == [0, 0, 1, 0], "game 0 rebuilt once"  # (the first build reads the spaces)
    assert views["dones"][first : first + K, 1].tolist() == [1.0] * K
    assert views["truncated"][first : first + K, 1].tolist() == [1.0] * K
    np.testing.assert_array_equal(views["obs"][first : first + 2, 2], [[0, 0, -1, 0], [0, 1, -1, 0]])
    # The other game plays on ("c" joins it after its second step).
    assert views["dones"][first + K : first + 2 * K, 1].tolist() == [0.0, 0.0, 1.0]
    np.testing.assert_array_equal(views["obs"][first + K : first + 2 * K, 2, 0], [2, 2, 2])
    assert runner.pop_finished() == [] and runner.env_errors[:K].tolist() == [1] * K


def test_spaces_changed_after_start_are_refused_naming_the_agent() -> None:
    env = AgentEnv(BrokenGame("spaces", at_step=2), "broken")
    _, active = env.reset(seed=0)
    env.check_spaces()
    _, _, _, _, active, _, _ = env.step(np.zeros(K, dtype=np.int64), active)
    env.check_spaces()  # one step: still the spaces of the start
    _, _, _, _, active, _, _ = env.step(np.zeros(K, dtype=np.int64), active)
    with pytest.raises(AgentEnvError, match=r"agent 'c' changed its spaces") as raised:
        env.check_spaces()
    assert "\n" not in str(raised.value)


def test_agents_whose_actions_cannot_be_padded_to_one_space_are_refused_naming_the_agent() -> None:
    with pytest.raises(AgentEnvError, match=r"--env=mixed: agent 'c' has actions Box\(-1.0, 1.0, \(2,\)") as raised:
        AgentEnv(MixedActionsGame(), "mixed")
    assert "\n" not in str(raised.value) and "Discrete actions (from 0) or all 1-D Box actions" in str(raised.value)


def test_agents_with_different_action_spaces_play_through_one_padded_space() -> None:
    env = AgentEnv(UnequalSpacesGame(), "unequal")
    # Two kinds of agent ("a" and "b" with 3 actions, "c" with 4): the observation is the game's 4 values, then the
    # kind one-hot; actions come from the larger space, "a"'s 3 (past its range) taken as its action 0.
    assert env.action_space == spaces.Discrete(4) and env.observation_space.shape == (4 + 2,)
    obs, active = env.reset(seed=0)
    np.testing.assert_array_equal(obs[:2], [[0, 0, -1, 0, 1, 0], [0, 1, -1, 0, 1, 0]])
    assert not obs[2].any() and active.tolist() == [True, True, False]
    obs, rewards, *_ = env.step(np.array([3, 2, 0]), active)
    assert obs[0, 2] == 0 and obs[1, 2] == 2 and rewards.tolist() == [0.25, 3.25, 0.0]
    assert obs[2].tolist() == [1, 2, -1, 0, 0, 1]  # "c" joined after the first step: its kind is the second


def test_agent_env_rows_follow_possible_agents_with_inactive_rows_zero() -> None:
    env = AgentEnv(LeaveJoinGame(index=0), "leave_join")
    assert env.num_agents == K and env.observation_space.shape == (4,) and env.action_space.n == 3
    obs, active = env.reset(seed=0)
    assert active.tolist() == [True, True, False]
    actions = np.array([1, 2, 0])
    obs, r, term, trunc, active, over, _ = env.step(actions, active)  # "c" joins
    assert r.tolist() == [1.25, 3.25, 0.0] and active.tolist() == [True, True, True] and not over
    np.testing.assert_array_equal(obs[2], [1, 2, -1, 0])
    for _ in range(2):  # "a" terminates at step 3 and gives its last observation; it is not active after
        obs, r, term, trunc, active, over, _ = env.step(actions, active)
    assert term.tolist() == [True, False, False] and active.tolist() == [False, True, True] and not over
    np.testing.assert_array_equal(obs[0], [3, 0, 1, 0])
    obs, r, term, trunc, active, over, _ = env.step(actions, active)
    assert r[0] == 0.0, "an agent out of the game gets no reward"
    while not over:
        obs, r, term, trunc, active, over, _ = env.step(actions, active)
    assert term.tolist() == [False, False, True] and trunc.tolist() == [False, True, False]


def test_a_population_mixes_policies_in_a_game_and_cuts_the_game_where_a_row_changes_policy() -> None:
    """Every row draws its policy when its agent's episode ends, so one game's rows run different policies; a row
    whose next policy differs changes at the rollout's end, where its whole game is cut and started again."""
    cfg, d, views, runner, _ = runner_for(LeaveJoinGame, num_policies=2, rollout=4, worker_idx=0, games=2)
    n, T = d.envs_per_split, cfg.rollout
    requests = runner.init(seed=3)
    mixed_games = cuts = 0
    for _ in range(40):  # rollouts
        first = requests[0].first_slot
        policies = runner.env_policy.copy()
        assert runner.slot_policy[first : first + n].tolist() == policies.tolist()  # whose weights act per row
        mixed_games += sum(len(set(policies[g * K : (g + 1) * K])) > 1 for g in range(2))
        for t in range(T):
            views["actions"][first : first + n, t, 0] = 1
            out = [m for r in requests for m in runner.on_actions(ActionsReady(0, 0, first, t, 0, r.policy_id))]
            requests = [m for m in out if type(m) is InferenceRequest]
        ready = [m for m in out if type(m) is TrajectoryReady]
        sent = {e: m.policy_id for m in ready for e in (m.envs if m.envs is not None else range(n))}
        assert sent == dict(enumerate(policies.tolist())), "each learner gets the rows that ran its policy"
        for g in range(2):
            rows = slice(g * K, (g + 1) * K)
            if (runner.env_policy[rows] != policies[rows]).any():
                cuts += 1
                assert views["dones"][first + g * K : first + (g + 1) * K, T - 1].tolist() == [1.0] * K
                assert runner.games[g].env.steps == 0, "the cut game starts the next rollout from its reset"
                assert (runner.ep_lengths[rows] == 0).all()
        for m in ready:
            requests += runner.on_slots_released(m.group_idx, m.policy_id, m.incarnation)
    assert mixed_games > 0 and cuts > 0


def test_max_episode_steps_truncates_every_agent_still_in_a_class_path_game() -> None:
    """--max_episode_steps for a Parallel env given as module:Class: every agent in the game is truncated there."""
    env = make_env("tests.support.agent_games:LeaveJoinGame", max_episode_steps=3)
    assert isinstance(env, AgentEnv)
    for game in range(2):
        _, active = env.reset(seed=game)
        for step in range(3):
            _, _, term, trunc, active, over, _ = env.step(np.array([1, 2, 0]), active)
            assert over == (step == 2), (game, step)
        # at step 3 "a" terminates by the game's own rules; "b" and "c" (joined) are cut by the limit
        assert (term | trunc).tolist() == [True, True, True] and trunc[1:].all(), (term, trunc)


class DiscreteFromOne:
    """Two agents whose observations are Discrete(3, start=1): the values 1, 2, 3."""

    possible_agents = ["x", "y"]

    def __init__(self) -> None:
        self.agents: list[str] = []

    def observation_space(self, agent: str) -> spaces.Space:
        return spaces.Discrete(3, start=1)

    def action_space(self, agent: str) -> spaces.Space:
        return spaces.Discrete(2)

    def reset(self, seed=None, options=None):
        self.agents = list(self.possible_agents)
        return {"x": 1, "y": 3}, {"x": {}, "y": {}}

    def step(self, actions):
        self.agents = []
        zero = {a: 0.0 for a in actions}
        return {"x": 2, "y": 1}, zero, {a: True for a in actions}, {a: False for a in actions}, {a: {} for a in actions}


def test_a_discrete_observation_space_starting_above_zero_is_one_hot_from_its_start() -> None:
    env = AgentEnv(DiscreteFromOne(), "discrete_from_one")
    assert env.observation_space.shape == (3,)
    obs, active = env.reset(seed=0)
    np.testing.assert_array_equal(obs, [[1, 0, 0], [0, 0, 1]])
    obs, *_ = env.step(np.zeros(2, dtype=np.int64), active)
    np.testing.assert_array_equal(obs, [[0, 1, 0], [1, 0, 0]])


def test_games_against_a_scripted_opponent_alternate_sides_with_or_without_seeds() -> None:
    env = make_env("paddle_duel", max_episode_steps=20)
    act = lambda obs, reset: np.zeros(len(obs), dtype=np.int64)  # noqa: E731
    assert [run_game(env, act, seed)[2]["policy_row"] for seed in (10, 11, 12)] == [0, 1, 0]
    unseeded = [run_game(env, act, None)[2]["policy_row"] for _ in range(4)]  # as enjoy.py's games after the first
    assert sorted(unseeded) == [0, 0, 1, 1] and unseeded[0] != unseeded[1], unseeded
