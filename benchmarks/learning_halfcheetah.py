"""Learning benchmark: train HalfCheetah-v5 (MuJoCo preset) for 1M env steps and print the final average
return (last 100 training episodes, from the run's tensorboard file), the return of 10 deterministic
evaluation episodes of the final weights, and the wall time.

    python benchmarks/learning_halfcheetah.py [--env_steps=1000000] [extra train_appo flags...]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator


def final_scalar(summary_dir: Path, tag: str) -> tuple[int, float]:
    acc = EventAccumulator(str(summary_dir), size_guidance={"scalars": 0})
    acc.Reload()
    events = acc.Scalars(tag)
    return events[-1].step, events[-1].value


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--env", default="HalfCheetah-v5")
    parser.add_argument("--env_steps", type=int, default=1_000_000)
    args, extra = parser.parse_known_args()
    train_dir = Path(tempfile.mkdtemp(prefix="appo_bench_"))
    cmd = [
        sys.executable,
        "train_appo.py",
        f"--env={args.env}",
        "--experiment=bench",
        f"--train_dir={train_dir}",
        f"--train_for_env_steps={args.env_steps}",
        "--report_interval=10",
        f"--eval_interval={args.env_steps}",
        "--eval_episodes=10",
        *extra,
    ]
    print("command:", " ".join(cmd), flush=True)
    start = time.monotonic()
    status = subprocess.call(cmd, cwd=Path(__file__).resolve().parent.parent)
    wall = time.monotonic() - start
    summaries = train_dir / "bench" / "summaries" / "0"
    step, value = final_scalar(summaries, "episode/return_mean")
    _, eval_value = final_scalar(summaries, "eval/return_mean")
    print(
        f"env={args.env} env_steps={step} final_return_mean={value:.1f} (last 100 training episodes) "
        f"eval_return_mean={eval_value:.1f} (10 deterministic episodes) wall_s={wall:.0f} exit={status}"
    )
    return status


if __name__ == "__main__":
    sys.exit(main())
