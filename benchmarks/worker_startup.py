"""Start-up and memory of actor workers, two commits side by side in one sitting (actor workers that
act in numpy do not import torch; docs/results.md, Backends, scaling and robustness).

    python benchmarks/worker_startup.py OLD_REF NEW_REF --workers 2 16 --repeats 3 --env=ant_dir

For each commit (a temporary git worktree running its own train_appo.py), each worker count and each repeat,
alternating which commit goes first: the run is started, and measured are
- first steps: seconds from launching train_appo.py to the first status line with env steps > 0 (the driver
  hears of steps through episode reports, so this includes up to one report interval and the first episodes:
  the same for both commits, `--max_episode_steps` keeps it short);
- per actor worker, RSS and USS (memory only that process holds: shared libraries mapped by several workers
  count in RSS of each, not in USS) a few seconds after the first steps, median over the workers.
Then the run is stopped (SIGINT) and the next starts. Prints every run, then medians per commit and worker count.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
STEPS = re.compile(r"steps (\d+)")


def worktree(ref: str) -> Path:
    path = Path(tempfile.mkdtemp(prefix="appo_ref_")) / "tree"
    subprocess.run(["git", "worktree", "add", "--detach", str(path), ref], cwd=ROOT, check=True, capture_output=True)
    return path


def actor_processes(experiment: str) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter(["cmdline"]):
        try:
            title = " ".join(p.info["cmdline"] or [])
        except (psutil.Error, TypeError):
            continue
        if title.startswith(f"appo:{experiment}:actor_worker_"):
            found.append(p)
    return found


def measure(tree: Path, env: str, workers: int, settle: float, timeout: float, extra: list[str]) -> dict:
    experiment = f"startup_{os.getpid()}_{time.monotonic_ns()}"
    train_dir = Path(tempfile.mkdtemp(prefix="appo_startup_"))
    command = [
        sys.executable, "train_appo.py", f"--env={env}", f"--experiment={experiment}", f"--train_dir={train_dir}",
        f"--num_workers={workers}", "--report_interval=0.5", "--max_episode_steps=20", "--train_for_seconds=600",
        *extra,
    ]  # fmt: skip
    began = time.monotonic()
    proc = subprocess.Popen(command, cwd=tree, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    first: list[float] = []

    def read() -> None:
        for line in proc.stdout:  # type: ignore[union-attr]
            m = STEPS.search(line) if "FPS" in line else None
            if m and int(m.group(1)) > 0 and not first:
                first.append(time.monotonic() - began)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        while not first and time.monotonic() - began < timeout and proc.poll() is None:
            time.sleep(0.1)
        if not first:
            raise RuntimeError(f"{tree}: no env steps after {timeout:.0f} s (exit {proc.poll()})")
        time.sleep(settle)
        rss, uss = [], []
        for p in actor_processes(experiment):
            try:
                info = p.memory_full_info()
            except psutil.Error:
                continue
            rss.append(info.rss / 2**20)
            uss.append(info.uss / 2**20)
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        reader.join(5)
    return {"first": first[0], "rss": statistics.median(rss), "uss": statistics.median(uss), "n": len(rss)}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("old")
    parser.add_argument("new")
    parser.add_argument("--env", default="ant_dir")
    parser.add_argument("--workers", type=int, nargs="+", default=[2, 16])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--settle", type=float, default=5.0, help="seconds after the first steps to read memory")
    parser.add_argument("--timeout", type=float, default=300.0)
    args, extra = parser.parse_known_args()
    trees = {"old": worktree(args.old), "new": worktree(args.new)}
    print(f"env={args.env} old={args.old} new={args.new} cores={os.cpu_count()} flags={' '.join(extra)}", flush=True)
    results: dict[tuple[str, int], list[dict]] = {}
    try:
        for i in range(args.repeats):
            for workers in args.workers:
                order = ("old", "new") if i % 2 == 0 else ("new", "old")
                for which in order:
                    r = measure(trees[which], args.env, workers, args.settle, args.timeout, extra)
                    results.setdefault((which, workers), []).append(r)
                    print(
                        f"repeat {i} workers {workers:>2} {which}: first steps {r['first']:.1f} s, per actor worker "
                        f"RSS {r['rss']:.0f} MiB USS {r['uss']:.0f} MiB ({r['n']} workers)",
                        flush=True,
                    )
    finally:
        for tree in trees.values():
            subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, capture_output=True)
    print("medians (first steps s, RSS MiB, USS MiB per actor worker):")
    for workers in args.workers:
        row = []
        for which in ("old", "new"):
            rs = results[(which, workers)]
            row.append(
                f"{which} {statistics.median(r['first'] for r in rs):.1f} s, "
                f"{statistics.median(r['rss'] for r in rs):.0f} / {statistics.median(r['uss'] for r in rs):.0f} MiB"
            )
        print(f"  {workers:>2} workers: " + " | ".join(row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
