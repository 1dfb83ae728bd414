"""Bytes of the shared trajectory tensors for an Atari-like run, with the observations stored as uint8 (what the
engine does for uint8 frames, appo/protocol/buffers.py obs_dtype) against float32 (what it did before): computed
from `trajectory_spec` and the run's slot count (`derive`), as `allocate_trajectories` would allocate them, without
allocating anything.

    python benchmarks/trajectory_memory.py [--workers=16] [--envs=8] [--rollout=128] [--algo=appo]

Observations Box(0, 255, (4, 84, 84), uint8) (four stacked 84x84 grey frames), actions Discrete(6). `--algo=sac` adds
final_obs (and its step_failed marker), a second observation-sized tensor."""

from __future__ import annotations

import argparse
import sys

import gymnasium as gym
import numpy as np

from appo.config.cfg import merge_cfg
from appo.config.derive import derive
from appo.protocol.buffers import trajectory_spec

FRAMES = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
ACTIONS = gym.spaces.Discrete(6)


def table(cfg, obs_space: gym.Space) -> dict[str, int]:
    """Bytes of each trajectory tensor of a run of `cfg` with observations `obs_space`."""
    slots = derive(cfg).num_slots
    spec = trajectory_spec(cfg, obs_space, ACTIONS)
    return {name: slots * int(np.prod(s.shape)) * s.dtype.itemsize for name, s in spec.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--envs", type=int, default=8, help="envs per worker")
    parser.add_argument("--rollout", type=int, default=128)
    parser.add_argument("--algo", default="appo")
    args = parser.parse_args(argv)
    flags = {"num_workers": args.workers, "num_envs_per_worker": args.envs, "rollout": args.rollout}
    flags["batch_size"] = args.workers * args.envs * args.rollout  # one iteration: every env's rollout
    cfg = merge_cfg({"algo": args.algo, "env": "CartPole-v1", **flags}, None)  # an env without a preset
    as_floats = gym.spaces.Box(0.0, 255.0, FRAMES.shape, np.float32)
    uint8, float32 = table(cfg, FRAMES), table(cfg, as_floats)
    mib = 2.0**20
    print(
        f"{args.algo}: {args.workers} workers x {args.envs} envs, rollout {args.rollout}, "
        f"{derive(cfg).num_slots} slots; obs {FRAMES.shape}, {ACTIONS}"
    )
    print(f"{'tensor':16s} {'uint8 obs MiB':>14s} {'float32 obs MiB':>16s}")
    for name in uint8:
        print(f"{name:16s} {uint8[name] / mib:14.1f} {float32[name] / mib:16.1f}")
    total_u, total_f = sum(uint8.values()), sum(float32.values())
    print(f"{'total':16s} {total_u / mib:14.1f} {total_f / mib:16.1f}  ({total_f / total_u:.2f}x less with uint8)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
