"""Soak benchmark: train for `--minutes` while killing a random actor worker or policy worker with SIGKILL
every `--kill_every` seconds; print the restarts survived, the env steps the run reached, and the resident
memory (RSS) of every process of the run at the start and at the end (it must stay flat), and the longest
stretch without progress (from the status lines: a wedged queue shows as a long stall).

    python benchmarks/soak.py --minutes=30 --kill_every=60 [extra train_appo flags]
"""

from __future__ import annotations

import argparse
import random
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent


def run_processes(experiment: str) -> dict[str, psutil.Process]:
    out = {}
    for p in psutil.process_iter():
        try:
            title = " ".join(p.cmdline())
        except psutil.Error:
            continue
        if title.startswith(f"appo:{experiment}:"):
            out[title.split(":")[2].strip()] = p
    return out


def rss_mb(procs: dict[str, psutil.Process]) -> dict[str, float]:
    out = {}
    for name, p in procs.items():
        try:
            out[name] = p.memory_info().rss / 2**20
        except psutil.Error:
            pass
    return out


def longest_stall(log: str) -> float:
    """Seconds of the longest stretch between two status lines whose env step counts went up (the last
    stretch counts too: a run wedged at its end)."""
    points = []
    for hms, steps in re.findall(r"^\[(\d\d:\d\d:\d\d)\]\[driver\] INFO steps (\d+)", log, flags=re.M):
        h, m, sec = (int(x) for x in hms.split(":"))
        points.append((h * 3600 + m * 60 + sec, int(steps)))
    if not points:
        return 0.0
    longest, last_t, last_steps = 0.0, points[0][0], points[0][1]
    for t, steps in points[1:]:
        longest = max(longest, (t - last_t) % 86400)  # a stall in progress, or the stretch to this progress
        if steps > last_steps:
            last_t, last_steps = t, steps
    return longest


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--kill_every", type=float, default=60.0)
    parser.add_argument("--seed", type=int, default=0)
    args, extra = parser.parse_known_args()
    extra = extra or ["--env=HalfCheetah-v5", "--num_workers=4"]
    train_dir = Path(tempfile.mkdtemp(prefix="appo_soak_"))
    cmd = [
        sys.executable,
        "train_appo.py",
        "--experiment=soak",
        f"--train_dir={train_dir}",
        f"--train_for_seconds={args.minutes * 60}",
        "--report_interval=10",
        *extra,
    ]
    print("command:", " ".join(cmd), flush=True)
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    rng = random.Random(args.seed)
    time.sleep(30)  # start-up
    start_rss = rss_mb(run_processes("soak"))
    print("RSS MB at start:", {k: round(v) for k, v in sorted(start_rss.items())}, flush=True)
    kills: list[str] = []
    last_rss = start_rss
    began = time.monotonic()
    while proc.poll() is None:
        time.sleep(args.kill_every)
        procs = run_processes("soak")
        if proc.poll() is None and procs:
            last_rss = rss_mb(procs)  # before this round's kill
            name, victim = rng.choice([(n, p) for n, p in procs.items() if "worker" in n])
            victim.kill()
            kills.append(name)
            line = " ".join(f"{k}={round(v)}" for k, v in sorted(last_rss.items()))
            print(f"{(time.monotonic() - began) / 60:5.1f} min: killed {name}; RSS MB before: {line}", flush=True)
    log = (train_dir / "soak" / "log.txt").read_text()
    restarts = len(re.findall(r"starting it again", log))
    steps = re.findall(r"INFO steps (\d+)", log)
    print(f"exit={proc.returncode} kills={len(kills)} restarts={restarts} env_steps={steps[-1] if steps else 0}")
    actor_kills = sum(1 for k in kills if k.startswith("actor_worker"))
    print(f"actor worker kills: {actor_kills} (each loses at most its unfinished rollouts)")
    print("RSS MB at start:", {k: round(v) for k, v in sorted(start_rss.items())})
    print("RSS MB before the last kill:", {k: round(v) for k, v in sorted(last_rss.items())})
    print("log lines with ERROR:", len(re.findall(r"\] ERROR", log)))
    print(f"longest stretch without progress: {longest_stall(log):.0f} s (status lines every 10 s)")
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
