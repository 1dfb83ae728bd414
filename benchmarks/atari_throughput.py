"""Atari throughput in one sitting on the same cores: raw stepping of the fastest vector envs, appo's sampler alone,
appo training, and Sample Factory 2.1.1 training with the same workers and envs.

    python benchmarks/atari_throughput.py --game=pong --repeats=3 --seconds=60 --sf_python=/path/to/sf_venv/bin/python

Every figure counts agent steps per second (one agent step = 4 emulator frames: multiply by 4 for frames/s, the
unit of Sample Factory's own "FPS" and of EnvPool's tables).
- raw gymnasium: one process per core, each stepping `--envs` of appo's own Atari envs (envs/atari/atari.py: gymnasium's
  preprocessing wrappers, as actor workers step them) with random actions.
- raw ale-py vector: ale-py's native AtariVectorEnv (C++ threads, the same preprocessing) with `--envs` x cores
  envs and random actions, in one process.
- appo sampler / training: train_appo.py --env=atari_<game> with --sampler_only / learning (steady state, start-up
  excluded; benchmarks/throughput.py).
- Sample Factory: sf_examples.atari.train_atari from `--sf_python`'s environment (Sample Factory 2.1.1 needs
  gymnasium 0.29 and numpy < 2: its own virtualenv) with its Atari defaults but the same workers, envs per worker
  and splits, asynchronous, on the CPU; its steady rate is read from its "Total num frames" log lines over the
  measured window and divided by its frameskip (4).
Each figure is the median of `--repeats` runs, with min and max; the CPU used by other processes is printed."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from peer_runs import add_sitting_args, appo_run, print_table, raw_env_worker, sf_fps  # noqa: E402
from throughput import foreign_cpu, summed_rates  # noqa: E402


def raw_gym_fps(game: str, procs: int, envs: int, seconds: float) -> float:
    return summed_rates(raw_env_worker, (f"atari_{game}", envs, seconds), procs, seconds)


def raw_vector_fps(game: str, procs: int, envs: int, seconds: float) -> float:
    import numpy as np
    from ale_py.vector_env import AtariVectorEnv

    vec = AtariVectorEnv(game, procs * envs, num_threads=procs, autoreset_mode="SameStep")
    vec.reset(seed=0)
    rng = np.random.default_rng(0)
    n_actions = int(vec.single_action_space.n)
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        vec.step(rng.integers(n_actions, size=procs * envs))
        steps += procs * envs
    rate = steps / (time.perf_counter() - start)
    vec.close()
    return rate


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--game", default="pong")
    add_sitting_args(parser)
    parser.add_argument("--skip", nargs="*", default=[], help="rows to leave out: gym vector sampler appo sf")
    args, extra = parser.parse_known_args()
    appo_flags = [f"--num_workers={args.workers}", f"--num_envs_per_worker={args.envs}", *extra]
    rows: dict[str, list[float]] = {}
    print(f"other processes use {foreign_cpu():.2f} cores before the runs", flush=True)
    for _ in range(args.repeats):
        if "gym" not in args.skip:
            rows.setdefault("raw gymnasium wrappers", []).append(
                raw_gym_fps(args.game, args.procs, args.envs, args.seconds)
            )
        if "vector" not in args.skip:
            rows.setdefault("raw ale-py AtariVectorEnv", []).append(
                raw_vector_fps(args.game, args.procs, args.envs, args.seconds)
            )
        env = f"atari_{args.game}"
        if "sampler" not in args.skip:
            fps, where = appo_run(env, args.seconds, args.warmup, appo_flags, sampler_only=True)
            rows.setdefault("appo sampler only", []).append(fps)
            print(f"  appo sampler only: {where}", flush=True)
        if "appo" not in args.skip:
            fps, where = appo_run(env, args.seconds, args.warmup, appo_flags, sampler_only=False)
            rows.setdefault("appo training", []).append(fps)
            print(f"  appo training: {where}", flush=True)
        if "sf" not in args.skip and args.sf_python:
            rows.setdefault("Sample Factory 2.1.1 training", []).append(
                sf_fps(
                    args.sf_python,
                    "sf_examples.atari.train_atari",
                    f"atari_{args.game}",
                    args.seconds,
                    args.warmup,
                    args.workers,
                    args.envs,
                    2,
                    # ale-py 0.12 registers the v0/v4 ids Sample Factory's Atari example makes only when asked: in
                    # every process (its workers are spawned), so through a sitecustomize on their path.
                    "import ale_py.registration\nale_py.registration.register_v0_v4_envs()\n",
                )
            )
        print({k: round(v[-1]) for k, v in rows.items()}, flush=True)
    title = f"agent steps/s ({args.game}, {args.procs} cores, {args.workers} workers x {args.envs} envs; x4 = frames/s)"
    print_table(title, rows, [("appo / Sample Factory training", "appo training", "Sample Factory 2.1.1 training")])
    print(f"other processes use {foreign_cpu():.2f} cores after the runs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
