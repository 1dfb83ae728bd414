"""`python -m appo.sweep`: 2 seeds x 2 learning rates of a short CartPole run, 2 at a time; each run in its own
folder, a table with one row per learning rate over its 2 seeds, a PNG read back; rerunning skips every finished
run (none of them is started again). With --backend=ray the same grid runs as Ray tasks on Ray's multi-node
simulation (a head and a worker node on loopback), on both nodes; and SIGTERM to a sweep on a private Ray
instance stops its runs with a checkpoint each and leaves no Ray process and no run behind."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path

import matplotlib.image as mpimg
import psutil
import pytest

from tests.conftest import ROOT, _kill_group, ignore_sigint, spawn
from tests.support.ray_cluster import TAG, RayWatch, needs_ray

RUN_FLAGS = ["--env=CartPole-v1", "--train_for_env_steps=2048", "--num_workers=1", "--num_envs_per_worker=4"]
RUN_FLAGS += ["--rollout=16", "--batch_size=256", "--report_interval=1"]
TRAINED = re.compile(r" p0: return \S+ v[1-9]\d* lag")  # a report line once the learner has published a version
GRID = {"seed": [0, 1], "learning_rate": [0.001, 0.003]}


def sweep(train_dir: Path, timeout: float, *own: str, parallel: int = 2) -> subprocess.CompletedProcess:
    args = ["--grid", json.dumps(GRID), f"--max_parallel={parallel}", "--name=s", f"--train_dir={train_dir}", *own]
    args += ["--", *RUN_FLAGS]
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


def check_results(root: Path) -> list[str]:
    """Every configuration done with its own flags, one row per learning rate over 2 seeds, a PNG; the run names."""
    names = sorted(p.name for p in root.iterdir() if (p / "sweep_result.json").is_file())
    assert names == sorted(f"learning_rate={lr},seed={s}" for lr in GRID["learning_rate"] for s in GRID["seed"])
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
    return names


@pytest.mark.timeout(150)
@pytest.mark.slow
def test_sweep_runs_the_grid_two_at_a_time_writes_table_and_png_and_skips_done_runs(train_dir):
    first = sweep(train_dir, timeout=140)
    root = train_dir / "s"
    names = check_results(root)
    assert first.stdout.count("] start ") == 4 and most_at_once(first.stdout) == 2, first.stdout
    logs = {name: (root / name / "log.txt").stat().st_mtime for name in names}

    again = sweep(train_dir, timeout=60)
    assert "4 done already, 0 to run" in again.stdout and "] start " not in again.stdout, again.stdout
    assert {name: (root / name / "log.txt").stat().st_mtime for name in names} == logs


@needs_ray
@pytest.mark.timeout(180)
@pytest.mark.slow
def test_sweep_on_a_ray_cluster_runs_on_both_nodes_and_skips_done_runs(cluster, train_dir):
    c, worker_node = cluster
    # 3 CPUs in the cluster (head 2, worker 1), one per run, 3 runs at a time: Ray must use both nodes.
    first = sweep(train_dir, 170, "--backend=ray", f"--ray_address={c.address}", "--cpus_per_run=1", parallel=3)
    root = train_dir / "s"
    names = check_results(root)
    nodes = {json.loads((root / n / "sweep_result.json").read_text())["node"] for n in names}
    assert nodes == {c.head_node.node_id, worker_node.node_id}, (nodes, first.stdout)
    again = sweep(train_dir, 90, "--backend=ray", f"--ray_address={c.address}")
    assert "4 done already, 0 to run" in again.stdout and "] start " not in again.stdout, again.stdout


def runs_of(experiments: list[str]) -> list[psutil.Process]:
    """The processes of these runs (driver, learner, actor workers: each titled appo:<experiment>:<role>)."""
    out = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        try:
            cmdline = " ".join(p.info["cmdline"] or [])
        except psutil.Error:
            continue
        if any(cmdline.startswith(f"appo:{name}:") for name in experiments):
            out.append(p)
    return out


def sweep_state(proc: subprocess.Popen, logs: list[Path]) -> str:
    """What a failed wait saw: whether the sweep still runs, and the end of each run's log."""
    state = "sweep running" if proc.poll() is None else f"sweep exited {proc.returncode}"
    tails = [f"{log.parent.name}: {log.read_text(errors='replace')[-800:]}" for log in logs if log.is_file()]
    return "\n".join([state, *tails])


@needs_ray
@pytest.mark.timeout(200)
@pytest.mark.slow
def test_sigterm_stops_a_ray_sweep_with_a_checkpoint_per_run_and_nothing_left(train_dir, monkeypatch):
    # Started as `nohup python -m appo.sweep ... &` would be, with SIGINT ignored: before the sweep took SIGINT back
    # ahead of Ray, its Ray workers inherited it ignored, ray.cancel could not interrupt a run's task and both runs
    # trained on after the sweep had stopped (seen in CI).
    ray = RayWatch()  # the sweep's Ray processes, not another test's
    monkeypatch.setenv(TAG, ray.tag)
    grid = {"seed": [0, 1]}
    flags = [*RUN_FLAGS[1:], "--train_for_env_steps=100000000", "--save_every_sec=1000"]
    args = ["--grid", json.dumps(grid), "--max_parallel=2", "--name=s", f"--train_dir={train_dir}", "--backend=ray"]
    proc = spawn([sys.executable, "-m", "appo.sweep", *args, "--", "--env=CartPole-v1", *flags], ignore_sigint)
    try:
        names = [f"seed={seed}" for seed in grid["seed"]]
        logs = [train_dir / "s" / name / "log.txt" for name in names]
        deadline = time.monotonic() + 90
        # Trained, not only started: a run stopped before its learner is up has nothing to save (CI on 2 busy
        # cores: the first report lines, v0, came 3 s before the learner had imported torch).

        def trained() -> bool:
            return all(log.is_file() and TRAINED.search(log.read_text()) for log in logs)

        while not trained() and time.monotonic() < deadline:
            assert proc.poll() is None, proc.communicate()[0][-3000:]
            time.sleep(0.5)
        assert trained(), "the runs did not train"
        seen = time.monotonic() + 30  # the process table, read while the runs' processes start, can miss them
        while not (found := runs_of(names)) and time.monotonic() < seen:
            time.sleep(0.2)
        assert found, f"no run process seen; {sweep_state(proc, logs)}"
        assert ray.look(), "no Ray process of the sweep seen"
        os.kill(proc.pid, signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            _kill_group(proc.pid)
            proc.wait()
    assert proc.returncode == 1 and "2 configuration(s) not done" in out, out[-3000:]
    for seed in grid["seed"]:
        checkpoints = list((train_dir / "s" / f"seed={seed}" / "checkpoint_p0").glob("checkpoint_*.pth"))
        assert checkpoints, f"seed {seed}: no checkpoint written when stopped\n{out[-3000:]}"
    deadline = time.monotonic() + 10
    while (left := ray.alive() + [str(p.pid) for p in runs_of(names)]) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not left, f"processes left: {left}"
