"""Throughput benchmark: raw env stepping vs appo's sampler alone vs full training, on the same cores.

    python benchmarks/throughput.py --env=HalfCheetah-v5 --repeats=3 --seconds=40 [extra train_appo flags]

- raw: one process per core, each stepping one env (built by envs.make_env, as the actor workers build
  theirs); aggregate steps/s. Measured twice: with `action_space.sample()` per step (uniform actions, plus
  the Python cost of drawing them), and with actions like an untrained policy's (clipped N(0, 1), drawn
  ahead of time). MuJoCo's step time depends on the actions, so the second is the like-for-like baseline
  of the sampler, whose policy is untrained.
- sampler: train_appo.py --sampler_only (actors + policy worker; the learner only recycles slots).
- training: train_appo.py with learning.
Sampler and training FPS are steady state: env steps between the first summary `--warmup` seconds after
collection began (the first summary with env steps) and the last one, over the wall time between them
(start-up excluded). Each figure is the median of `--repeats` runs, with min and max; the CPU used by
processes outside this benchmark is printed too.
"""

from __future__ import annotations

import argparse
import math
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _raw_worker(env_name: str, seconds: float, actions: str, std: float, out: mp.Queue) -> None:
    os.environ["OMP_NUM_THREADS"] = "1"
    import gymnasium as gym
    import numpy as np

    from appo.envs import make_env

    env = make_env(env_name)
    env.reset(seed=os.getpid())
    space = env.action_space
    if actions == "policy":
        # What an untrained policy sends (mean ~0, the run's initial std, clipped to the bounds), drawn ahead
        # of time: the env's own cost with the sampler's action distribution and no per-step Python for
        # drawing them. MuJoCo's step time depends on the actions (HalfCheetah: std 0.37 steps ~15% slower
        # than std 1), so the std must be the run's.
        rng = np.random.default_rng(os.getpid())
        if isinstance(space, gym.spaces.Box):
            noise = std * rng.standard_normal((4096, *space.shape))
            drawn = np.clip(noise, space.low, space.high).astype(space.dtype)
        else:
            drawn = rng.integers(space.n, size=4096)
    for _ in range(200):  # warm-up
        env.step(space.sample())
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        action = space.sample() if actions == "sample" else drawn[steps & 4095]
        _, _, terminated, truncated, _ = env.step(action)
        steps += 1
        if terminated or truncated:
            env.reset()
    out.put(steps / (time.perf_counter() - start))


def summed_rates(target: Callable[..., None], args: tuple, procs: int, seconds: float) -> float:
    """Start `procs` spawned processes of `target(*args, out)`, each putting its steps/s on `out`; their sum."""
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    workers = [ctx.Process(target=target, args=(*args, out)) for _ in range(procs)]
    for w in workers:
        w.start()
    total = sum(out.get(timeout=seconds + 120) for _ in workers)
    for w in workers:
        w.join()
    return total


def raw_fps(env_name: str, procs: int, seconds: float, actions: str = "sample", std: float = 1.0) -> float:
    return summed_rates(_raw_worker, (env_name, seconds, actions, std), procs, seconds)


def initial_std(env_name: str, extra: list[str]) -> float:
    """exp(--initial_log_std) of the run these flags start (defaults < env preset < flags)."""
    from appo.config.cfg import build_parser, merge_cfg

    explicit = vars(build_parser("throughput").parse_args([f"--env={env_name}", *extra]))
    return math.exp(merge_cfg(explicit, None).initial_log_std)


