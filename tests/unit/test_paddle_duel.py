"""paddle_duel: the PettingZoo Parallel API contract (duck-typed), zero-sum game ends, the time limit as a draw,
paddle hits, mirrored own-frame observations, seeding, rendering, and the scripted tracker against random play."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from gymnasium import spaces

from appo.envs.multi_agent.paddle_duel import DOWN, STAY, UP, VEL_SCALE, PaddleDuelEnv, play_games, scripted_action
from tests.conftest import ROOT


def mirror(obs: np.ndarray) -> np.ndarray:
    """The other side's view of the same court: x and vx negated, own and opponent paddle swapped."""
    out = obs.copy()
    out[0], out[2] = -obs[0], -obs[2]
    out[4], out[5] = obs[5], obs[4]
    return out


def random_policy(seed: int):
    rng = np.random.default_rng(seed)
    return lambda obs: int(rng.integers(3))


def test_spaces_agents_and_metadata() -> None:
    env = PaddleDuelEnv()
    assert env.possible_agents == ["left", "right"]
    assert env.metadata == {"render_modes": ["rgb_array"], "name": "paddle_duel"}
    assert env.render_mode is None and env.agents == []
    for agent in env.possible_agents:
        obs_space, act_space = env.observation_space(agent), env.action_space(agent)
        assert obs_space is env.observation_space(agent) and act_space is env.action_space(agent)
        assert isinstance(obs_space, spaces.Box) and obs_space.shape == (7,) and obs_space.dtype == np.float32
        assert isinstance(act_space, spaces.Discrete) and act_space.n == 3
    obs, infos = env.reset(seed=0)
    assert env.agents == ["left", "right"] and set(obs) == set(infos) == {"left", "right"}
    for agent, o in obs.items():
        assert o.dtype == np.float32 and env.observation_space(agent).contains(o)


def test_a_game_ends_zero_sum_with_no_live_agents() -> None:
    env = PaddleDuelEnv()
    obs, _ = env.reset(seed=3)
    rand = random_policy(0)
    steps = 0
    while env.agents:
        live = list(env.agents)
        obs, rewards, terms, truncs, infos = env.step(
            {"left": rand(obs["left"]), "right": scripted_action(obs["right"])}
        )
        steps += 1
        for d in (obs, rewards, terms, truncs, infos):
            assert set(d) == set(live)
        assert rewards["left"] + rewards["right"] == 0.0
        for agent in live:
            assert env.observation_space(agent).contains(obs[agent])
    assert steps < env.max_steps and env.agents == []
    assert terms == {"left": True, "right": True} and truncs == {"left": False, "right": False}
    assert sorted(rewards.values()) == [-1.0, 1.0]
    winner = max(rewards, key=rewards.get)
    assert infos["left"]["winner"] == infos["right"]["winner"] == winner
    with pytest.raises(RuntimeError, match="reset"):
        env.step({"left": STAY, "right": STAY})


def test_time_limit_truncates_as_a_draw() -> None:
    env = PaddleDuelEnv(max_steps=5)
    env.reset(seed=1)
    for _ in range(4):
        _, rewards, terms, truncs, infos = env.step({"left": STAY, "right": STAY})
        assert not any(terms.values()) and not any(truncs.values()) and env.agents == ["left", "right"]
        assert "winner" not in infos["left"]
    _, rewards, terms, truncs, infos = env.step({"left": STAY, "right": STAY})
    assert truncs == {"left": True, "right": True} and terms == {"left": False, "right": False}
    assert rewards == {"left": 0.0, "right": 0.0}
    assert infos["left"]["winner"] is None and infos["right"]["winner"] is None and env.agents == []


def test_a_miss_loses_and_an_edge_hit_returns_a_faster_steeper_ball() -> None:
    env = PaddleDuelEnv()
    env.reset(seed=0)
    env.set_state(-0.98, 0.5, -0.05, 0.0, -0.5, 0.0)  # the left paddle is far from the ball
    _, rewards, terms, _, infos = env.step({"left": STAY, "right": STAY})
    assert rewards == {"left": -1.0, "right": 1.0} and all(terms.values()) and infos["left"]["winner"] == "right"

    angles = {}
    for paddle_y in (0.5, 0.5 - 0.9 * env.paddle_half):  # centre hit, then near the paddle's top edge
        env.reset(seed=0)
        env.set_state(-0.98, 0.5, -0.05, 0.0, paddle_y, 0.0)
        _, rewards, terms, _, _ = env.step({"left": STAY, "right": STAY})
        _, _, vx, vy, _, _ = env.state()
        assert not any(terms.values()) and rewards == {"left": 0.0, "right": 0.0}
        assert vx > 0 and np.hypot(vx, vy) == pytest.approx(0.05 * env.speedup)
        angles[paddle_y] = np.degrees(np.arctan2(vy, vx))
    centre, edge = angles.values()
    assert centre == pytest.approx(0.0) and edge > 30.0


