"""This engine's SAC update (appo/algorithms/sac/algorithm.py, `SAC.step`) driven by a Stable-Baselines3-style loop in
one
process: one env, act with the newest weights, append the transition, one update per env step after the random
warm-up. It takes the actor workers, the queues and the weight publishing out of the comparison with
Stable-Baselines3 (benchmarks/sac_lunar.py), so what is left is the algorithm. Prints one line per evaluation.

    python benchmarks/sac_single_loop.py [--env LunarLanderContinuous-v3] [--seed 1] [--steps 50000]

Settings as benchmarks/sac_lunar.py: SAC's defaults (256x256 relu, Adam 3e-4, batch 256, tau 0.005, entropy
toward -|A|), 10,000 uniform random steps first, 5 deterministic evaluation episodes every 5,000 env steps. One
torch thread, so two seeds can run side by side on 2 cores.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from appo.algorithms.base import NonFiniteGuard  # noqa: E402
from appo.algorithms.sac.algorithm import SAC  # noqa: E402
from appo.config.cfg import merge_cfg  # noqa: E402
from appo.config.derive import derive
from appo.models.registry import make_model  # noqa: E402

EVAL_EVERY, EVAL_EPISODES, LEARNING_STARTS = 5000, 5, 10_000


def evaluate(model: torch.nn.Module, env: gym.Env, seed: int) -> float:
    returns = []
    for k in range(EVAL_EPISODES):
        obs, _ = env.reset(seed=seed + k)
        done, total = False, 0.0
        while not done:
            with torch.no_grad():
                action = model.act(torch.as_tensor(obs)[None], torch.zeros(1, 1), deterministic=True).actions[0]
            obs, reward, terminated, truncated, _ = env.step(action.numpy())
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
    return float(np.mean(returns))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--env", default="LunarLanderContinuous-v3")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--steps", type=int, default=50_000)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    cfg = merge_cfg({"algo": "sac", "env": args.env, "seed": args.seed}, None)
    env, eval_env = gym.make(args.env), gym.make(args.env)
    model = make_model(cfg, env.observation_space, env.action_space)
    sac = SAC(cfg, derive(cfg), model, "cpu", NonFiniteGuard(0))
    rng = np.random.default_rng(args.seed)
    obs, _ = env.reset(seed=args.seed)
    began = time.time()
    for step in range(1, args.steps + 1):
        if step <= LEARNING_STARTS:
            action = rng.uniform(env.action_space.low, env.action_space.high).astype(np.float32)
        else:
            with torch.no_grad():
                action = model.act(torch.as_tensor(obs)[None], torch.zeros(1, 1)).actions[0].numpy()
        next_obs, reward, terminated, truncated, _ = env.step(action)
        row = {"obs": obs, "actions": action, "rewards": reward, "next_obs": next_obs, "terminated": float(terminated)}
        row = {k: torch.as_tensor(np.asarray(v, np.float32))[None] for k, v in row.items()}
        row["actions"] = model.to_unit(row["actions"])
        sac.replay.add(row)
        obs = env.reset()[0] if terminated or truncated else next_obs
        if step > LEARNING_STARTS:
            sac.step(sac.replay.sample(cfg.batch_size))
        if step % EVAL_EVERY == 0:
            ret = evaluate(model, eval_env, 10_000 + step)
            alpha = float(sac.log_alpha.detach().exp())
            print(f"steps {step} | {time.time() - began:.0f} s | eval {ret:.1f} | alpha {alpha:.3f}", flush=True)


if __name__ == "__main__":
    main()
