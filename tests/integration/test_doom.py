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
import threading
import time
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import psutil
import pytest

from appo.envs import make_env
from appo.envs.doom.scenarios import SCENARIOS
from tests.conftest import ROOT, run_script

pytestmark = pytest.mark.xdist_group("doom")


def games(root: int | None = None) -> dict[int, str]:
    """The vizdoom game processes, pid -> the game's instance id (which names its /dev/shm entries): every one on the
    machine, or only those descending from process `root` (a test's own games, not another test run's)."""
    try:
        procs = psutil.Process(root).children(recursive=True) if root is not None else list(psutil.process_iter())
    except psutil.Error:
        return {}
    found = {}
    for p in procs:
        try:
            cmdline = p.cmdline()
        except psutil.Error:
            continue
        if cmdline and cmdline[0].endswith("/vizdoom") and "+viz_instance_id" in cmdline:
            found[p.pid] = cmdline[cmdline.index("+viz_instance_id") + 1]
    return found


def doom_shm() -> set[str]:
    return {name for name in os.listdir("/dev/shm") if name.startswith("ViZDoom")}


def shm_of(instances: Iterable[str], timeout: float = 10.0) -> set[str]:
    """The /dev/shm entries of the games `instances` still there after up to `timeout` seconds."""
    names = {f"{prefix}{i}" for i in instances for prefix in ("ViZDoomSM", "ViZDoomMQCtr", "ViZDoomMQDoom")}
    deadline = time.monotonic() + timeout
    while names & doom_shm() and time.monotonic() < deadline:
        time.sleep(0.1)
    return names & doom_shm()


class RunGames:
    """Every game seen among the descendants of a run's driver while it lives (polled every 0.1 s in a thread):
    the run's own games, whatever else the machine runs."""

    def __init__(self, pid: int) -> None:
        self.pid, self.seen, self.stopped = pid, {}, False
        self.thread = threading.Thread(target=self._poll, daemon=True)
        self.thread.start()

    def _poll(self) -> None:
        while not self.stopped and psutil.pid_exists(self.pid):
            self.seen.update(games(self.pid))
            time.sleep(0.1)

    def stop(self) -> dict[int, str]:
        self.stopped = True
        self.thread.join(5)
        return dict(self.seen)


def wait_until_gone(pids: list[int], timeout: float = 10.0) -> list[int]:
    deadline = time.monotonic() + timeout
    alive = [p for p in pids if psutil.pid_exists(p)]
    while alive and time.monotonic() < deadline:
        time.sleep(0.1)
        alive = [p for p in alive if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
    return alive


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_every_scenario_plays(scenario: str) -> None:
    env = make_env(f"doom_{scenario}", render_mode="rgb_array")
    started: list[int] = []
    try:
        assert not games(os.getpid())  # built, not started
        obs, _ = env.reset(seed=3)
        started = list(games(os.getpid()))
        assert env.observation_space.contains(obs)
        assert len(started) == 1  # its game started at the first reset
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
    assert not wait_until_gone(started), "the game outlived close()"


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
    proc = subprocess.Popen(
        [sys.executable, "-c", script], cwd=ROOT, stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        started = games(proc.pid)
        assert len(started) == 1 and shm_of(started.values(), timeout=0)
        os.kill(proc.pid, sig)
        proc.wait(30)
        assert not wait_until_gone(list(started)), "the game outlived its process"
        assert not (left := shm_of(started.values())), f"left in /dev/shm: {sorted(left)}"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.mark.slow
def test_doom_basic_trains_records_and_exports(train_dir: Path) -> None:
    args = ["--env=doom_basic", f"--train_dir={train_dir}", "--experiment=basic", "--train_for_env_steps=4000"]
    args += ["--num_workers=1", "--num_envs_per_worker=4", "--rnn_size=64", "--batch_size=256", "--report_interval=1"]
    proc = subprocess.Popen(
        [sys.executable, "train_appo.py", *args], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    watch = RunGames(proc.pid)
    out, _ = proc.communicate(timeout=240)
    seen = watch.stop()
    assert proc.returncode == 0, out[-3000:]
    assert len(seen) == 4, seen  # the run's 4 games were seen, and are gone with it
    assert not wait_until_gone(list(seen)), "a game outlived the run"
    assert not shm_of(seen.values())
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


def test_a_launcher_whose_starter_is_gone_removes_the_queues_made_for_its_game() -> None:
    """vizdoom makes a game's message queues before it starts the launcher: a worker killed in between leaves a
    launcher whose starter is gone, which must remove them rather than exit and leave them in /dev/shm."""
    from appo.envs.doom.launcher import PARENT_VARIABLE, launcher_path

    script = launcher_path("/nonexistent/vizdoom")  # never run: the launcher exits before starting a game
    instance = f"appotest{os.getpid()}"
    made = [Path(f"/dev/shm/{prefix}{instance}") for prefix in ("ViZDoomMQCtr", "ViZDoomMQDoom")]
    for path in made:
        path.write_bytes(b"")
    try:
        env = {**os.environ, PARENT_VARIABLE: "1"}  # a starter other than its parent: as if it had died
        result = subprocess.run([script, "-iwad", "x", "+viz_instance_id", instance], env=env, timeout=30)
        assert result.returncode == 1
        assert not [p.name for p in made if p.exists()], "the queues of a game that never started stayed"
    finally:
        for path in made:
            path.unlink(missing_ok=True)


@pytest.mark.timeout(300)
@pytest.mark.slow
def test_doom_basic_trains_on_a_private_ray_instance_and_leaves_no_game(train_dir: Path) -> None:
    """--backend=ray: the actor workers are Ray actors (their games descend from Ray's workers, not from the driver),
    the conv model trains and checkpoints, and when the run ends no game, no /dev/shm entry of theirs and no Ray
    process is left."""
    from tests.integration.test_pixel_backends import RAY, check_run
    from tests.integration.test_ray_backend import ACTOR_LINE, Run
    from tests.support.ray_cluster import TAG, RayWatch

    pytest.importorskip("ray")
    flags = ["--env=doom_basic", "--num_envs_per_worker=4", "--rollout=32", "--batch_size=256", "--rnn_size=64"]
    ray, seen = RayWatch(), {}
    with Run(train_dir, [*flags, "--train_for_env_steps=1024", *RAY], env=ray.env) as run:
        run.wait_for(ACTOR_LINE.pattern, timeout=150, count=2)
        while run.proc.poll() is None:  # the run's games: those whose environment holds its Ray tag
            ray.look()
            for pid, instance in games().items():
                try:
                    if pid not in seen and psutil.Process(pid).environ().get(TAG) == ray.tag:
                        seen[pid] = instance
                except psutil.Error:
                    continue
            time.sleep(0.1)
        status = run.finish(timeout=200)
    assert status == 0, run.output()
    check_run(train_dir / "run", 1024, (32, 3, 8, 8), run.output())  # Sample Factory's "simple" convnet
    assert len(seen) == 8, seen  # 2 workers x 4 games
    assert not wait_until_gone(list(seen)), "a game outlived the run"
    assert not shm_of(seen.values())
    deadline = time.monotonic() + 5
    while (left := ray.alive()) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not left, f"Ray processes left: {left}"