def test_observations_are_mirror_images() -> None:
    # the same state seen from both sides, and a game played on a mirrored court with the sides' actions
    # swapped: each side sees what the other one saw
    env, mirrored = PaddleDuelEnv(), PaddleDuelEnv()
    obs, _ = env.reset(seed=11)
    x, y, vx, vy, left_y, right_y = env.state()
    mirrored.reset(seed=11)
    mirrored.set_state(-x, y, -vx, vy, right_y, left_y)
    np.testing.assert_array_equal(obs["right"], mirror(obs["left"]))
    rand = random_policy(5)
    hits = 0
    while env.agents:
        a_left, a_right = scripted_action(obs["left"]), rand(obs["right"])
        old_vx = env.state()[2]
        obs, rewards, _, _, _ = env.step({"left": a_left, "right": a_right})
        mobs, mrewards, _, _, _ = mirrored.step({"left": a_right, "right": a_left})
        hits += old_vx * env.state()[2] < 0
        np.testing.assert_array_equal(obs["left"], mobs["right"])
        np.testing.assert_array_equal(obs["right"], mobs["left"])
        np.testing.assert_array_equal(obs["right"], mirror(obs["left"]))
        assert rewards == {"left": mrewards["right"], "right": mrewards["left"]}
    assert mirrored.agents == [] and hits >= 1


def test_seeding_reproduces_games_and_seeds_vary_the_serve() -> None:
    def trajectory(seed: int) -> list[np.ndarray]:
        env = PaddleDuelEnv()
        obs, _ = env.reset(seed=seed)
        rand_left, rand_right = random_policy(1), random_policy(2)
        out = [obs["left"]]
        while env.agents:
            obs, *_ = env.step({"left": rand_left(obs["left"]), "right": rand_right(obs["right"])})
            out.append(obs["left"])
        return out

    first, again = trajectory(4), trajectory(4)
    assert len(first) == len(again)
    for a, b in zip(first, again, strict=True):
        np.testing.assert_array_equal(a, b)
    serves = {tuple(PaddleDuelEnv().reset(seed=s)[0]["left"][[1, 2, 3]]) for s in range(20)}
    assert len(serves) == 20
    directions = {np.sign(v[1]) for v in serves}
    assert directions == {-1.0, 1.0}  # served towards both sides
    assert max(abs(v[1]) for v in serves) == pytest.approx(0.05 * VEL_SCALE, rel=0.2)


def test_render_rgb_array() -> None:
    env = PaddleDuelEnv(render_mode="rgb_array")
    env.reset(seed=0)
    frame = env.render()
    assert frame.shape == (84, 84, 3) and frame.dtype == np.uint8
    assert (frame == 255).all(axis=2)[:, 0].sum() > 5 and (frame == 255).all(axis=2)[:, -1].sum() > 5  # paddles
    assert (frame[:, 2:-2] > 0).any()  # the ball
    env.close()
    assert PaddleDuelEnv().render() is None
    with pytest.raises(ValueError, match="rgb_array"):
        PaddleDuelEnv(render_mode="human")


def test_scripted_tracker_moves_towards_the_ball() -> None:
    obs = np.array([0.0, 0.5, -0.5, 0.0, 0.0, 0.0, 0.0], dtype=np.float32)
    assert scripted_action(obs) == UP
    obs[1] = -0.5
    assert scripted_action(obs) == DOWN
    obs[1] = 0.01
    assert scripted_action(obs) == STAY


def test_tracker_beats_random_play_and_splits_with_itself() -> None:
    result = play_games(scripted_action, random_policy(0), games=50, seed=0)
    assert result["wins"] + result["losses"] + result["draws"] == 50
    assert result["win_rate"] == result["wins"] / 50 >= 0.9
    # counted from policy_a's view: random play against the tracker loses
    assert play_games(random_policy(1), scripted_action, games=20, seed=100)["win_rate"] <= 0.1
    mirror_match = play_games(scripted_action, scripted_action, games=40, seed=200)
    assert mirror_match["draws"] <= 2 and 0.3 <= mirror_match["win_rate"] <= 0.7


def test_pettingzoo_parallel_api_test_passes_without_pettingzoo_imported_by_the_env() -> None:
    code = "import sys, appo.envs.multi_agent.paddle_duel; assert 'pettingzoo' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, timeout=60)
    pz_test = pytest.importorskip("pettingzoo.test")
    pz_test.parallel_api_test(PaddleDuelEnv(), num_cycles=500)
