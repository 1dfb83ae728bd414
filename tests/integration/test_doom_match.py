"""Multiplayer Doom (envs/doom/match.py): a duel of two players through vizdoom's network game on loopback, a match
against built-in bots, two duels at once on ports of their own, and games and player processes that die with the
run that started them. Real games throughout (xdist group "doom": the tests count the machine's game processes)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import numpy as np
import psutil
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from appo.config.cfg import Cfg
from appo.envs import make_env, make_run_env
from appo.envs.common.episode_end import TRUE_OBJECTIVE
from appo.envs.doom.match import DoomMatch
from tests.conftest import _kill_group, run_script
from tests.integration.test_doom import RunGames, games, shm_of, wait_until_gone
from tests.integration.test_faults import start

pytestmark = pytest.mark.xdist_group("doom")


def player_processes(root: int) -> list[int]:
    try:
        procs = psutil.Process(root).children(recursive=True)
    except psutil.Error:
        return []
    out = []
    for p in procs:
        try:
            if "appo.envs.doom.player_server" in " ".join(p.cmdline()):
                out.append(p.pid)
        except psutil.Error:
            continue
    return out


def play(env: DoomMatch, rng: np.random.Generator) -> tuple[int, dict[str, float], dict[str, dict]]:
    """One episode of random actions: (steps, each player's return, each player's last info)."""
    env.reset()
    steps, returns = 0, dict.fromkeys(env.possible_agents, 0.0)
    while True:
        actions = {a: int(rng.integers(env.action_space(a).n)) for a in env.possible_agents}
        obs, rewards, terminated, truncated, infos = env.step(actions)
        steps += 1
        for a in env.possible_agents:
            assert env.observation_space(a).contains(obs[a])
            returns[a] += rewards[a]
        if any(terminated.values()) or any(truncated.values()):
            assert all(terminated.values()) and not any(truncated.values())  # the match's time limit ends it
            return steps, returns, infos


def test_a_duel_plays_through_the_network_game_and_its_processes_end_with_it() -> None:
    """Two episodes of a short duel; returns are frags minus deaths plus the damage reward (--doom_damage_reward)
    for damage dealt less damage taken, and in a duel one player's damage dealt is taken by the other (who may
    also take its own rockets' blast)."""
    env = DoomMatch("doom_duel", minutes=0.05, damage_reward=0.01)  # 105 tics: 26 or 27 steps of 4
    rng = np.random.default_rng(0)
    try:
        assert not player_processes(os.getpid())  # built, not started
        for _ in range(2):  # the second episode: a new one in the running match
            steps, returns, infos = play(env, rng)
            assert steps in (26, 27), steps  # the game ends the match at its tic 104 or 105
            started = games(os.getpid())
            assert len(started) == 2 and len(player_processes(os.getpid())) == 2
            frags = [infos[a]["frags"] for a in env.possible_agents]
            for a, mine, theirs in zip(env.possible_agents, frags, frags[::-1], strict=True):
                damage = infos[a]["damage_dealt"] - infos[a]["damage_taken"]
                assert returns[a] == pytest.approx(mine - infos[a]["deaths"] + 0.01 * damage)
                assert infos[a][TRUE_OBJECTIVE] == (0.5 if mine == theirs else float(mine > theirs))
            one, other = (infos[a] for a in env.possible_agents)
            assert one["damage_dealt"] <= other["damage_taken"] and other["damage_dealt"] <= one["damage_taken"]
    finally:
        players = player_processes(os.getpid())
        env.close()
    assert not wait_until_gone(players + list(started)), "a player or its game outlived close()"
    assert not shm_of(started.values())


