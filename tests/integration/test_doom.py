"""VizDoom through appo (envs/doom/): every bundled single-player scenario plays in the game's own units, an unknown
scenario is one error line, a game dies with the process that started it (its /dev/shm entries too), and doom_basic
trains, is watched into an mp4 and exported. Real games throughout (the vizdoom wheel, its bundled scenarios).

The tests count the machine's game processes: they share the xdist group "doom", so no other test of the run plays
Doom beside them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import psutil
import pytest

from appo.envs import make_env
from appo.envs.doom.scenarios import SCENARIOS
from tests.conftest import ROOT, run_script

pytestmark = pytest.mark.xdist_group("doom")


def games() -> list[int]:
    """The pids of every vizdoom game process on the machine."""
    found = []
    for p in psutil.process_iter(["cmdline"]):
        cmdline = p.info["cmdline"] or []
        if cmdline and cmdline[0].endswith("/vizdoom"):
            found.append(p.pid)
    return found


def doom_shm() -> set[str]:
    return {name for name in os.listdir("/dev/shm") if name.startswith("ViZDoom")}


def new_doom_shm(before: set[str], timeout: float = 10.0) -> set[str]:
    """The ViZDoom /dev/shm entries not in `before` that are still there after up to `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while doom_shm() - before and time.monotonic() < deadline:
        time.sleep(0.1)
    return doom_shm() - before


def wait_until_gone(pids: list[int], timeout: float = 10.0) -> list[int]:
    deadline = time.monotonic() + timeout
    alive = [p for p in pids if psutil.pid_exists(p)]
    while alive and time.monotonic() < deadline:
        time.sleep(0.1)
        alive = [p for p in alive if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
    return alive


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_every_scenario_plays(scenario: str) -> None:
    before = set(games())
    env = make_env(f"doom_{scenario}", render_mode="rgb_array")
    try:
        obs, _ = env.reset(seed=3)
        assert env.observation_space.contains(obs)
        assert len(set(games()) - before) == 1  # its game started at the first reset, not before
        rng = np.random.default_rng(0)
        total = 0.0
        for _ in range(40):
            obs, reward, terminated, truncated, _ = env.step(int(rng.integers(env.action_space.n)))
            assert env.observation_space.contains(obs)
            total += reward
            if terminated or truncated:
                env.reset()
        assert np.isfinite(total)
        frame = env.render()
        assert frame.shape == (120, 160, 3) and frame.dtype == np.uint8 and frame.any()
    finally:
        env.close()
    assert not wait_until_gone(list(set(games()) - before)), "the game outlived close()"


def test_basic_pays_the_game_units() -> None:
    """doom_basic: -1 a tic, 4 tics a step, so idling for its 300 tics ends truncated near -300."""
    env = make_env("doom_basic")
    try:
        env.reset(seed=1)
        total, steps, ended = 0.0, 0, (False, False)
        while not any(ended):
            _, reward, *ended, _ = env.step(0)  # press nothing
            total, steps = total + reward, steps + 1
        assert ended == [False, True], ended  # the time limit, not a kill or a death
        assert -300.0 <= total <= -290.0 and 70 <= steps <= 76, (total, steps)
    finally:
        env.close()


def test_an_unknown_scenario_is_one_line_naming_the_known_ones(train_dir: Path) -> None:
    result = run_script("train_appo.py", ["--env=doom_nowhere", f"--train_dir={train_dir}", "--experiment=x"])
    assert result.returncode == 2, result.stdout
    errors = [line for line in result.stdout.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "doom_nowhere" in errors[0] and "doom_basic" in errors[0], result.stdout


GAME_IN_A_PROCESS = """
from appo.envs import make_env
env = make_env("doom_defend_the_center")
env.reset(seed=0)
print("ready", flush=True)
import time
time.sleep(120)
"""


# The game started from a thread that then ends (a thread pool's, say), played on from the main thread.
GAME_FROM_A_THREAD = """
import threading, time
from appo.envs import make_env
env = make_env("doom_defend_the_center")
starter = threading.Thread(target=env.reset, kwargs={"seed": 0})
starter.start()
starter.join()
time.sleep(1.0)
for _ in range(10):
    env.step(0)
print("ready", flush=True)
time.sleep(120)
"""


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
@pytest.mark.parametrize("script", [GAME_IN_A_PROCESS, GAME_FROM_A_THREAD], ids=["main_thread", "ended_thread"])
def test_a_game_dies_with_the_process_that_started_it(sig: int, script: str) -> None:
    shm_before, games_before = doom_shm(), set(games())
    proc = subprocess.Popen(
        [sys.executable, "-c", script], cwd=ROOT, stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        started = list(set(games()) - games_before)
        assert len(started) == 1 and doom_shm() - shm_before
        os.kill(proc.pid, sig)
        proc.wait(30)
        assert not wait_until_gone(started), "the game outlived its process"
        assert not (left := new_doom_shm(shm_before)), f"left in /dev/shm: {sorted(left)}"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.mark.slow
def test_doom_basic_trains_records_and_exports(train_dir: Path) -> None:
    games_before = set(games())
    args = ["--env=doom_basic", f"--train_dir={train_dir}", "--experiment=basic", "--train_for_env_steps=4000"]
    args += ["--num_workers=1", "--num_envs_per_worker=4", "--rnn_size=64", "--batch_size=256", "--report_interval=1"]
    run_script("train_appo.py", args, timeout=240, check=True)
    assert not wait_until_gone(list(set(games()) - games_before)), "a game outlived the run"
    watched = run_script(
        "enjoy.py", [f"--train_dir={train_dir}", "--experiment=basic", "--save_video", "--max_num_episodes=1"]
    )
    assert watched.returncode == 0, watched.stdout[-3000:]
    videos = list((train_dir / "basic" / "videos").glob("*.mp4"))
    assert len(videos) == 1 and videos[0].stat().st_size > 1000
    out = train_dir / "basic.npz"
    export = [f"--train_dir={train_dir}", "--experiment=basic", f"--out={out}"]
    exported = subprocess.run([sys.executable, "-m", "appo.export", *export], cwd=ROOT, capture_output=True, text=True)
    assert exported.returncode == 0 and out.is_file(), exported.stdout[-3000:] + exported.stderr[-3000:]
    import appo

    policy = appo.load_policy(out)
    env = make_env("doom_basic")
    try:
        obs, _ = env.reset(seed=5)
        action, _ = policy.act(obs)
        assert env.action_space.contains(int(np.asarray(action).item()))
    finally:
        env.close()
    assert not wait_until_gone(list(set(games()) - games_before))
