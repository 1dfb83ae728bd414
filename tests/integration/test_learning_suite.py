"""benchmarks/learning_suite.py end to end on CartPole: real runs, the table read back against the runs'
tensorboard files and their final policies' deterministic evaluation, a curve PNG per env, and a failed run
reported as failed with a non-zero exit."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from appo.api import load_policy

ROOT = Path(__file__).resolve().parents[2]
SUITE = [sys.executable, "benchmarks/learning_suite.py"]


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
    train, evaluation = cells[11].split(" ; ")  # by seed
    assert [float(v.replace(",", "")) for v in train.split(" / ")] == [round(f) for f in finals]
    # The final policies' deterministic episodes, as enjoy.py plays them, seeded apart from training.
    evals = [
        np.mean(load_policy(out / "runs" / f"CartPole-v1_s{s}").evaluate(episodes=10, seed=10_000 + s)) for s in (0, 1)
    ]
    assert [float(v.replace(",", "")) for v in evaluation.split(" / ")] == [round(e) for e in evals]
    assert float(cells[6].replace(",", "")) == round(float(np.median(evals)))
    assert (out / "CartPole-v1.png").stat().st_size > 1000


def test_a_failed_run_is_reported_and_the_exit_is_non_zero(tmp_path):
    out = tmp_path / "suite"
    cmd = SUITE + ["--envs", "NoSuchEnv-v0", "--seeds", "0", "--env_steps", "1000", "--out", str(out)]
    proc = subprocess.run(cmd, cwd=ROOT, timeout=120, capture_output=True, text=True)
    assert proc.returncode != 0
    assert "seed 0 failed (exit" in (out / "suite.md").read_text()
