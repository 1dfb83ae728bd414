"""Multi-agent benchmarks: throughput against the single-agent engine, and self-play learning on paddle_duel.

    python benchmarks/multi_agent.py throughput [--repeats 3] [--seconds 40] [--warmup 15] [extra train_appo flags]
    python benchmarks/multi_agent.py selfplay [--seeds 0 1 2] [--minutes 25] [--games 200] [extra train_appo flags]

throughput: training agent steps per second (perf/fps: every row of the trajectory tensors is an agent) of
paddle_duel's two agents (one game step moves both) against its single-agent twin, PaddleDuelVsScripted (the same
game step, one learning agent against the scripted tracker), with the same flags, runs alternating, medians of
`--repeats`. The ratio is what the multi-agent path keeps of the single-agent engine's rate per agent step.

selfplay: for each seed, train paddle_duel by self-play with a pool of past selves for `--minutes`, then play the
final policy against the scripted tracker for `--games` games (deterministic actions, alternating sides; the
evaluation enjoy.py and `appo.load_policy(...).evaluate` run) and report its win rate; with its win and draw rates
against its pool (selfplay/pool_win_rate, selfplay/pool_draw_rate) early and late in the run. Prints a table; the
runs stay under --out for enjoy.py.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from throughput import appo_fps  # noqa: E402

SINGLE = "appo.envs.paddle_duel:PaddleDuelVsScripted"
# Self-play settings: the engine's defaults but a larger batch, two epochs, a higher learning rate and more
# exploration, and a pool of 8 past selves met in half the games.
SELFPLAY_FLAGS = [
    "--num_workers=2",
    "--num_envs_per_worker=8",
    "--rollout=32",
    "--batch_size=1024",
    "--num_epochs=2",
    "--num_batches_per_epoch=2",
    "--learning_rate=3e-4",
    "--exploration_loss_coeff=0.01",
    "--selfplay_pool=8",
    "--selfplay_snapshot_every=250",
    "--selfplay_pool_prob=0.5",
]


def throughput(args: argparse.Namespace, extra: list[str]) -> None:
    rates: dict[str, list[float]] = {"paddle_duel (2 agents)": [], "single-agent twin": []}
    for _ in range(args.repeats):
        rates["paddle_duel (2 agents)"].append(appo_fps("paddle_duel", args.seconds, args.warmup, extra, False))
        rates["single-agent twin"].append(appo_fps(SINGLE, args.seconds, args.warmup, extra, False))
    print("| env | training agent steps/s, median (min-max) |")
    print("|---|---|")
    for name, values in rates.items():
        print(f"| {name} | {statistics.median(values):.0f} ({min(values):.0f}-{max(values):.0f}) |")
    multi, single = (statistics.median(v) for v in rates.values())
    print(f"ratio (2 agents / single agent, per agent step): {multi / single:.2f}")


def early_and_late(run: Path, tag: str) -> tuple[float, float]:
    """Policy 0's `tag` averaged over the run's first and last tenth of summaries (NaN where it has none)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run / "summaries" / "0"), size_guidance={"scalars": 0})
    acc.Reload()
    if tag not in acc.Tags()["scalars"]:
        return float("nan"), float("nan")
    events = acc.Scalars(tag)
    tenth = max(len(events) // 10, 1)
    return statistics.mean(e.value for e in events[:tenth]), statistics.mean(e.value for e in events[-tenth:])


def selfplay(args: argparse.Namespace, extra: list[str]) -> None:
    import appo

    out = args.out or Path(tempfile.mkdtemp(prefix="appo_selfplay_"))
    rows = []
    for seed in args.seeds:
        name = f"paddle_duel_s{seed}"
        cmd = [sys.executable, "train_appo.py", "--env=paddle_duel", f"--experiment={name}", f"--train_dir={out}"]
        cmd += [f"--seed={seed}", f"--train_for_seconds={args.minutes * 60}", *SELFPLAY_FLAGS, *extra]
        subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        policy = appo.load_policy(out / name)
        returns = policy.evaluate(episodes=args.games, seed=100_000)
        wins = sum(r > 0 for r in returns) / len(returns)
        pool = [early_and_late(out / name, f"selfplay/pool_{what}") for what in ("win_rate", "draw_rate")]
        rows.append((seed, wins, *pool[0], *pool[1]))
        print(f"seed {seed}: {wins:.1%} of {args.games} games won against the tracker", flush=True)
    print(f"\nruns: {out}\n")
    print("| seed | win rate vs tracker | against the pool: win rate, first tenth -> last | draw rate, the same |")
    print("|---|---|---|---|")
    for seed, wins, early, late, draws_early, draws_late in rows:
        print(f"| {seed} | {wins:.1%} | {early:.2f} -> {late:.2f} | {draws_early:.2f} -> {draws_late:.2f} |")
    print(f"median win rate: {statistics.median(r[1] for r in rows):.1%} ({args.minutes} min per run)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="what", required=True)
    tp = sub.add_parser("throughput")
    tp.add_argument("--repeats", type=int, default=3)
    tp.add_argument("--seconds", type=float, default=40.0)
    tp.add_argument("--warmup", type=float, default=15.0)
    sp = sub.add_parser("selfplay")
    sp.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    sp.add_argument("--minutes", type=float, default=25.0)
    sp.add_argument("--games", type=int, default=200)
    sp.add_argument("--out", type=Path, default=None)
    args, extra = parser.parse_known_args()
    (throughput if args.what == "throughput" else selfplay)(args, extra)
    return 0


if __name__ == "__main__":
    sys.exit(main())