def steady_fps(summaries: Path, warmup: float) -> float:
    """Env steps per second of the whole run (every policy's summaries/<id>/ summed) after `warmup` seconds."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    total = 0.0
    for folder in sorted(p for p in summaries.iterdir() if p.is_dir()):
        acc = EventAccumulator(str(folder), size_guidance={"scalars": 0})
        acc.Reload()
        events = acc.Scalars("perf/fps")
        # Warm-up counts from the first summary with env steps: start-up (process spawn, env creation) takes
        # longer with more processes, and would otherwise eat into the window of the heavier variant.
        t0 = next((e.wall_time for e in events if e.step > 0), events[-1].wall_time)
        steady = [e for e in events if e.wall_time - t0 >= warmup]
        if len(steady) < 2:
            raise RuntimeError(f"too few summaries after warm-up in {folder}")
        total += (steady[-1].step - steady[0].step) / (steady[-1].wall_time - steady[0].wall_time)
    return total


def appo_fps(
    env_name: str, seconds: float, warmup: float, extra: list[str], sampler_only: bool, root: Path = ROOT
) -> float:
    """Steady-state FPS of train_appo.py run from `root` (this checkout, or another commit's worktree)."""
    train_dir = Path(tempfile.mkdtemp(prefix="appo_tp_"))
    cmd = [
        sys.executable,
        "train_appo.py",
        f"--env={env_name}",
        "--experiment=tp",
        f"--train_dir={train_dir}",
        f"--train_for_seconds={seconds + warmup + 10}",  # start-up takes 5-10 s before the warm-up
        "--report_interval=2",
        "--save_every_sec=1e9",
        f"--sampler_only={sampler_only}",
        *extra,
    ]
    subprocess.run(cmd, cwd=root, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return steady_fps(train_dir / "tp" / "summaries", warmup)


def foreign_cpu(sample_seconds: float = 2.0) -> float:
    """Cores used by processes that are not this benchmark or its children."""
    me = psutil.Process()
    mine = {me.pid, *(c.pid for c in me.children(recursive=True))}
    procs = [p for p in psutil.process_iter() if p.pid not in mine]
    for p in procs:
        try:
            p.cpu_percent(None)
        except psutil.Error:
            pass
    time.sleep(sample_seconds)
    total = 0.0
    for p in procs:
        try:
            total += p.cpu_percent(None)
        except psutil.Error:
            pass
    return total / 100.0


def summary(values: list[float]) -> str:
    return f"{statistics.median(values):8.0f} (min {min(values):.0f}, max {max(values):.0f})"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--env", default="HalfCheetah-v5")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=30.0, help="measured seconds per run")
    parser.add_argument("--warmup", type=float, default=10.0, help="seconds skipped at the start of appo runs")
    parser.add_argument("--procs", type=int, default=len(os.sched_getaffinity(0)))
    parser.add_argument(
        "--variant",
        action="append",
        default=[],
        help='extra flags of one appo variant, e.g. --variant="--actor_inference=False"; repeat to run several '
        "side by side within each repeat (default: one variant with no extra flags)",
    )
    args, extra = parser.parse_known_args()
    extra = extra or ["--num_workers=2", "--num_envs_per_worker=8", "--worker_num_splits=2", "--async_rl=True"]
    variants = args.variant or [""]
    print(f"env={args.env} cores={args.procs} repeats={args.repeats} seconds={args.seconds} flags={' '.join(extra)}")
    std = initial_std(args.env, extra)
    print(f"policy-like actions: clipped N(0, {std:.3f}), the initial std of this run's policy")
    print(f"CPU used by other processes before: {foreign_cpu():.2f} cores")
    raw, raw_policy = [], []
    appo: dict[tuple[str, str], list[float]] = {}
    for i in range(args.repeats):
        raw.append(raw_fps(args.env, args.procs, args.seconds))
        raw_policy.append(raw_fps(args.env, args.procs, args.seconds, actions="policy", std=std))
        line = f"run {i}: raw {raw[-1]:.0f}  raw (policy actions) {raw_policy[-1]:.0f}"
        for variant in variants:
            flags = extra + variant.split()
            for mode in ("sampler", "training"):
                value = appo_fps(args.env, args.seconds, args.warmup, flags, sampler_only=mode == "sampler")
                appo.setdefault((variant, mode), []).append(value)
                line += f"  {mode}{f' [{variant}]' if variant else ''} {value:.0f}"
        print(line, flush=True)
    print(f"CPU used by other processes after: {foreign_cpu():.2f} cores")

    def ratio(values: list[float], base: list[float]) -> str:
        return f"{statistics.median([v / b for v, b in zip(values, base, strict=True)]):.2f}"

    print(f"raw env steps/s ({args.procs} procs, action_space.sample()): {summary(raw)}")
    print(f"raw env steps/s ({args.procs} procs, policy-like actions):  {summary(raw_policy)}")
    for (variant, mode), values in appo.items():
        name = ("sampler-only FPS" if mode == "sampler" else "training FPS") + (f" [{variant}]" if variant else "")
        print(
            f"{name + ':':<18}{summary(values)}  ratio to raw {ratio(values, raw)}, "
            f"to raw with policy-like actions {ratio(values, raw_policy)}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
