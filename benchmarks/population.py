"""Throughput of a population against one policy on the same workers: training FPS (all policies' env steps
summed) with --num_policies=1 and with --num_policies=N --with_pbt, alternated, medians of `--repeats` runs.

    python benchmarks/population.py --env=HalfCheetah-v5 --policies=4 --repeats=3 --seconds=40 [train_appo flags]

With --sampler_only, sampler FPS without learning (and without PBT): every policy keeps its initial weights, so
the envs' physics costs the same in both variants and only the engine's overhead differs. With learning the
policies behave differently from run to run, and MuJoCo's step time depends on what the robot does.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from throughput import appo_fps, foreign_cpu, summary  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--env", default="HalfCheetah-v5")
    parser.add_argument("--policies", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=40.0, help="measured seconds per run")
    parser.add_argument("--warmup", type=float, default=15.0, help="seconds skipped at the start of each run")
    parser.add_argument("--per_policy", action="store_true", help="also measure --shared_policy_workers=False")
    parser.add_argument("--sampler_only", action="store_true", help="sampler FPS (no learning) instead of training")
    args, extra = parser.parse_known_args()
    extra = extra or ["--num_workers=2", "--num_envs_per_worker=16", "--worker_num_splits=2", "--async_rl=True"]
    population = [f"--num_policies={args.policies}"]
    if not args.sampler_only:  # with learning, PBT decides and replaces as it would in a real run
        population += ["--with_pbt", "--pbt_period_env_steps=50000", "--pbt_start_mutation=50000"]
    kind = "sampler-only" if args.sampler_only else "training"
    print(f"env={args.env} policies={args.policies} repeats={args.repeats} {kind} flags={' '.join(extra)}")
    print(f"CPU used by other processes before: {foreign_cpu():.2f} cores")
    variants = {f"{args.policies} policies, shared workers": population}
    if args.per_policy:
        variants[f"{args.policies} policies, per-policy workers"] = [*population, "--shared_policy_workers=False"]
    single: list[float] = []
    many: dict[str, list[float]] = {name: [] for name in variants}
    for i in range(args.repeats):
        # Odd repeats run the population first: a drift of the machine's speed then favours neither side.
        order = [None, *variants] if i % 2 == 0 else [*variants, None]
        for name in order:
            flags = ["--num_policies=1"] if name is None else variants[name]
            fps = appo_fps(args.env, args.seconds, args.warmup, [*flags, *extra], args.sampler_only)
            (single if name is None else many[name]).append(fps)
        line = f"run {i}: 1 policy {single[-1]:.0f}" + "".join(f"  {n} {v[-1]:.0f}" for n, v in many.items())
        print(line, flush=True)
    print(f"CPU used by other processes after: {foreign_cpu():.2f} cores")
    print(f"{kind} FPS, 1 policy: {summary(single)}")
    for name, values in many.items():
        ratios = [m / s for m, s in zip(values, single, strict=True)]
        per_repeat = " ".join(f"{r:.2f}" for r in ratios)
        print(f"{kind} FPS, {name}: {summary(values)}  ratio {statistics.median(ratios):.2f} (per repeat {per_repeat})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
