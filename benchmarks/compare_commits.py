"""Speed of two commits, measured in one sitting: the sampler-only and training FPS of each, run after run,
alternating which commit goes first, so drift of the shared machine hits both alike.

    python benchmarks/compare_commits.py OLD_REF NEW_REF --env=HalfCheetah-v5 --repeats=3 --seconds=20 \\
        --num_workers=2 --num_envs_per_worker=64 --worker_num_splits=2 --async_rl=True

Each commit is checked out into a temporary git worktree and its own train_appo.py runs there (the script's
folder comes first on sys.path, so each imports its own appo). FPS is steady state, as in
benchmarks/throughput.py. Prints per-run figures, medians with min and max, and the median of the per-repeat
ratios new/old.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from throughput import ROOT, appo_fps, foreign_cpu, summary  # noqa: E402


def worktree(ref: str) -> Path:
    path = Path(tempfile.mkdtemp(prefix="appo_ref_")) / "tree"
    subprocess.run(["git", "worktree", "add", "--detach", str(path), ref], cwd=ROOT, check=True, capture_output=True)
    return path


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("old")
    parser.add_argument("new")
    parser.add_argument("--env", default="HalfCheetah-v5")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--warmup", type=float, default=8.0)
    parser.add_argument("--modes", nargs="+", choices=("sampler", "training"), default=["sampler", "training"])
    args, extra = parser.parse_known_args()
    trees = {"old": worktree(args.old), "new": worktree(args.new)}
    print(f"env={args.env} old={args.old} new={args.new} repeats={args.repeats} flags={' '.join(extra)}")
    print(f"CPU used by other processes before: {foreign_cpu():.2f} cores", flush=True)
    fps: dict[tuple[str, str], list[float]] = {}
    try:
        for i in range(args.repeats):
            order = ("old", "new") if i % 2 == 0 else ("new", "old")
            for mode in args.modes:
                for which in order:
                    value = appo_fps(args.env, args.seconds, args.warmup, extra, mode == "sampler", trees[which])
                    fps.setdefault((which, mode), []).append(value)
                    print(f"repeat {i} {mode:<8} {which}: {value:.0f}", flush=True)
    finally:
        for tree in trees.values():
            subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, capture_output=True)
    print(f"CPU used by other processes after: {foreign_cpu():.2f} cores")
    for mode in args.modes:
        old, new = fps[("old", mode)], fps[("new", mode)]
        ratios = [n / o for n, o in zip(new, old, strict=True)]
        print(f"{mode:<8} old {summary(old)}  new {summary(new)}  new/old median {statistics.median(ratios):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
