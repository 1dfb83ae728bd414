"""SAC gradient updates per second on this machine, in one process (as the learner runs them: torch on one
thread unless --threads): the replay filled with random transitions of the env's shapes, then --updates timed
updates of --batch_size. Prints the median of --repeats.

    python benchmarks/sac_updates.py --env=HalfCheetah-v5 --layers 256 256
"""

from __future__ import annotations

import argparse
import statistics
import time

import gymnasium as gym
import torch

from appo.algorithms.base import NonFiniteGuard
from appo.algorithms.sac.algorithm import SAC
from appo.config.cfg import merge_cfg
from appo.config.derive import derive
from appo.models.registry import make_model


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--env", default="HalfCheetah-v5")
    parser.add_argument("--layers", type=int, nargs="+", default=[256, 256])
    parser.add_argument("--batch_size", type=int, default=256)
    parser.add_argument("--updates", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    layers = {"actor_mlp_layers": args.layers, "critic_mlp_layers": args.layers}
    cfg = merge_cfg({"algo": "sac", "env": args.env, "batch_size": args.batch_size, **layers}, None)
    env = gym.make(args.env)
    model = make_model(cfg, env.observation_space, env.action_space)
    sac = SAC(cfg, derive(cfg), model, "cpu", NonFiniteGuard(0))
    n, obs_dim, act_dim = 10_000, env.observation_space.shape[0], env.action_space.shape[0]
    sac.replay.add(
        {
            "obs": torch.randn(n, obs_dim),
            "actions": torch.rand(n, act_dim) * 2 - 1,
            "rewards": torch.randn(n),
            "next_obs": torch.randn(n, obs_dim),
            "terminated": torch.zeros(n),
        }
    )
    for _ in range(20):  # warm-up
        sac.step(sac.replay.sample(args.batch_size))
    rates = []
    for _ in range(args.repeats):
        began = time.perf_counter()
        for _ in range(args.updates):
            sac.step(sac.replay.sample(args.batch_size))
        rates.append(args.updates / (time.perf_counter() - began))
    median = statistics.median(rates)
    print(
        f"{args.env} layers {args.layers} batch {args.batch_size} threads {args.threads}: "
        f"{median:.0f} updates/s ({1000 / median:.1f} ms/update; repeats {', '.join(f'{r:.0f}' for r in rates)})"
    )


if __name__ == "__main__":
    main()
