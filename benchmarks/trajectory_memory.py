"""Bytes of the shared trajectory tensors for an Atari-like run, with the observations stored as uint8 (what the
engine does for uint8 frames, appo/protocol/buffers.py obs_dtype) against float32 (what it did before): computed
from `trajectory_spec` and the run's slot count (`derive`), as `allocate_trajectories` would allocate them, without
allocating anything.

    python benchmarks/trajectory_memory.py [--workers=16] [--envs=8] [--rollout=128] [--algo=appo]

Observations Box(0, 255, (4, 84, 84), uint8) (four stacked 84x84 grey frames), actions Discrete(6). `--algo=sac` adds
final_obs (and its step_failed marker), a second observation-sized tensor.

    python benchmarks/trajectory_memory.py --team [--workers=16] [--envs=64]

A multi-agent run's tensors with a centralised value (--value_input=team, envs/multi_agent/team_value.py: every
agent's observation and the agent's one-hot beside each row's own observation) against local values: mpe2's
simple_spread_v3 (three agents, 18 floats each) with its preset (MAPPO's recipe, rollout 25), per actor worker and
for the run."""

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


def team_tables(workers: int, envs: int) -> None:
    """Print the spread run's tensors, local against team values (see the module docstring)."""
    from appo.envs import make_env

    spread = "mpe2.simple_spread_v3:parallel_env"
    mib = 2.0**20
    totals = {}
    for value_input in ("local", "team"):
        env = make_env(spread, value_input=value_input)
        flags = {"env": spread, "num_workers": workers, "num_envs_per_worker": envs, "value_input": value_input}
        cfg = merge_cfg(flags, None)  # the env's preset: rollout 25
        d = derive(cfg, env.num_agents, multi_agent=True)
        spec = trajectory_spec(cfg, env.observation_space, env.action_space, multi_agent=True)
        sizes = {name: d.num_slots * int(np.prod(s.shape)) * s.dtype.itemsize for name, s in spec.items()}
        totals[value_input] = sizes
        env.close()
    local, team = totals["local"], totals["team"]
    print(f"simple_spread_v3: {workers} workers x {envs} envs x 3 agents, rollout 25 (its preset)")
    print(f"{'tensor':16s} {'local MiB':>10s} {'team MiB':>10s}")
    for name in team:
        print(f"{name:16s} {local.get(name, 0) / mib:10.2f} {team[name] / mib:10.2f}")
    lt, tt = sum(local.values()), sum(team.values())
    print(f"{'total':16s} {lt / mib:10.2f} {tt / mib:10.2f}  ({tt / lt:.2f}x)")
    print(f"{'per worker':16s} {lt / workers / mib:10.2f} {tt / workers / mib:10.2f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--envs", type=int, default=None, help="envs per worker (default 8; with --team 64)")
    parser.add_argument("--rollout", type=int, default=128)
    parser.add_argument("--algo", default="appo")
    parser.add_argument("--team", action="store_true", help="a spread run's tensors with a centralised value")
    args = parser.parse_args(argv)
    if args.team:
        team_tables(args.workers, args.envs or 64)
        return 0
    args.envs = args.envs or 8
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
