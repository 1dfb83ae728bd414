"""MAML-TRPO on navigation2d (the learning acceptance): one run per seed with the defaults (meta-batch 20,
fast-batch 20, one inner step, fast_lr 0.1, TRPO max_kl 0.01), then the figures from its summaries.

    python benchmarks/maml_navigation.py --seeds 0 1 --iterations 60

Prints, per seed: wall time of the run (start-up included), seconds per iteration (sampling / meta-step), the
mean maml/return_pre and maml/return_post over the last --window (20) of --iterations (40-59 of 60), their gain, the
share of accepted TRPO steps, the curve every 5 iterations and the final meta-test. Exits 1 unless, over the
seeds, the mean post return >= -20, the mean gain >= +15, >= 90% of steps were accepted and every seed ran in
under --max_minutes (5)."""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from appo.tools.plot import load_events  # noqa: E402


def series(acc: object, tag: str) -> np.ndarray:
    return np.array([e.value for e in acc.Scalars(tag)])  # type: ignore[attr-defined]


def run_seed(train_dir: Path, seed: int, iterations: int, window: int, extra: list[str]) -> dict[str, object]:
    name = f"maml_nav_s{seed}"
    cmd = [sys.executable, str(ROOT / "train_appo.py"), "--algo=maml_trpo", "--env=navigation2d"]
    cmd += [f"--train_dir={train_dir}", f"--experiment={name}", f"--seed={seed}"]
    cmd += [f"--train_for_iterations={iterations}", "--meta_test_interval=0", *extra]
    print(" ".join(cmd[1:]), flush=True)
    shutil.rmtree(train_dir / name, ignore_errors=True)  # a run left from before would resume, not start afresh
    began = time.monotonic()
    subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.monotonic() - began
    acc = load_events(train_dir / name / "summaries" / "0")
    pre, post = series(acc, "maml/return_pre"), series(acc, "maml/return_post")
    last = slice(max(0, len(post) - window), len(post))
    meta_test = np.load(train_dir / name / "meta_test" / f"iter_{iterations}.npz")["returns"]
    return {
        "seed": seed,
        "iterations": len(post),
        "wall_seconds": round(wall, 1),
        "seconds_per_iteration": round(float(series(acc, "perf/seconds_per_iteration").mean()), 2),
        "sampling_seconds": round(float(series(acc, "perf/sampling_seconds").mean()), 2),
        "meta_step_seconds": round(float(series(acc, "perf/meta_step_seconds").mean()), 2),
        "driver_cpu_seconds": round(float(series(acc, "perf/driver_cpu_seconds").mean()), 2),
        "pre_window": round(float(pre[last].mean()), 2),
        "post_window": round(float(post[last].mean()), 2),
        "gain_window": round(float((post - pre)[last].mean()), 2),
        "accepted": round(float(series(acc, "maml/step_accepted").mean()), 3),
        "pre_by_5": [round(float(pre[i : i + 5].mean()), 1) for i in range(0, len(pre), 5)],
        "post_by_5": [round(float(post[i : i + 5].mean()), 1) for i in range(0, len(post), 5)],
        "meta_test_by_step": [round(float(v), 1) for v in meta_test.mean(axis=(1, 2))],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--iterations", type=int, default=60)
    parser.add_argument("--window", type=int, default=20, help="the last WINDOW iterations are averaged")
    parser.add_argument("--max_minutes", type=float, default=5.0)
    parser.add_argument("--train_dir", default="/tmp/maml_navigation_benchmark")
    args, extra = parser.parse_known_args()
    results = [run_seed(Path(args.train_dir), s, args.iterations, args.window, extra) for s in args.seeds]
    for r in results:
        print(json.dumps(r))
    post = float(np.mean([r["post_window"] for r in results]))
    gain = float(np.mean([r["gain_window"] for r in results]))
    accepted = float(np.mean([r["accepted"] for r in results]))
    slowest = max(float(r["wall_seconds"]) for r in results) / 60
    print(f"over seeds: post {post:.2f} (>= -20), gain {gain:+.2f} (>= +15), accepted {accepted:.0%} (>= 90%), ")
    print(f"slowest seed {slowest:.2f} min (< {args.max_minutes:g})")
    ok = post >= -20 and gain >= 15 and accepted >= 0.9 and slowest < args.max_minutes
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
