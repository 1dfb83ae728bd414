"""benchmarks/learning_suite.py end to end on CartPole: real runs, the table read back against the runs'
tensorboard files and their final and best policies' deterministic evaluations, a curve PNG per env, a failed run
reported as failed with a non-zero exit, and a suite started in the background stopped by a SIGINT to it alone."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import numpy as np
import psutil
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from appo.api import load_policy
from tests.conftest import ROOT, _kill_group, ignore_sigint, spawn

SUITE = [sys.executable, "benchmarks/learning_suite.py"]


@pytest.mark.slow
def test_suite_table_and_curves_come_from_the_runs(tmp_path):
    out = tmp_path / "suite"
    # Reports every 0.1 s: a curve needs two points. 12k CartPole steps took under a second in a CI run, before the
    # actor workers' first episode report (every second or so): one point, no curve. 40k take several seconds.
    cmd = SUITE + ["--envs", "CartPole-v1", "--seeds", "0", "1", "--env_steps", "40000", "--parallel", "2"]
    cmd += ["--out", str(out), "--num_workers=1", "--report_interval=0.1"]
    subprocess.run(cmd, cwd=ROOT, check=True, timeout=300, capture_output=True)
    finals = []
    for seed in (0, 1):
        acc = EventAccumulator(str(out / "runs" / f"CartPole-v1_s{seed}" / "summaries" / "0"))
        acc.Reload()
        finals.append(acc.Scalars("episode/return_mean")[-1].value)
    row = next(line for line in (out / "suite.md").read_text().splitlines() if line.startswith("| CartPole-v1"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1] == "0, 1"
    assert float(cells[2].replace(",", "")) == round(sum(finals) / 2)
    assert float(cells[4].replace(",", "")) == round(min(finals))
    train, evaluation, best_evaluation = cells[12].split(" ; ")  # by seed
    assert [float(v.replace(",", "")) for v in train.split(" / ")] == [round(f) for f in finals]
    # The final and the best (by training return) policies' deterministic episodes, as enjoy.py plays them, seeded
    # apart from training.
    for column, by_seed, checkpoint in ((6, evaluation, "latest"), (7, best_evaluation, "best")):
        runs = [out / "runs" / f"CartPole-v1_s{s}" for s in (0, 1)]
        evals = [
            np.mean(load_policy(run, checkpoint=checkpoint).evaluate(episodes=10, seed=10_000 + s))
            for s, run in enumerate(runs)
        ]
        assert [float(v.replace(",", "")) for v in by_seed.split(" / ")] == [round(e) for e in evals]
        assert float(cells[column].replace(",", "")) == round(float(np.median(evals)))
    assert (out / "CartPole-v1.png").stat().st_size > 1000


def test_a_failed_run_is_reported_and_the_exit_is_non_zero(tmp_path):
    out = tmp_path / "suite"
    cmd = SUITE + ["--envs", "NoSuchEnv-v0", "--seeds", "0", "--env_steps", "1000", "--out", str(out)]
    proc = subprocess.run(cmd, cwd=ROOT, timeout=120, capture_output=True, text=True)
    assert proc.returncode != 0
    assert "seed 0 failed (exit" in (out / "suite.md").read_text()


def test_a_suite_started_in_the_background_stops_its_runs_on_sigint(tmp_path):
    """`cmd &` and nohup start a script with SIGINT ignored: the suite takes it back, so a SIGINT sent to the suite
    alone stops its runs in order and then the suite, leaving no process behind (before, the suite ignored it and
    waited on its runs to the end of their budget)."""
    out = tmp_path / "suite"
    cmd = SUITE + ["--envs", "CartPole-v1", "--seeds", "0", "--env_steps", "1000000000", "--out", str(out)]
    cmd += ["--eval_episodes", "0", "--num_workers=1"]
    proc = spawn(cmd, ignore_sigint)  # as `cmd &` starts it
    try:
        deadline = time.monotonic() + 120
        while not list((out / "runs").glob("CartPole-v1_s0/summaries/0/events.*")):  # the run is training
            assert proc.poll() is None and time.monotonic() < deadline, "the run did not start"
            time.sleep(0.5)
        children = psutil.Process(proc.pid).children(recursive=True)
        assert children
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=90)
        _, alive = psutil.wait_procs(children, timeout=30)
        assert not alive, [p.info for p in alive]
    finally:
        if proc.poll() is None:
            _kill_group(proc.pid)
            proc.wait()
