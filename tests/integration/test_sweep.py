"""`python -m appo.sweep`: 2 seeds x 2 learning rates of a short CartPole run, 2 at a time; each run in its own
folder, a table with one row per learning rate over its 2 seeds, a PNG read back; rerunning skips every finished
run (none of them is started again)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import matplotlib.image as mpimg
import pytest

from tests.conftest import ROOT

RUN_FLAGS = ["--env=CartPole-v1", "--train_for_env_steps=2048", "--num_workers=1", "--num_envs_per_worker=4"]
RUN_FLAGS += ["--rollout=16", "--batch_size=256", "--report_interval=1"]
GRID = {"seed": [0, 1], "learning_rate": [0.001, 0.003]}


def sweep(train_dir: Path, timeout: float) -> subprocess.CompletedProcess:
    args = ["--grid", json.dumps(GRID), "--max_parallel=2", "--name=s", f"--train_dir={train_dir}", "--", *RUN_FLAGS]
    result = subprocess.run(
        [sys.executable, "-m", "appo.sweep", *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


def most_at_once(stdout: str) -> int:
    """The largest number of runs between their 'start' and 'done' lines at any moment."""
    events = []
    for when, what in re.findall(r"^\[(\d\d:\d\d:\d\d)\]\[sweep\] (start|done) ", stdout, re.M):
        t = datetime.strptime(when, "%H:%M:%S")
        events.append((t, 1 if what == "start" else -1))
    running = peak = 0
    for _t, delta in sorted(events, key=lambda e: (e[0], e[1])):  # a done before a start in the same second
        running += delta
        peak = max(peak, running)
    return peak


@pytest.mark.timeout(150)
def test_sweep_runs_the_grid_two_at_a_time_writes_table_and_png_and_skips_done_runs(train_dir):
    first = sweep(train_dir, timeout=140)
    root = train_dir / "s"
    names = sorted(p.name for p in root.iterdir() if (p / "sweep_result.json").is_file())
    assert names == sorted(f"learning_rate={lr},seed={s}" for lr in GRID["learning_rate"] for s in GRID["seed"])
    assert first.stdout.count("] start ") == 4 and most_at_once(first.stdout) == 2, first.stdout
    for name in names:  # each run trained with its own flags
        cfg = json.loads((root / name / "cfg.json").read_text())
        assert f"learning_rate={cfg['learning_rate']},seed={cfg['seed']}" == name
    rows = json.loads((root / "results.json").read_text())
    assert sorted(r["config"] for r in rows) == ["learning_rate=0.001", "learning_rate=0.003"]
    for row in rows:
        assert row["seeds"] == 2 and row["mean"] > 9.0 and row["std"] >= 0.0, row  # CartPole pays >= 9 per episode
    table = (root / "results.md").read_text()
    assert table.count("\n") == 4 and "learning_rate=0.003 | 2 |" in table, table
    image = mpimg.imread(root / "curves.png")
    assert image.shape[0] > 100 and image.shape[1] > 100
    logs = {name: (root / name / "log.txt").stat().st_mtime for name in names}

    again = sweep(train_dir, timeout=60)
    assert "4 done already, 0 to run" in again.stdout and "] start " not in again.stdout, again.stdout
    assert {name: (root / name / "log.txt").stat().st_mtime for name in names} == logs
