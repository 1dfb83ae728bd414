"""One driver per run directory (appo/driver/run_lock.py): a second train_appo.py on a run that is still going exits
2 with one line naming the running driver and writes nothing; the lock dies with its driver (kill -9 included), so
the run resumes at once; the driver's workers do not hold it. Real processes throughout."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from appo.driver.run_lock import LOCK_NAME, hold_run_dir, released_at_end
from tests.conftest import ROOT, _kill_group, run_script, spawn

FAST = ["--env=CartPole-v1", "--rollout=16", "--batch_size=256", "--num_envs_per_worker=4", "--num_workers=2"]


def _wait_until_running(proc: subprocess.Popen, run_dir: Path, timeout: float = 90) -> None:
    """Until the driver holds the lock and its learner has written a checkpoint (every worker is up)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"the first run exited {proc.returncode}: {proc.communicate()[0][-3000:]}"
        lock = run_dir / LOCK_NAME
        started = lock.is_file() and f"driver pid {proc.pid} " in lock.read_text()
        if started and list((run_dir / "checkpoint_p0").glob("*.pth")):
            return
        time.sleep(0.5)
    raise AssertionError("the first run did not start within its time")


@pytest.mark.slow
def test_a_second_driver_on_a_running_run_exits_2_and_the_lock_dies_with_kill_9(train_dir):
    run_dir = train_dir / "busy"
    first = spawn(
        [sys.executable, "train_appo.py", *FAST, f"--train_dir={train_dir}", "--experiment=busy", "--save_every_sec=1"]
        + ["--train_for_seconds=300"]
    )
    try:
        _wait_until_running(first, run_dir)
        # The workers the driver started do not hold the lock file open (it is not inherited).
        children = psutil.Process(first.pid).children(recursive=True)
        assert len(children) >= 3, children  # two actor workers and a learner at least
        for child in children:
            assert not [f for f in child.open_files() if f.path.endswith(LOCK_NAME)], f"{child.name()} holds it"
        cfg_before = (run_dir / "cfg.json").read_bytes()

        second = run_script(
            "train_appo.py", [*FAST, f"--train_dir={train_dir}", "--experiment=busy", "--learning_rate=0.5"], timeout=60
        )
        assert second.returncode == 2, second.stdout[-3000:]
        errors = [line for line in second.stdout.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and f"driver pid {first.pid}" in errors[0] and "--experiment" in errors[0], errors
        assert str(run_dir.resolve()) in errors[0]
        assert (run_dir / "cfg.json").read_bytes() == cfg_before  # the second run wrote nothing
        assert first.poll() is None, "the first run must go on"

        os.kill(first.pid, signal.SIGKILL)  # the driver dies without a word: its lock goes with it
        first.communicate(timeout=30)
        _kill_group(first.pid)  # its workers, orphaned by the kill -9
        third = run_script(
            "train_appo.py", [*FAST, f"--train_dir={train_dir}", "--experiment=busy", "--train_for_seconds=3"]
        )
        assert third.returncode == 0, third.stdout[-3000:]
        assert "in use" not in third.stdout
        assert f"driver pid {first.pid} " not in (run_dir / LOCK_NAME).read_text()
    finally:
        if first.poll() is None:
            first.kill()
            first.communicate()
        _kill_group(first.pid)


def _try_lock(run_dir: Path) -> subprocess.CompletedProcess:
    code = f"from appo.driver.run_lock import hold_run_dir; hold_run_dir({str(run_dir)!r})"
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)


def test_a_run_in_a_longer_lived_process_frees_its_directory_when_it_ends(tmp_path):
    """appo.train from Python (or a test) runs the driver in its own process: the lock is taken again without
    harm by the same process and is free for another process once the run's block ends."""
    with released_at_end():
        hold_run_dir(tmp_path)
        hold_run_dir(tmp_path)  # the same process again: no deadlock with itself
        held = _try_lock(tmp_path)
        assert held.returncode == 2 and f"driver pid {os.getpid()} " in held.stderr, held.stderr
    free = _try_lock(tmp_path)
    assert free.returncode == 0, free.stderr