def test_a_match_against_bots_counts_the_players_frags_and_deaths() -> None:
    """Random play against 4 bots for 30 s of game time, through the engine's multi-agent rows (the Dict
    observations packed into bytes): the bots kill it now and then, its return is its frags minus its deaths, and
    its true objective its frags."""
    env = make_env("doom_deathmatch_bots", minutes=0.5)
    rng = np.random.default_rng(1)
    try:
        rows, active = env.reset(seed=0)
        space = env.observation_space
        assert rows.shape == (1, space.shape[0]) and rows.dtype == np.uint8 and active.all()
        assert space.unpack(rows[0])["screen"].shape == (72, 128, 3)
        total, steps, over = 0.0, 0, False
        while not over:
            rows, rewards, terminated, truncated, active, over, infos = env.step(
                rng.integers(env.action_space.n, size=(1, 1)), active
            )
            total, steps = total + float(rewards[0]), steps + 1
        assert steps == 263 and terminated[0] and not truncated[0], steps  # 1,050 tics of 4
        info = infos["player_0"]
        assert info["deaths"] >= 1, info
        assert total == pytest.approx(info["frags"] - info["deaths"]) and info[TRUE_OBJECTIVE] == info["frags"]
    finally:
        env.close()


def test_a_duel_runs_evaluation_plays_a_built_in_bot_and_reports_its_frags(train_dir: Path) -> None:
    """--eval_interval on doom_duel: the evaluator's game is one learning player against one of vizdoom's bots on the
    duel's map (the actors' stay the two-player duel); eval/true_objective is the policy's frags per game, and its
    return (frags - deaths: the damage reward pays in training games only) is never above them."""
    cfg = Cfg(env="doom_duel", doom_damage_reward=0.01)
    envs = [make_run_env(cfg, training=True), make_run_env(cfg, evaluation=True)]
    assert [(e.num_agents, e.env.bots, e.env.damage_reward) for e in envs] == [(2, 0, 0.01), (1, 1, 0.0)]
    args = ["--env=doom_duel", "--serial_mode", "--num_workers=1", "--num_envs_per_worker=2", "--rnn_size=64"]
    args += ["--doom_damage_reward=0.01"]
    args += ["--batch_size=256", "--max_episode_steps=50", "--eval_interval=256", "--eval_episodes=2"]
    args += ["--train_for_env_steps=1024", f"--train_dir={train_dir}", "--experiment=duel_eval"]
    result = run_script("train_appo.py", args, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:]
    assert "length 50, true objective" in result.stdout
    acc = EventAccumulator(str(train_dir / "duel_eval" / "summaries" / "0"), size_guidance={"scalars": 0})
    acc.Reload()
    frags = {e.step: e.value for e in acc.Scalars("eval/true_objective")}
    returns = {e.step: e.value for e in acc.Scalars("eval/return_mean")}
    assert len(frags) >= 3 and frags.keys() == returns.keys()
    assert all(v * 2 == int(v * 2) for v in frags.values())  # whole frags (a suicide's is -1), mean of 2 games
    assert all(returns[s] <= frags[s] and returns[s] * 2 == int(returns[s] * 2) for s in frags)


def test_two_duels_at_once_take_ports_of_their_own() -> None:
    envs = [DoomMatch("doom_duel", minutes=0.03) for _ in range(2)]
    rng = np.random.default_rng(2)
    try:
        for env in envs:
            env.reset()
        for env in envs:
            steps, _, _ = play(env, rng)
            assert steps in (15, 16), steps
    finally:
        for env in envs:
            env.close()


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL], ids=["int", "kill"])
def test_a_stopped_duel_run_leaves_no_player_and_no_game(train_dir: Path, sig: int) -> None:
    """Self-play with a pool on doom_duel for a while, then the driver stopped: no player process, no game left."""
    args = ["--env=doom_duel", f"--train_dir={train_dir}", "--experiment=duel", "--num_workers=1"]
    args += ["--num_envs_per_worker=2", "--rnn_size=64", "--batch_size=256", "--selfplay_pool=2"]
    args += ["--selfplay_snapshot_every=1", "--report_interval=1", "--train_for_seconds=600"]
    proc = start(args)
    watch = RunGames(proc.pid)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and len(games(proc.pid)) < 4:
            time.sleep(0.2)
        players = player_processes(proc.pid)
        assert len(games(proc.pid)) == 4 and len(players) == 4, "the run's 2 duels never started"
        time.sleep(5.0)  # playing
        proc.send_signal(sig)
        proc.wait(timeout=60)
        started = watch.stop()
        assert not (left := _kill_group(proc.pid)), f"processes left: {left}"
        assert not wait_until_gone(players + list(started)), "a player or its game outlived the run"
        assert not shm_of(started.values())
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
