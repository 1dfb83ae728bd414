"""The RL^2 paper's Tables 1 and 2 (Duan et al. 2016; issue 35): this project's baselines beside the paper's.

    python benchmarks/rl2_tables.py --tasks 500 --seed 0

For every row (bandits: n pulls, k arms; tabular MDPs: n episodes of 10 steps, 10 states, 5 actions) it draws the
held-out test tasks a run with `--seed` and `--num_test_tasks=--tasks` meta-tests on (envs.tasks.task_split with
no train tasks: the test stream does not depend on the number of train tasks), computes the baselines of
envs/meta_baselines.py on them (one trial per task) and prints each beside the paper's figure. UCB1 is Auer
et al.'s with c = sqrt(2) (untuned); Gittins is Brezzi & Lai's approximation with the discount
1 - 1 / (pulls left): see envs/meta_baselines.py.

Not done yet (left for later, issue 35): training RL^2-APPO and MAML-TRPO on a chosen row and printing their
meta-test trial return (`meta_test_sampled/trial_return`) in the same table, with wall time and env steps."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from envs import make_env  # noqa: E402
from envs import meta_baselines as mb  # noqa: E402
from envs.tasks import task_split  # noqa: E402

# (n, k) -> the paper's Random, Gittins, TS, UCB1, RL^2 (Table 1, as quoted in issue 35).
PAPER_BANDITS = {
    (10, 5): (5.0, 6.6, 5.7, 6.7, 6.7),
    (10, 10): (5.0, 6.6, 5.5, 6.7, 6.7),
    (100, 5): (49.9, 78.3, 74.7, 78.0, 78.7),
    (100, 10): (49.9, 82.8, 76.7, 82.4, 83.5),
    (500, 5): (249.8, 405.8, 402.0, 405.8, 401.6),
}
# n -> the paper's Random, PSRL, UCRL2, RL^2 (Table 2: 10 states, 5 actions, 10-step episodes).
PAPER_MDPS = {10: (100.1, 138.1, 146.6, 156.2), 25: (250.2, 408.8, 424.1, 445.7), 50: (499.7, 904.4, 918.9, 936.1)}


def bandit_rows(num_tasks: int, seed: int) -> None:
    print("bandits (Bernoulli, p ~ U[0, 1]): ours / paper")
    print(f"{'n':>4} {'k':>3} | {'Random':>14} | {'Gittins':>14} | {'TS':>14} | {'UCB1':>14} | paper RL^2")
    policies = (mb.bandit_random, mb.bandit_gittins, mb.bandit_thompson, mb.bandit_ucb1)
    for (n, k), paper in PAPER_BANDITS.items():
        _, tasks = task_split(make_env("bandit", num_arms=k), 0, num_tasks, seed)
        ours = [policy(tasks, n, seed) for policy in policies]
        cells = " | ".join(f"{o:6.1f} / {p:5.1f}" for o, p in zip(ours, paper, strict=False))
        print(f"{n:>4} {k:>3} | {cells} | {paper[-1]:.1f}", flush=True)


def mdp_rows(num_tasks: int, seed: int) -> None:
    print("tabular MDPs (10 states, 5 actions, 10-step episodes): ours / paper")
    print(f"{'n':>4} | {'Random':>14} | {'PSRL':>14} | paper UCRL2 | paper RL^2")
    _, tasks = task_split(make_env("tabular_mdp"), 0, num_tasks, seed)
    for n, paper in PAPER_MDPS.items():
        ours = (mb.mdp_random(tasks, n, seed=seed), mb.mdp_psrl(tasks, n, seed=seed))
        cells = " | ".join(f"{o:6.1f} / {p:5.1f}" for o, p in zip(ours, paper, strict=False))
        print(f"{n:>4} | {cells} | {paper[2]:11.1f} | {paper[3]:.1f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=500, help="held-out test tasks per row")
    parser.add_argument("--seed", type=int, default=0, help="the run seed whose test tasks are used")
    args = parser.parse_args()
    start = time.time()
    bandit_rows(args.tasks, args.seed)
    print()
    mdp_rows(args.tasks, args.seed)
    print(f"\n{args.tasks} tasks per row, seed {args.seed}, {time.time() - start:.1f} s")


if __name__ == "__main__":
    main()
