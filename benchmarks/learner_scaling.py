"""Learner throughput with 1 and with G data-parallel learner ranks (--learner_world_size), the learner alone:
no actor workers, one fixed batch trained on again and again (tests/support/fixed_batch.py), so the figure is
what the learner processes can do, not what the sampler feeds them.

    python benchmarks/learner_scaling.py --world_sizes 1 2 --hidden 512 512 --iterations=12 --repeats=3

The default batch follows the MuJoCo preset (GAE, minibatches of 1024 single steps, 4 per epoch, 2 epochs: 4096
steps per iteration) with HalfCheetah's spaces (17 floats in, 6 out) and a 2x512 tanh MLP, large enough that the
learner matters. Prints, per world size, the learner's samples per second over the timed iterations (env steps
trained / seconds inside `train`, rank 0's `perf/learner_samples_per_sec`, median) and the wall-clock rate
(steps trained / wall time from the first hand-over to the last report, batch copies and sharding included).
The first `--warmup` iterations are not counted; the world sizes alternate in order over `--repeats` runs, and the
CPU used by other processes just before each run is printed (benchmarks/throughput.py's `foreign_cpu`)."""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

from appo.config.cfg import Cfg  # noqa: E402
from appo.config.derive import derive  # noqa: E402
from appo.models.registry import make_model  # noqa: E402
from tests.support.fixed_batch import train_on_fixed_batch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from throughput import foreign_cpu, summary  # noqa: E402

SPACES = (gym.spaces.Box(-np.inf, np.inf, (17,), np.float32), gym.spaces.Box(-1.0, 1.0, (6,), np.float32))


def synthetic_record(cfg: Cfg, seed: int = 0) -> dict[str, torch.Tensor]:
    """One iteration of trajectories: Gaussian observations and rewards, actions and their log-probs and values
    from a seeded policy (so that PPO's ratios start near 1, as with real data)."""
    n, T = derive(cfg).trajectories_per_iteration, cfg.rollout
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    obs = torch.randn(n, T + 1, SPACES[0].shape[0], generator=gen)
    with torch.no_grad():
        out = make_model(cfg, *SPACES).act(obs[:, :T].reshape(n * T, -1), torch.zeros(n * T, 1))
    dones = torch.zeros(n, T)
    dones[:, T // 2] = 1.0  # an episode end in every trajectory
    return {
        "obs": obs,
        "actions": out.actions.reshape(n, T, -1),
        "log_probs": out.log_probs.reshape(n, T),
        "values": out.values.reshape(n, T),
        "rewards": torch.randn(n, T, generator=gen),
        "dones": dones,
        "truncated": torch.zeros(n, T),
        "policy_versions": torch.zeros(n, T, dtype=torch.int64),
    }


def measure(args: argparse.Namespace, size: int) -> tuple[float, float, list[str]]:
    """(median learner samples/s over the timed iterations, wall-clock samples/s over them, each rank's shutdown
    profile) with `size` ranks."""
    samples = args.batch_size * args.num_batches_per_epoch
    with tempfile.TemporaryDirectory(prefix="learner_scaling_") as tmp:
        cfg = Cfg(
            env="HalfCheetah-v5",
            train_dir=tmp,
            experiment="scaling",
            num_workers=1,
            num_envs_per_worker=2 * samples // args.rollout,
            worker_num_splits=2,
            rollout=args.rollout,
            batch_size=args.batch_size,
            num_batches_per_epoch=args.num_batches_per_epoch,
            num_epochs=args.num_epochs,
            with_vtrace=args.with_vtrace,
            encoder_mlp_layers=list(args.hidden),
            learner_world_size=size,
            device=args.device,
            max_policy_lag=args.iterations + 1,
            save_every_sec=1e9,
        )
        run = train_on_fixed_batch(cfg, SPACES, synthetic_record(cfg), args.iterations)
    timed = run.reports[args.warmup :]
    rate = statistics.median(r.stats["learner_samples_per_sec"] for r in timed)
    # Wall clock from the last warm-up report to the last one: the next batch is handed over as soon as the slots
    # come back, so the learner is the bottleneck and this is its steady pace, batch copies and sharding included.
    wall = samples * len(timed) / (run.arrivals[-1] - run.arrivals[args.warmup - 1])
    profiles = [line.split("] INFO ", 1)[-1] for line in run.log.splitlines() if " profile: " in line]
    return rate, wall, profiles


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world_sizes", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--repeats", type=int, default=3, help="runs per world size, alternating their order")
    parser.add_argument("--hidden", type=int, nargs="+", default=[512, 512])
    parser.add_argument("--iterations", type=int, default=12)
    parser.add_argument("--warmup", type=int, default=2, help="iterations not timed (at least 1)")
    parser.add_argument("--rollout", type=int, default=64)
    parser.add_argument("--batch_size", type=int, default=1024)
    parser.add_argument("--num_batches_per_epoch", type=int, default=4)
    parser.add_argument("--num_epochs", type=int, default=2)
    parser.add_argument("--with_vtrace", action="store_true", help="V-trace minibatches of whole trajectories")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    samples = args.batch_size * args.num_batches_per_epoch
    print(
        f"learner alone: MLP {'x'.join(map(str, args.hidden))}, obs 17, actions 6, {samples} steps per iteration "
        f"({args.num_batches_per_epoch} x {args.batch_size}, {args.num_epochs} epochs, "
        f"{'V-trace' if args.with_vtrace else 'GAE'}), {args.iterations} iterations ({args.warmup} warm-up), "
        f"{len(os.sched_getaffinity(0))} cores, device {args.device}, torch {torch.__version__}"
    )
    rates: dict[int, list[float]] = {g: [] for g in args.world_sizes}
    walls: dict[int, list[float]] = {g: [] for g in args.world_sizes}
    for repeat in range(args.repeats):
        order = args.world_sizes if repeat % 2 == 0 else args.world_sizes[::-1]
        for size in order:
            other = foreign_cpu()
            rate, wall, profiles = measure(args, size)
            rates[size].append(rate)
            walls[size].append(wall)
            print(
                f"repeat {repeat} G={size}: learner samples/s {rate:,.0f}, wall {wall:,.0f}/s "
                f"(other processes used {other:.2f} cores just before)",
                flush=True,
            )
            for profile in profiles:
                print(f"    {profile}")
    base = args.world_sizes[0]
    for size in args.world_sizes:
        print(f"G={size}: learner samples/s {summary(rates[size])}; wall samples/s {summary(walls[size])}")
        if size != base:
            ratio = [r / b for r, b in zip(rates[size], rates[base], strict=True)]
            wall_ratio = [r / b for r, b in zip(walls[size], walls[base], strict=True)]
            print(
                f"G={size} / G={base} per repeat: learner {statistics.median(ratio):.2f}x "
                f"(min {min(ratio):.2f}, max {max(ratio):.2f}), wall {statistics.median(wall_ratio):.2f}x "
                f"(min {min(wall_ratio):.2f}, max {max(wall_ratio):.2f})"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
