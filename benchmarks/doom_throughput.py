"""VizDoom throughput in one sitting on the same cores: raw stepping of appo's Doom envs, appo's sampler alone, appo
training, and Sample Factory 2.1.1 training with the same workers, envs per worker, splits and screen size.

    python benchmarks/doom_throughput.py --scenario=basic --repeats=3 --seconds=60 --sf_python=SF_VENV/bin/python

Every figure counts agent steps per second (one agent step = 4 tics: multiply by 4 for Sample Factory's "FPS").
- raw: one process per core, each stepping `--envs` of appo's own Doom envs (envs/doom/game.py: the 160x120 game
  resized to 128x72 with its game variables, as actor workers step them) with random actions.
- appo sampler / training: train_appo.py --env=doom_<scenario> with its preset, --sampler_only / learning
  (steady state, start-up excluded; benchmarks/throughput.py).
- Sample Factory: sf_examples.vizdoom.train_vizdoom from `--sf_python`'s environment (Sample Factory 2.1.1 needs
  gymnasium 0.29 and numpy < 2: its own virtualenv, with vizdoom 1.3.2 installed into it) with its Doom defaults
  (128x72, frame skip 4) and the same workers, envs per worker and splits, asynchronous, on the CPU; its steady
  rate read from its "Total num frames" log lines and divided by 4.
Each figure is the median of `--repeats` runs, with min and max; the CPU used by other processes is printed."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from peer_runs import add_sitting_args, appo_run, print_table, raw_env_worker, sf_fps  # noqa: E402
from throughput import foreign_cpu, summed_rates  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenario", default="basic")
    add_sitting_args(parser)
    parser.add_argument("--skip", nargs="*", default=[], help="rows to leave out: raw sampler appo sf")
    args, extra = parser.parse_known_args()
    env = f"doom_{args.scenario}"
    appo_flags = [f"--num_workers={args.workers}", f"--num_envs_per_worker={args.envs}", *extra]
    rows: dict[str, list[float]] = {}
    print(f"other processes use {foreign_cpu():.2f} cores before the runs", flush=True)
    for _ in range(args.repeats):
        if "raw" not in args.skip:
            rows.setdefault("raw appo Doom envs", []).append(
                summed_rates(raw_env_worker, (env, args.envs, args.seconds), args.procs, args.seconds)
            )
        if "sampler" not in args.skip:
            fps, where = appo_run(env, args.seconds, args.warmup, appo_flags, sampler_only=True)
            rows.setdefault("appo sampler only", []).append(fps)
            print(f"  appo sampler only: {where}", flush=True)
        if "appo" not in args.skip:
            fps, where = appo_run(env, args.seconds, args.warmup, appo_flags, sampler_only=False)
            rows.setdefault("appo training", []).append(fps)
            print(f"  appo training: {where}", flush=True)
        if "sf" not in args.skip and args.sf_python:
            sf = sf_fps(
                args.sf_python,
                "sf_examples.vizdoom.train_vizdoom",
                env,
                args.seconds,
                args.warmup,
                args.workers,
                args.envs,
                2,
            )
            rows.setdefault("Sample Factory 2.1.1 training", []).append(sf)
        print({k: round(v[-1]) for k, v in rows.items()}, flush=True)
    title = f"agent steps/s ({env}, {args.procs} cores, {args.workers} workers x {args.envs} envs; x4 = frames/s)"
    sf = "Sample Factory 2.1.1 training"
    ratios = [("appo / Sample Factory training", "appo training", sf)]
    print_table(title, rows, ratios + [("appo training / raw stepping", "appo training", "raw appo Doom envs")])
    print(f"other processes use {foreign_cpu():.2f} cores after the runs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
