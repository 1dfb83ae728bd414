"""Under episodic life a lost life ends a learning episode while the game goes on, and the episodes a run reports are
whole games: every game's end must be reported as one, however it comes.

- The native vector env (appo/sampling/vector_split.py over ale-py's AtariVectorEnv) resets a finished game within
  the step, so the info it hands back is the next game's: a game that ends while the player holds more lives than
  a new game starts with (bonus lives) is still a game's end, not a lost life.
- The single-env wrapper (envs/atari/atari.py `EpisodicLife`) takes one no-op after a lost life; where that no-op ends
  the game (the step cap landing on it, or the last life lost with it), the game's end is reported as such."""

from __future__ import annotations

from functools import partial

import gymnasium as gym
import numpy as np
import pytest

from appo.envs.atari.atari import EpisodicLife
from appo.envs.common.episode_end import EPISODE_CONTINUES
from appo.sampling.vector_split import VectorEnvRunner
from tests.support.drive_runner import drive, make_runner
from tests.support.scripted_atari_vector import ScriptedAtariVector

# Lives after each step. Game A gains two lives and ends (a won game, a clock run out) holding 7, more than the 5 a
# new game starts with; game B loses a life at its 2nd and 4th steps and ends at its 7th with none left.
GAME_A = [5, 6, 6, 7, 7, 7]
GAME_B = [5, 4, 4, 3, 3, 3, 0]


class RecordingVectorRunner(VectorEnvRunner):
    """Keeps each step's learning-episode ends per env: (env, game goes on) for every done."""

    def _record_episodes(self, rewards, dones, ends, failed) -> None:
        self.ends_seen = getattr(self, "ends_seen", [])
        self.ends_seen += [(int(i), bool(self.continues[i])) for i in np.flatnonzero(dones)]
        super()._record_episodes(rewards, dones, ends, failed)


def test_vector_reports_a_game_that_ends_with_more_lives_than_a_new_one_starts_with() -> None:
    space = ScriptedAtariVector.single_observation_space
    runner_cls = partial(RecordingVectorRunner, vector_fn=lambda n: ScriptedAtariVector(n, [GAME_A, GAME_B]))
    runner, views = make_runner(lambda i: None, space, ScriptedAtariVector.single_action_space, 2, 4, runner_cls)
    drive(runner, views, 2 * (len(GAME_A) + len(GAME_B)), lambda k: np.zeros(2, np.int64))
    # Each env plays B (7 steps; the runner's own resets at its start begin the second game), A (6), B, A; a point
    # a step, so each game's return is its length.
    games = [(e.length, e.episode_return) for e in runner.finished]
    assert games == [(7, 7.0), (7, 7.0), (6, 6.0), (6, 6.0)] * 2
    # Learning episodes: B's two lost lives (the game going on) and its end, then A's end, per env.
    per_env = [[goes_on for env, goes_on in runner.ends_seen if env == i] for i in range(2)]
    assert per_env == [[True, True, False, False] * 2] * 2


def test_vector_with_a_real_rom_reports_whole_games_of_five_lives() -> None:
    """Random Breakout through ale-py's own vector env: each reported game is five learning episodes, four lost lives
    that go on and a game over, whatever its length."""
    pytest.importorskip("ale_py")
    from appo.envs.atari.atari import make_atari_vector

    space = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
    runner_cls = partial(
        RecordingVectorRunner, vector_fn=lambda n: make_atari_vector("atari_breakout", n, episodic_life=True)
    )
    runner, views = make_runner(lambda i: None, space, gym.spaces.Discrete(4), 2, 32, runner_cls)
    rng = np.random.default_rng(0)
    requests = None
    for _ in range(40):  # at most 40 x 32 steps; a random game lasts 100-300
        requests = drive(runner, views, 32, lambda k: rng.integers(4, size=2), requests)
        if len(runner.finished) >= 3:
            break
    assert len(runner.finished) >= 3
    for i in range(2):
        goes_on = [g for env, g in runner.ends_seen if env == i]
        games = goes_on.count(False)
        assert goes_on[: 5 * games] == [True, True, True, True, False] * games, goes_on


def breakout(**kwargs) -> gym.Env:
    pytest.importorskip("ale_py")
    from appo.envs import make_env

    return make_env("atari_breakout", episodic_life=True, **kwargs)


def first_life_lost_at(seed: int) -> int:
    """The agent step at which NOOP play (FIRE served the ball at reset) loses Breakout's first life."""
    env = breakout()
    env.reset(seed=seed)
    for step in range(1, 2000):
        _, _, terminated, truncated, info = env.step(0)
        if terminated or truncated:
            assert info.get(EPISODE_CONTINUES) and info["lives"] == 4, info
            return step
    pytest.fail("NOOP play lost no Breakout life in 2,000 steps")


def test_a_step_cap_landing_on_the_no_op_after_a_lost_life_ends_the_game() -> None:
    k = first_life_lost_at(seed=0)
    env = breakout(max_episode_steps=k + 1)  # the no-op after the lost life is the game's last step
    env.reset(seed=0)
    for _ in range(k - 1):
        assert env.step(0)[2:4] == (False, False)
    _, _, terminated, truncated, info = env.step(0)
    assert terminated and truncated and EPISODE_CONTINUES not in info, info
    env.reset(seed=1)
    assert env.unwrapped.ale.lives() == 5  # a new game

    # The runner reports the game (k agent steps) at that step, not merged with the next one.
    runner, views = make_runner(
        lambda i: breakout(max_episode_steps=k + 1), env.observation_space, env.action_space, 1, 8
    )
    drive(runner, views, k, lambda _: np.zeros(1, np.int64))
    assert [e.length for e in runner.finished] == [k]


class _Lives:
    def __init__(self, game: TwoDeathGame) -> None:
        self.game = game

    def lives(self) -> int:
        return self.game.lives_left


class TwoDeathGame(gym.Env):
    """An ALE-like game of two lives, a point a step: the first life is lost at its 3rd step, the last at its 4th
    (the no-op that episodic life takes after the first), which ends the game. Observation: [game number, step]."""

    observation_space = gym.spaces.Box(0.0, 1e6, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self) -> None:
        self.ale = _Lives(self)
        self.games, self.t, self.lives_left = 0, 0, 2

    def _obs(self) -> np.ndarray:
        return np.array([self.games, self.t], np.float32)

    def reset(self, *, seed=None, options=None):
        self.games, self.t, self.lives_left = self.games + 1, 0, 2
        return self._obs(), {"lives": self.lives_left}

    def step(self, action):
        self.t += 1
        self.lives_left -= self.t in (3, 4)
        return self._obs(), 1.0, self.lives_left == 0, False, {"lives": self.lives_left}


def test_a_last_life_lost_with_the_no_op_ends_the_game() -> None:
    env = EpisodicLife(TwoDeathGame())
    env.reset(seed=0)
    assert env.step(0)[1:4] == (1.0, False, False) and env.step(0)[1:4] == (1.0, False, False)
    obs, reward, terminated, truncated, info = env.step(0)
    assert terminated and not truncated and EPISODE_CONTINUES not in info and info["lives"] == 0
    assert reward == 2.0  # the game's score counts the no-op's point
    assert env.reset()[0].tolist() == [2, 0]  # a new game

    runner, views = make_runner(lambda i: EpisodicLife(TwoDeathGame()), env.observation_space, env.action_space, 1, 4)
    drive(runner, views, 6, lambda _: np.zeros(1, np.int64))
    assert [(e.length, e.episode_return) for e in runner.finished] == [(3, 4.0), (3, 4.0)]
