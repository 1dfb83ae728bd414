"""The RL^2 paper's Tables 1 and 2 (Duan et al. 2016): this project's baselines beside the paper's.

    python benchmarks/rl2_tables.py --tasks 500 --seed 0

For every row (bandits: n pulls, k arms; tabular MDPs: n episodes of 10 steps, 10 states, 5 actions) it draws the
held-out test tasks a run with `--seed` and `--num_test_tasks=--tasks` meta-tests on (envs.tasks.task_split with no
train tasks: the test stream does not depend on the number of train tasks), computes the baselines of
envs/meta/meta_baselines.py on them (one trial per task) and prints each beside the paper's figure. UCB1 is Auer et
al.'s with c = sqrt(2) (untuned), and beside it with c tuned on as many training tasks of the same run
(meta_baselines.tuned_ucb1_c: never on the tasks it is judged on); Gittins is Brezzi & Lai's approximation with the
discount 1 - 1 / (pulls left); the MDP rows add two columns the paper lacks: the certainty-equivalent planner (the
optimal policy of the posterior means, replanned every episode: a model-based agent with a perfect memory of the
trial) and the oracle told the task: see envs/meta/meta_baselines.py.

With `--train ROW` (bandit:N:K, gaussian_bandit:N:K or mdp:N) it trains RL^2-APPO on that row instead, one run per
seed, `--parallel` at a time, each for `--minutes` of wall time, with the family's preset (envs/presets.py) and
`--num_test_tasks=--tasks`:

    python benchmarks/rl2_tables.py --train bandit:10:5 --seeds 0 1 2 --minutes 15 --tasks 500 [extra train flags]

and prints, per seed, the run's meta-test trial return with sampled actions (the paper's measure; the mean of its
last 3 meta-tests) and deterministic, beside the baselines computed on the same run's test tasks and the paper's
RL^2, with env steps and wall time; then the medians over seeds.

With `--algo maml_trpo` it trains MAML-TRPO on the row instead (the bandit settings of pytorch-maml-rl and DH-MAML,
MAML_FLAGS: a [32, 32] relu MLP, gamma 0.95, fast_lr 0.5, 20 tasks a meta-batch; on the bandits a tenth of their
TRPO step, MAML_BANDIT_FLAGS), adapting on one trial's worth of
experience (`--fast_batch_size=N` episodes: N pulls, or N episodes of an MDP), and prints N times its mean episode
return on the held-out tasks before and after the adaptation step (`meta_test/return_step0`, `..._step1`: sampled
actions; the mean of its last 3 meta-tests): what a trial of N episodes would pay if every episode paid what one
pays before, or after, adapting on N others. RL^2's trial return includes its own exploration; MAML's "after" figure
has had a whole trial's experience first, so it flatters MAML, and its "before" figure is a policy that cannot
adapt."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from appo.envs import make_env  # noqa: E402
from appo.envs.meta import meta_baselines as mb  # noqa: E402
from appo.envs.meta.tasks import task_split  # noqa: E402

# (n, k) -> the paper's Random, Gittins, TS, UCB1, RL^2 (the paper's Table 1).
PAPER_BANDITS = {
    (10, 5): (5.0, 6.6, 5.7, 6.7, 6.7),
    (10, 10): (5.0, 6.6, 5.5, 6.7, 6.7),
    (100, 5): (49.9, 78.3, 74.7, 78.0, 78.7),
    (100, 10): (49.9, 82.8, 76.7, 82.4, 83.5),
    (500, 5): (249.8, 405.8, 402.0, 405.8, 401.6),
}
TRIAL_TAGS = ("meta_test_sampled/trial_return", "meta_test/trial_return")  # RL^2's: the paper's measure, then greedy
# n -> the paper's Random, PSRL, UCRL2, RL^2 (Table 2: 10 states, 5 actions, 10-step episodes).
PAPER_MDPS = {10: (100.1, 138.1, 146.6, 156.2), 25: (250.2, 408.8, 424.1, 445.7), 50: (499.7, 904.4, 918.9, 936.1)}


BANDITS = ("bandit", "gaussian_bandit")  # Bernoulli arms p ~ U[0, 1] (the paper's); N(mu, 1) arms, mu ~ N(0, 1)


def bandit_rows(num_tasks: int, seed: int) -> None:
    print("bandits (Bernoulli, p ~ U[0, 1]): ours / paper")
    head = f"{'n':>4} {'k':>3} | {'Random':>14} | {'Gittins':>14} | {'TS':>14} | {'UCB1':>14} | UCB1 tuned (c)"
    print(f"{head} | paper RL^2")
    policies = (mb.bandit_random, mb.bandit_gittins, mb.bandit_thompson, mb.bandit_ucb1)
    for (n, k), paper in PAPER_BANDITS.items():
        train, tasks = task_split(make_env("bandit", num_arms=k), num_tasks, num_tasks, seed)
        ours = [policy(tasks, n, seed) for policy in policies]
        c = mb.tuned_ucb1_c(train, n, seed)
        cells = " | ".join(f"{o:6.1f} / {p:5.1f}" for o, p in zip(ours, paper, strict=False))
        tuned = f"{mb.bandit_ucb1(tasks, n, seed, c=c):6.1f} ({c:.2f})"
        print(f"{n:>4} {k:>3} | {cells} | {tuned:>14} | {paper[-1]:.1f}", flush=True)


def mdp_rows(num_tasks: int, seed: int) -> None:
    print("tabular MDPs (10 states, 5 actions, 10-step episodes): ours / paper")
    print(f"{'n':>4} | {'Random':>14} | {'PSRL':>14} | paper UCRL2 | paper RL^2 | planner | oracle")
    for n, paper in PAPER_MDPS.items():
        ours = baselines("tabular_mdp", n, 5, num_tasks, seed)
        cells = " | ".join(f"{ours[name]:6.1f} / {p:5.1f}" for name, p in zip(("random", "psrl"), paper, strict=False))
        known = f"{ours['planner']:7.1f} | {ours['oracle']:6.1f}"
        print(f"{n:>4} | {cells} | {paper[2]:11.1f} | {paper[3]:10.1f} | {known}", flush=True)


def parse_row(text: str) -> tuple[str, int, int]:
    """bandit:N:K -> ("bandit", N, K); gaussian_bandit:N:K likewise; mdp:N -> ("tabular_mdp", N, 5)."""
    parts = text.split(":")
    try:
        if parts[0] in BANDITS and len(parts) == 3:
            return parts[0], int(parts[1]), int(parts[2])
        if parts[0] == "mdp" and len(parts) == 2:
            return "tabular_mdp", int(parts[1]), 5
    except ValueError:
        pass
    raise SystemExit(
        f"--train={text}: must be bandit:N:K (e.g. bandit:10:5), gaussian_bandit:N:K or mdp:N (e.g. mdp:10)"
    )


def baselines(env: str, n: int, k: int, tasks_n: int, seed: int) -> dict[str, float]:
    """The row's baselines on the test tasks of a run with `seed` and `--num_test_tasks=tasks_n`."""
    if env in BANDITS:
        train, tasks = task_split(make_env(env, num_arms=k), tasks_n, tasks_n, seed)
        named = {"random": mb.bandit_random, "gittins": mb.bandit_gittins, "ts": mb.bandit_thompson}
        gaussian = env == "gaussian_bandit"
        out = {name: f(tasks, n, seed, gaussian) for name, f in (named | {"ucb1": mb.bandit_ucb1}).items()}
        c = mb.tuned_ucb1_c(train, n, seed, gaussian)  # on training tasks, judged on the held-out ones
        return out | {"ucb1_tuned": mb.bandit_ucb1(tasks, n, seed, gaussian, c)}
    _, tasks = task_split(make_env("tabular_mdp"), 0, tasks_n, seed)
    named = {"random": mb.mdp_random, "psrl": mb.mdp_psrl, "planner": mb.mdp_planner, "oracle": mb.mdp_oracle}
    return {name: f(tasks, n, seed=seed) for name, f in named.items()}


