"""The Atari family (envs/atari/atari.py): its preprocessing equals a reference built from gymnasium's own wrappers,
episodic life ends learning episodes at each lost life while the game goes on, FIRE starts games that wait for it,
and names map to games with a one-line error for unknown ones."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

ale_py = pytest.importorskip("ale_py")

from appo.envs import UnknownEnvError, make_env  # noqa: E402
from appo.envs.common.episode_end import EPISODE_CONTINUES  # noqa: E402

gym.register_envs(ale_py)


def reference(game_id: str) -> gym.Env:
    """NoFrameskip-v4 semantics (no sticky actions, one frame a step) under gymnasium's Atari wrappers."""
    env = gym.make(game_id, frameskip=1, repeat_action_probability=0.0, full_action_space=False)
    env = gym.wrappers.AtariPreprocessing(env, noop_max=30, frame_skip=4, screen_size=84, grayscale_obs=True)
    return gym.wrappers.FrameStackObservation(env, 4)


@pytest.mark.parametrize("name,game_id", [("atari_breakout", "ALE/Breakout-v5"), ("atari_pong", "ALE/Pong-v5")])
def test_preprocessing_equals_gymnasium_wrappers_on_a_fixed_action_sequence(name: str, game_id: str) -> None:
    ours, ref = make_env(name, fire_reset=False), reference(game_id)
    assert ours.observation_space == ref.observation_space == gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
    assert ours.action_space == ref.action_space
    actions = np.random.default_rng(7).integers(ours.action_space.n, size=600)
    o1, _ = ours.reset(seed=11)
    o2, _ = ref.reset(seed=11)
    games = 0
    for t, a in enumerate(actions):
        np.testing.assert_array_equal(o1, o2, err_msg=f"step {t}")
        o1, r1, te1, tr1, _ = ours.step(int(a))
        o2, r2, te2, tr2, _ = ref.step(int(a))
        assert (r1, te1, tr1) == (r2, te2, tr2), f"step {t}"
        if te1 or tr1:
            games += 1
            o1, _ = ours.reset(seed=100 + t)
            o2, _ = ref.reset(seed=100 + t)
    assert o1.dtype == np.uint8 and o1.any()
    if name == "atari_breakout":
        assert games >= 1  # random play loses a Breakout game within 600 steps: resets were compared too


def test_episodic_life_ends_an_episode_per_lost_life_and_the_game_goes_on() -> None:
    env = make_env("atari_breakout", episodic_life=True)
    env.reset(seed=3)
    rng = np.random.default_rng(0)
    ends = []
    for _ in range(5000):
        _, _, terminated, truncated, info = env.step(int(rng.integers(env.action_space.n)))
        if terminated or truncated:
            ends.append((bool(info.get(EPISODE_CONTINUES, False)), int(info["lives"])))
            if not ends[-1][0]:
                break
            env.reset()
    # Breakout: 5 lives; each loss but the last ends an episode that continues, the last is game over.
    assert ends == [(True, 4), (True, 3), (True, 2), (True, 1), (False, 0)]


def test_whole_games_without_episodic_life() -> None:
    env = make_env("atari_breakout")
    env.reset(seed=3)
    rng = np.random.default_rng(0)
    for _ in range(5000):
        _, _, terminated, truncated, info = env.step(int(rng.integers(env.action_space.n)))
        assert EPISODE_CONTINUES not in info
        if terminated or truncated:
            assert info["lives"] == 0
            return
    pytest.fail("random play did not end a Breakout game in 5,000 steps")


@pytest.mark.parametrize("fire", [True, False])
def test_fire_reset_starts_a_game_that_waits_for_it(fire: bool) -> None:
    env = make_env("atari_breakout", fire_reset=fire)
    env.reset(seed=0)
    lives = []
    for _ in range(150):  # NOOP only: without FIRE at reset Breakout's ball never comes into play
        _, _, _, _, info = env.step(0)
        lives.append(info["lives"])
    assert (min(lives) < 5) is fire


def test_names_sticky_actions_and_errors() -> None:
    v5 = make_env("ALE/Pong-v5")
    assert v5.observation_space.shape == (4, 84, 84) and v5.action_space == gym.spaces.Discrete(6)
    assert v5.unwrapped.ale.getFloat("repeat_action_probability") == pytest.approx(0.25)
    assert make_env("atari_pong").unwrapped.ale.getFloat("repeat_action_probability") == 0.0
    with pytest.raises(UnknownEnvError, match=r"--env=atari_pongg: no Atari game 'pongg'.*pong"):
        make_env("atari_pongg")


def test_renders_the_colour_screen() -> None:
    env = make_env("atari_pong", render_mode="rgb_array")
    env.reset(seed=0)
    frame = env.render()
    assert frame.shape == (210, 160, 3) and frame.dtype == np.uint8


def lose_a_life(env: gym.Env) -> None:
    """Play NOOP from a reset (FIRE served the ball) until a lost life ends the learning episode."""
    for _ in range(2000):
        _, _, terminated, truncated, info = env.step(0)
        if terminated or truncated:
            assert info.get(EPISODE_CONTINUES) and info["lives"] == 4, info
            return
    pytest.fail("NOOP play lost no Breakout life in 2,000 steps")


def test_a_reset_that_cuts_a_game_starts_a_new_one_even_with_episodic_life() -> None:
    """A policy switch cuts the episode with a reset: the next policy gets a new game, not the rest of this one.
    After a lost life, the reset goes on with the same game."""
    env = make_env("atari_breakout", episodic_life=True)
    ale = env.unwrapped.ale
    env.reset(seed=3)
    for _ in range(15):
        env.step(3)
    frames = ale.getEpisodeFrameNumber()
    env.reset(seed=4)
    assert ale.getEpisodeFrameNumber() < frames and ale.lives() == 5
    lose_a_life(env)
    frames = ale.getEpisodeFrameNumber()
    env.reset(seed=5)
    assert ale.getEpisodeFrameNumber() >= frames and ale.lives() == 4  # the game goes on (no new game's count)
    env.reset(seed=6)  # a second reset without a step between: a cut, a new game
    assert ale.getEpisodeFrameNumber() < frames and ale.lives() == 5


def test_fire_starts_a_game_but_the_policy_serves_after_a_lost_life() -> None:
    """As in evaluation's whole games and in ale-py's vector env: FIRE at a game's start only."""
    env = make_env("atari_breakout", episodic_life=True)
    env.reset(seed=0)
    lose_a_life(env)
    env.reset()
    for _ in range(300):  # NOOP: no ball in play, no life lost
        _, _, terminated, _, info = env.step(0)
        assert not terminated and info["lives"] == 4


def test_max_episode_steps_counts_agent_steps() -> None:
    env = make_env("atari_breakout", max_episode_steps=50)
    env.reset(seed=0)
    for step in range(1, 51):
        _, _, terminated, truncated, _ = env.step(0)
        assert not terminated and truncated == (step == 50), step
