"""Sample Factory 2.1.1 and appo training runs for the throughput benchmarks (benchmarks/atari_throughput.py,
benchmarks/doom_throughput.py): each started as its user would, its steady agent steps/s read from its own reports
over the window after a warm-up."""

from __future__ import annotations

import argparse
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from throughput import steady_fps, summary  # noqa: E402

FRAMESKIP = 4  # Atari and Doom: Sample Factory counts frames, 4 a step


def add_sitting_args(parser: argparse.ArgumentParser) -> None:
    """The flags of a throughput sitting: repeats, measured and warm-up seconds, cores for raw stepping, workers and
    envs per worker of both engines, and Sample Factory's python."""
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=60.0, help="measured seconds per run")
    parser.add_argument("--warmup", type=float, default=20.0, help="seconds skipped at the start of training runs")
    parser.add_argument("--procs", type=int, default=len(os.sched_getaffinity(0)), help="cores: processes for raw")
    parser.add_argument("--workers", type=int, default=2, help="actor workers of appo and Sample Factory")
    parser.add_argument("--envs", type=int, default=8, help="envs per worker (and per raw process)")
    parser.add_argument("--sf_python", default="", help="python of an environment with sample-factory 2.1.1")


def raw_env_worker(env_name: str, envs: int, seconds: float, out: Any) -> None:
    """One process stepping `envs` of appo's `env_name` envs (as actor workers build them) with random actions for
    `seconds`; puts its env steps per second on `out` (benchmarks/throughput.py summed_rates runs one per core)."""
    os.environ["OMP_NUM_THREADS"] = "1"
    import numpy as np

    from appo.envs import make_env

    batch = [make_env(env_name) for _ in range(envs)]
    for i, env in enumerate(batch):
        env.reset(seed=os.getpid() * 100 + i)
    rng = np.random.default_rng(os.getpid())
    n_actions = int(batch[0].action_space.n)
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        for env in batch:
            _, _, terminated, truncated, _ = env.step(int(rng.integers(n_actions)))
            if terminated or truncated:
                env.reset()
        steps += envs
    out.put(steps / (time.perf_counter() - start))
    for env in batch:
        env.close()


SF_FRAMES = re.compile(r"\[\d{4}-\d\d-\d\d (\d\d:\d\d:\d\d),(\d{3})\].*Total num frames: (\d+)")


def _window_done(log_path: Path, seconds: float) -> bool:
    """Whether Sample Factory's log has reports `seconds` after its first one with frames."""
    times = []
    for line in log_path.read_text(errors="replace").splitlines():
        match = SF_FRAMES.search(line)
        if match and int(match.group(3)) > 0:
            h, m, s = (int(v) for v in match.group(1).split(":"))
            times.append(h * 3600 + m * 60 + s)
    return bool(times) and times[-1] - times[0] >= seconds


def sf_fps(
    sf_python: str,
    module: str,
    env_name: str,
    seconds: float,
    warmup: float,
    workers: int,
    envs: int,
    splits: int,
    sitecustomize: str = "",
) -> float:
    """Agent steps/s of Sample Factory 2.1.1's example `module` (sf_examples.atari.train_atari, ...) on `env_name`
    over the window after `warmup` seconds; `sitecustomize`: code every one of its processes runs first."""
    train_dir = Path(tempfile.mkdtemp(prefix="sf_tp_"))
    site = train_dir / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(sitecustomize)
    cmd = [sf_python, "-m", module, f"--env={env_name}", "--experiment=tp"]
    cmd += [f"--train_dir={train_dir}", f"--num_workers={workers}", f"--num_envs_per_worker={envs}"]
    cmd += [f"--worker_num_splits={splits}", "--async_rl=True", "--batched_sampling=False", "--device=cpu"]
    cmd += ["--with_wandb=False", f"--train_for_seconds={int(seconds + warmup + 20)}", "--save_every_sec=100000"]
    env = {**os.environ, "PYTHONPATH": str(site)}
    # Its --train_for_seconds did not stop it here: the window is ours, then its process group is stopped.
    log_path = train_dir / "stdout.txt"
    with open(log_path, "w") as out:
        # In its own folder: its Doom games write _vizdoom.ini into their working directory.
        proc = subprocess.Popen(
            cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True, cwd=train_dir
        )
        deadline = time.monotonic() + seconds + warmup + 240
        while proc.poll() is None and time.monotonic() < deadline and not _window_done(log_path, seconds + warmup):
            time.sleep(2)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGINT)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    text = log_path.read_text(errors="replace")
    shutil.rmtree(train_dir, ignore_errors=True)
    points = []
    for line in text.splitlines():
        match = SF_FRAMES.search(line)
        if match:
            h, m, s = (int(v) for v in match.group(1).split(":"))
            points.append((h * 3600 + m * 60 + s + int(match.group(2)) / 1000, int(match.group(3))))
    first = next((t for t, frames in points if frames > 0), None)
    if first is None:
        raise RuntimeError("Sample Factory reported no frames:\n" + text[-3000:])
    steady = [(t, f) for t, f in points if t - first >= warmup]
    if len(steady) < 2:
        raise RuntimeError("too few Sample Factory reports after warm-up")
    (t0, f0), (t1, f1) = steady[0], steady[-1]
    return (f1 - f0) / (t1 - t0) / FRAMESKIP


PROFILE = re.compile(r"\] INFO (actor worker \d+|learner \d+) profile: wall=([\d.]+)s (.*)$")


def appo_run(env: str, seconds: float, warmup: float, extra: list[str], sampler_only: bool) -> tuple[float, str]:
    """Steady-state agent steps/s of train_appo.py, and where its processes spent their time (each actor worker's
    and learner's own profile lines: env stepping, acting, waiting; training)."""
    train_dir = Path(tempfile.mkdtemp(prefix="appo_tp_"))
    cmd = [sys.executable, "train_appo.py", f"--env={env}", "--experiment=tp", f"--train_dir={train_dir}"]
    cmd += [f"--train_for_seconds={seconds + warmup + 10}", "--report_interval=2", "--save_every_sec=1e9"]
    cmd += [f"--sampler_only={sampler_only}", *extra]
    subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    fps = steady_fps(train_dir / "tp" / "summaries", warmup)
    where = []
    for line in (train_dir / "tp" / "log.txt").read_text(errors="replace").splitlines():
        match = PROFILE.search(line)
        if match:
            parts = re.findall(r"(\w+)=[\d.]+s \((\d+)%\)", match.group(3))
            where.append(f"{match.group(1)}: " + " ".join(f"{name} {pct}%" for name, pct in parts))
    shutil.rmtree(train_dir, ignore_errors=True)
    return fps, "; ".join(where)


def print_table(title: str, rows: dict[str, list[float]], ratios: list[tuple[str, str, str]]) -> None:
    """The sitting's figures (median, min, max of each row) under `title`, then each ratio (label, numerator row,
    denominator row) of the medians whose rows were measured."""
    print(f"\n{title}")
    for name, values in rows.items():
        print(f"{name:32s} {summary(values)}")
    for label, top, bottom in ratios:
        if top in rows and bottom in rows:
            print(f"{label}: {statistics.median(rows[top]) / statistics.median(rows[bottom]):.2f}")
