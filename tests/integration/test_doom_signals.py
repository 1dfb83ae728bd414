"""A doom run stopped at any moment leaves no game behind: Ctrl-C, SIGTERM and SIGKILL of the driver 3, 10 and 25 s
into a run (start-up, the first games, training), and SIGKILL of one actor worker, whose games die with it while its
successor starts its own. Counted on the machine's game processes and /dev/shm (xdist group "doom": no other test
plays Doom meanwhile)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import psutil
import pytest

from tests.conftest import _kill_group
from tests.integration.test_doom import RunGames, games, shm_of, wait_until_gone
from tests.integration.test_faults import find, start

pytestmark = [pytest.mark.xdist_group("doom"), pytest.mark.slow]

RUN = ["--env=doom_basic", "--num_workers=2", "--num_envs_per_worker=4", "--rnn_size=64", "--batch_size=256"]
RUN += ["--report_interval=1", "--train_for_seconds=600"]


@pytest.mark.parametrize("moment", [3.0, 10.0, 25.0])
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL], ids=["int", "term", "kill"])
def test_a_stopped_doom_run_leaves_no_game(train_dir: Path, sig: int, moment: float) -> None:
    proc = start([*RUN, f"--train_dir={train_dir}", "--experiment=stop"])
    watch = RunGames(proc.pid)
    try:
        time.sleep(moment)
        assert proc.poll() is None, "the run ended before the signal"
        proc.send_signal(sig)
        proc.wait(timeout=60)
        started = watch.stop()
        left = _kill_group(proc.pid)
        assert not left, f"processes of the run left after signal {sig} at {moment} s: {left}"
        assert not wait_until_gone(list(started)), f"games left after signal {sig} at {moment} s"
        assert not (shm := shm_of(started.values())), f"/dev/shm after signal {sig} at {moment} s: {sorted(shm)}"
        if moment >= 10:
            assert started, "the run started no game in 10 s"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_a_killed_worker_takes_its_games_and_its_successor_plays(train_dir: Path) -> None:
    proc = start([*RUN, f"--train_dir={train_dir}", "--experiment=restart"])
    run_games: list[int] = []
    try:
        worker = find(proc, "appo:restart:actor_worker_0", timeout=90)
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and len(games(proc.pid)) < 8:
            time.sleep(0.2)
        mine = list(games(worker.pid))
        assert len(games(proc.pid)) == 8 and len(mine) == 4, "the run's 8 games never all started"
        worker.kill()
        assert not wait_until_gone(mine), "the killed worker's games outlived it"
        deadline = time.monotonic() + 90  # its successor builds 4 games of its own
        while time.monotonic() < deadline and len(games(proc.pid)) < 8:
            time.sleep(0.2)
        assert len(games(proc.pid)) == 8, "the restarted worker's games never started"
        run_games = list(games(proc.pid))
        assert psutil.pid_exists(proc.pid) and proc.poll() is None
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(60)
            except Exception:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    assert not wait_until_gone(run_games)