# MAML-TRPO on the table rows (--algo maml_trpo): pytorch-maml-rl's and DH-MAML's bandit configuration.
MAML_FLAGS = [
    "--algo=maml_trpo",
    "--maml_mlp_layers",
    "32",
    "32",
    "--maml_nonlinearity=relu",
    "--gamma=0.95",
    "--fast_lr=0.5",
    "--meta_batch_size=20",
    "--meta_test_steps=1",
    "--meta_test_interval=25",
]
# On the bandits pytorch-maml-rl's TRPO step (max_kl 0.01) lets the meta-policy collapse onto one arm (its policy
# gradient then vanishes); a tenth of it keeps adapting: medians of 3 seeds after adapting 6.04 / 74.52 / 81.58 on
# n=10,k=5 / n=100,k=5 / n=100,k=10, against 5.18 / 59.37 / 58.31 (docs/results.md, MAML-TRPO).
# The MDP row did not collapse and keeps pytorch-maml-rl's step.
MAML_BANDIT_FLAGS = ["--max_kl=0.001"]


def train_row(args: argparse.Namespace, extra: list[str]) -> int:
    import statistics

    from learning_suite import run_all  # noqa: PLC0415 - benchmarks/ beside this script

    from appo.tools.plot import load_events, scalar_series

    env, n, k = parse_row(args.train)
    maml = args.algo == "maml_trpo"
    flags = [f"--num_test_tasks={args.tasks}", f"--train_for_seconds={args.minutes * 60}"]
    flags += [*MAML_FLAGS, f"--fast_batch_size={n}"] if maml else [f"--episodes_per_trial={n}"]
    flags += MAML_BANDIT_FLAGS if maml and env in BANDITS else []
    flags += [f"--num_arms={k}"] if env in BANDITS else []
    # A folder per row: two rows side by side (or one after the other) must not share (or resume) each other's runs.
    folder = args.out / args.algo / args.train.replace(":", "_")
    runs = run_all([(env, s) for s in args.seeds], 10**12, folder, flags + extra, args.parallel)
    paper_rl2 = {"bandit": PAPER_BANDITS.get((n, k), (None,) * 5), "tabular_mdp": PAPER_MDPS.get(n, (None,) * 4)}
    paper = paper_rl2.get(env, (None,))[-1]  # the paper has no Gaussian bandits
    name = "MAML-TRPO (N x episode return before / after adapting on N episodes)" if maml else "RL^2-APPO"
    paper_note = f"paper RL^2: {paper}" if paper is not None else "no paper figure"
    print(f"\n{name} on {args.train} ({args.tasks} held-out tasks, {args.minutes:g} min per run); {paper_note}")
    # (first, second figure, scale): RL^2's sampled and deterministic trial return; MAML's before and after.
    tags = ("meta_test/return_step0", "meta_test/return_step1", n) if maml else (*TRIAL_TAGS, 1)
    labels = ("before", "after") if maml else ("sampled", "deterministic")
    rows = []
    for run in sorted(runs, key=lambda r: r.seed):
        events = load_events(run.folder / "summaries" / "0")
        last = {}
        for tag in (*tags[:2], "maml/return_pre" if maml else "episode/return_mean"):
            series = scalar_series(events, tag)
            last[tag] = (float(series[2][-3:].mean()), int(series[0][-1])) if series else (float("nan"), 0)
        steps = last["maml/return_pre" if maml else "episode/return_mean"][1]
        base = baselines(env, n, k, args.tasks, run.seed)
        rows.append((last[tags[0]][0] * tags[2], last[tags[1]][0] * tags[2], base))
        cells = " ".join(f"{name} {value:.1f}" for name, value in base.items())
        print(
            f"seed {run.seed} (exit {run.status}): {labels[0]} {rows[-1][0]:.2f}, {labels[1]} {rows[-1][1]:.2f} | "
            f"{cells} | {steps:,} env steps, {run.wall:.0f} s",
            flush=True,
        )
    if rows:
        print(
            f"median over seeds: {labels[0]} {statistics.median(r[0] for r in rows):.2f}, {labels[1]} "
            f"{statistics.median(r[1] for r in rows):.2f}; baselines "
            + " ".join(f"{name} {statistics.median(r[2][name] for r in rows):.1f}" for name in rows[0][2])
        )
    return 0 if runs and all(r.status == 0 for r in runs) else 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=500, help="held-out test tasks per row")
    parser.add_argument("--seed", type=int, default=0, help="the run seed whose test tasks are used")
    parser.add_argument(
        "--train", help="train RL^2-APPO (or --algo) on this row: bandit:N:K, gaussian_bandit:N:K or mdp:N"
    )
    parser.add_argument("--algo", choices=("appo", "maml_trpo"), default="appo", help="--train: RL^2-APPO or MAML")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2], help="--train: one run per seed")
    parser.add_argument("--minutes", type=float, default=15.0, help="--train: wall time per run")
    parser.add_argument("--parallel", type=int, default=3, help="--train: runs at a time")
    parser.add_argument("--out", type=Path, default=ROOT / "train_dir" / "rl2_tables", help="--train: runs folders")
    args, extra = parser.parse_known_args()
    if args.train:
        return train_row(args, extra)
    if extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    start = time.time()
    bandit_rows(args.tasks, args.seed)
    print()
    mdp_rows(args.tasks, args.seed)
    print(f"\n{args.tasks} tasks per row, seed {args.seed}, {time.time() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
