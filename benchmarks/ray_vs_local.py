"""--backend=ray against the local backend, same settings: training FPS, and memory over a long Ray run.

    python benchmarks/ray_vs_local.py --envs HalfCheetah-v5 Ant-v5 --repeats=3 --seconds=60 [extra flags]
    python benchmarks/ray_vs_local.py --soak_minutes=10 --envs HalfCheetah-v5

- FPS: train_appo.py with `--num_workers=2 --num_envs_per_worker=64` (override with extra flags), local and
  ray alternating (local, ray, local, ray, ...), steady-state env steps per second after `--warmup` s (as in
  benchmarks/throughput.py); median, min and max of `--repeats` runs each, and the ratio of the medians. The Ray
  runs start their private instance (on this machine), as a user without a cluster would.
- Soak: one Ray run of `--soak_minutes`; every 10 s the driver's RSS, the raylet's, and the object store's usage
  (`ray memory --stats-only`), then the first and last minute's means and their change. The issue's criterion:
  object store and driver flat within 10%.
The CPU used by processes outside the benchmark is printed with each figure: on a shared machine it says how far
the figures can be trusted.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

from throughput import foreign_cpu, steady_fps, summary  # noqa: E402

SETTINGS = ["--num_workers=2", "--num_envs_per_worker=64"]


def train_fps(env: str, backend: str, seconds: float, warmup: float, extra: list[str]) -> float:
    train_dir = Path(tempfile.mkdtemp(prefix="appo_rvl_"))
    cmd = [sys.executable, "train_appo.py", f"--env={env}", "--experiment=rvl", f"--train_dir={train_dir}"]
    cmd += [f"--backend={backend}", f"--train_for_seconds={seconds + warmup + 10}", "--report_interval=2"]
    cmd += ["--save_every_sec=1e9", "--ray_object_store_mb=500", *SETTINGS, *extra]
    subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return steady_fps(train_dir / "rvl" / "summaries", warmup)


def compare(env: str, repeats: int, seconds: float, warmup: float, extra: list[str]) -> None:
    fps: dict[str, list[float]] = {"local": [], "ray": []}
    for r in range(repeats):
        for backend in ("local", "ray") if r % 2 == 0 else ("ray", "local"):
            load = foreign_cpu()
            fps[backend].append(train_fps(env, backend, seconds, warmup, extra))
            print(f"{env} {backend:5s} run {r}: {fps[backend][-1]:8.0f} FPS (other processes: {load:.1f} cores)")
    ratio = statistics.median(fps["ray"]) / statistics.median(fps["local"])
    print(f"{env} local: {summary(fps['local'])}")
    print(f"{env} ray:   {summary(fps['ray'])}")
    print(f"{env} ray / local (medians): {ratio:.2f}")


def plasma_mb(kids: list[psutil.Process]) -> float:
    """MiB in the run's object store, as `ray memory --stats-only` reports it (asked from outside the run: its
    private instance runs without Ray's token, RAY_AUTH_MODE=disabled, for this); nan when it cannot be read."""
    gcs = next((k for k in kids if k.name() == "gcs_server"), None)
    ports = [c.laddr.port for c in gcs.net_connections("tcp") if c.status == "LISTEN"] if gcs is not None else []
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}
    for port in ports:
        cmd = ["ray", "memory", "--stats-only", f"--address=127.0.0.1:{port}"]
        out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=60).stdout
        found = re.search(r"Plasma memory usage (\d+) MiB", out)
        if found:
            return float(found[1])
    return math.nan


def soak(env: str, minutes: float, extra: list[str]) -> None:
    train_dir = Path(tempfile.mkdtemp(prefix="appo_soak_"))
    cmd = [sys.executable, "train_appo.py", f"--env={env}", "--experiment=soak", f"--train_dir={train_dir}"]
    cmd += ["--backend=ray", f"--train_for_seconds={minutes * 60}", "--ray_object_store_mb=500", *SETTINGS, *extra]
    run_env = {**os.environ, "RAY_AUTH_MODE": "disabled"}
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=run_env)
    driver = psutil.Process(proc.pid)
    samples: list[tuple[float, float, float, float]] = []  # (seconds, driver RSS, raylet RSS, object store) MiB
    began = time.monotonic()
    while proc.poll() is None:
        time.sleep(10)
        try:
            kids = driver.children(recursive=True)
            raylet = sum(k.memory_info().rss for k in kids if k.name() == "raylet") / 2**20
            sample = (time.monotonic() - began, driver.memory_info().rss / 2**20, raylet, plasma_mb(kids))
        except (psutil.Error, subprocess.TimeoutExpired):
            break
        samples.append(sample)
        print(f"{sample[0]:6.0f} s  driver {sample[1]:7.1f} MB  raylet {sample[2]:7.1f} MB  store {sample[3]:5.0f} MiB")
    proc.wait()
    # While the run and its Ray instance are both up.
    samples = [s for s in samples if s[1] > 0 and s[2] > 0 and not math.isnan(s[3])]
    if len(samples) < 12:
        print("too few samples")
        return
    first = [s for s in samples if s[0] <= samples[0][0] + 60]
    last = [s for s in samples if s[0] >= samples[-1][0] - 60]
    print(f"object store: {min(s[3] for s in samples):.0f}-{max(s[3] for s in samples):.0f} MiB over the run")
    for k, name in ((1, "driver RSS"), (2, "raylet RSS")):
        a, b = statistics.mean(s[k] for s in first), statistics.mean(s[k] for s in last)
        print(f"{name}: first minute {a:.1f} MB, last minute {b:.1f} MB, change {100 * (b - a) / a:+.1f}%")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--envs", nargs="+", default=["HalfCheetah-v5", "Ant-v5"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=60.0, help="measured seconds per run")
    parser.add_argument("--warmup", type=float, default=15.0, help="seconds skipped after collection begins")
    parser.add_argument("--soak_minutes", type=float, default=0.0, help="instead: one Ray run this long, memory")
    args, extra = parser.parse_known_args()
    for env in args.envs:
        if args.soak_minutes > 0:
            soak(env, args.soak_minutes, extra)
        else:
            compare(env, args.repeats, args.seconds, args.warmup, extra)
    return 0


if __name__ == "__main__":
    sys.exit(main())
