"""Signals to a MAML-TRPO run obey the engine's rules: the first stops it after the meta-iteration in flight with a
checkpoint and no final meta-test (which takes minutes); a second one ends it at once, its processes with it."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from tests.integration.test_signals import EXIT_WITHIN, Run

# navigation2d's 20 tasks x 20 episodes a meta-iteration; no regular meta-test.
MAML = ["--algo=maml_trpo", "--env=navigation2d", "--num_workers=2", "--train_for_seconds=600"]
MAML += ["--meta_test_interval=1000", "--save_every_sec=1000"]


def started(train_dir: Path, name: str) -> Run:
    run = Run([*MAML, f"--train_dir={train_dir}", f"--experiment={name}"])
    assert run.wait_for("iteration 1,", 240), f"no meta-iteration done:\n{run.output()}"
    return run


@pytest.mark.slow
def test_a_signal_stops_a_maml_run_with_a_checkpoint_and_no_final_meta_test(train_dir: Path) -> None:
    run = started(train_dir, "once")
    took, left = run.interrupt()
    assert run.proc.returncode == 0, f"exit {run.proc.returncode}:\n{run.output()}"
    assert took < EXIT_WITHIN and not left, (took, left, run.output())
    assert "meta-test at iteration" not in run.output(), f"a final meta-test after the signal:\n{run.output()}"
    assert list((train_dir / "once" / "checkpoint_p0").glob("checkpoint_*.pth")), "no checkpoint after the stop"


@pytest.mark.slow
def test_a_second_signal_ends_a_maml_run_at_once(train_dir: Path) -> None:
    run = started(train_dir, "twice")
    processes = run.descendants()
    run.proc.send_signal(signal.SIGINT)
    time.sleep(0.3)  # the meta-iteration in flight goes on
    run.proc.send_signal(signal.SIGINT)
    sent = time.monotonic()
    try:
        run.proc.wait(timeout=30)
    finally:
        if run.proc.poll() is None:
            os.killpg(run.proc.pid, signal.SIGKILL)
    took = time.monotonic() - sent
    time.sleep(0.5)
    alive = [p.pid for p in processes if p.is_running() and p.status() != "zombie"]
    for pid in alive:
        os.kill(pid, signal.SIGKILL)
    assert run.proc.returncode == 130, f"exit {run.proc.returncode} after a second signal:\n{run.output()}"
    assert took < 5.0, f"{took:.1f} s after the second signal:\n{run.output()}"
    assert not alive, f"left behind: {alive}\n{run.output()}"
