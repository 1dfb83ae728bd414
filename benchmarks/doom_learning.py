"""VizDoom learning side by side: appo's seeds and one Sample Factory 2.1.1 run at the same agent steps.

    python benchmarks/doom_learning.py --scenario=basic --agent_steps=500000 --seeds 0 1 2 \\
        --sf_python=SF_VENV/bin/python [--out DIR]
    python benchmarks/doom_learning.py --scenario=duel --agent_steps=4000000 --seeds 0

`--scenario=duel`: doom_duel by self-play against a pool of 8 past selves (--selfplay_pool=8), evaluated every
--eval_every agent steps by 4 games against a built-in bot; the table is its frags per game against the bot
(eval/true_objective) at each evaluation and its win rate against its pool over the first and last tenth of the run.

appo: `train_appo.py --env=doom_<scenario>` with its preset, one seed after the other (benchmarks/learning_suite.py
runs them and reads `episode/return_mean`, the mean of the last 100 episodes, in the game's own units).
Sample Factory: sf_examples.vizdoom.train_vizdoom with its Doom defaults and the same 2 workers x 8 envs, 2 splits,
on the CPU, trained for 4x the agent steps in frames (frame skip 4); its `reward/reward` (the mean of its last
episodes) is in its env's units, which for some scenarios it scales (basic: x0.01, `--sf_reward_scaling`), so the
table divides that scaling out. Where its scenario file pays other rewards than vizdoom's own (the health gathering
scenarios: 0.01 a tic alive and no death penalty, where vizdoom's pays 1 a tic and -100 at death, plus a bonus for
each medkit), its return is not in game units and the engines compare by survival instead: the mean episode length
in tics (Sample Factory's `len/len`, appo's `episode/length_mean` x 4 tics an action). Flags it does not know go to
every appo run (`--policy_init_gain=1`). Prints one row per engine (the final training return, and the final episode
length in tics: appo's median, min and max over seeds), writes `<scenario>.png` with every curve against agent steps
(and `<scenario>_tics.png` with the lengths), and keeps the runs under --out."""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from learning_suite import read, run_all  # noqa: E402

from appo.tools.plot import load_events, scalar_series  # noqa: E402

FRAMESKIP = 4
SF_SCALING = {"basic": 0.01}  # sf_examples/vizdoom/doom/doom_utils.py's reward_scaling where it is not 1
# Scenarios whose Sample Factory .cfg and reward shaping pay other rewards than vizdoom's bundled .cfg (its
# sf_examples/vizdoom/doom/scenarios/health_gathering*.cfg: living_reward 0.01, death_penalty 0; and
# DoomGatheringRewardShaping's +1 a medkit): its returns there are not game units.
SF_OWN_REWARDS = ("health_gathering", "health_gathering_supreme")


Series = tuple[np.ndarray, np.ndarray]


def sf_run(sf_python: str, scenario: str, agent_steps: int, out: Path, seed: int) -> tuple[Series | None, Series]:
    """Sample Factory's run: (agent steps, mean episode return in game units; None where its rewards are its own)
    and (agent steps, mean episode length in tics) of its summaries."""
    folder = out / "sf"
    folder.mkdir(parents=True, exist_ok=True)
    cmd = [sf_python, "-m", "sf_examples.vizdoom.train_vizdoom", f"--env=doom_{scenario}", f"--seed={seed}"]
    cmd += [f"--experiment={scenario}", f"--train_dir={folder}", "--num_workers=2", "--num_envs_per_worker=8"]
    cmd += ["--worker_num_splits=2", "--device=cpu", "--with_wandb=False", "--save_every_sec=100000"]
    cmd += [f"--train_for_env_steps={agent_steps * FRAMESKIP}"]
    with open(folder / f"{scenario}.out", "w") as log:
        # In its own folder (its games write _vizdoom.ini where they run) and session, so that its games go too.
        proc = subprocess.Popen(cmd, cwd=folder, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            proc.wait()
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGINT)
                proc.wait()
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # its leftover games (they ignore gentler signals)
            except ProcessLookupError:
                pass
    return sf_series(folder, scenario)


def sf_series(folder: Path, scenario: str) -> tuple[Series | None, Series]:
    """sf_run's curves, read from the summaries of its run in `folder`."""
    events = load_events(folder / scenario / ".summary" / "0")
    data, lengths = scalar_series(events, "reward/reward"), scalar_series(events, "len/len")
    if data is None or lengths is None:
        raise RuntimeError(f"Sample Factory wrote no reward summaries; its log: {folder / f'{scenario}.out'}")
    tics = (lengths[0] / FRAMESKIP, lengths[2])
    if scenario in SF_OWN_REWARDS:
        return None, tics
    steps, _, values = data
    return (steps / FRAMESKIP, values / SF_SCALING.get(scenario, 1.0)), tics


def appo_tics(run: Any) -> Series | None:
    """(agent steps, mean episode length in tics) of an appo run: its length in actions x the frame skip."""
    data = scalar_series(load_events(run.folder / "summaries" / "0"), "episode/length_mean")
    return None if data is None else (data[0], data[2] * FRAMESKIP)


def duel_row(run: Any) -> str:
    """A duel run's frags per game against the bot at each evaluation and its win rate against its pool, first
    tenth of the run against the last."""
    acc = load_events(run.folder / "summaries" / "0")
    frags = scalar_series(acc, "eval/true_objective")
    wins = scalar_series(acc, "selfplay/pool_win_rate")
    line = f"seed {run.seed} (exit {run.status}, {run.wall:.0f} s): frags per game vs the bot "
    line += " ".join(f"{int(s) // 1000}k:{v:.2f}" for s, v in zip(frags[0], frags[2], strict=True)) if frags else "-"
    if wins is not None and len(wins[2]) >= 10:
        tenth = len(wins[2]) // 10
        line += f" | pool win rate {np.mean(wins[2][:tenth]):.2f} -> {np.mean(wins[2][-tenth:]):.2f}"
    return line


def plot(curves: dict[str, Series], title: str, out: Path, ylabel: str) -> None:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7.0, 4.5), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    for name, (steps, values) in curves.items():
        ax.plot(steps, values, linewidth=1.5 if name.startswith("Sample") else 0.9, label=name)
    ax.set_title(title)
    ax.set_xlabel("agent steps")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    fig.savefig(out, dpi=100)
    print(f"wrote {out}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scenario", default="basic")
    parser.add_argument("--agent_steps", type=int, default=500_000)
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--sf_python", default="", help="Sample Factory 2.1.1's interpreter (empty: appo alone)")
    parser.add_argument("--sf_seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("train_dir") / "doom_learning")
    parser.add_argument("--eval_every", type=int, default=250_000, help="duel: agent steps between evaluations")
    args, extra = parser.parse_known_args()
    env = f"doom_{args.scenario}"
    if args.scenario == "duel":
        extra = ["--selfplay_pool=8", f"--eval_interval={args.eval_every}", "--eval_episodes=4", *extra]
        runs = run_all([(env, seed) for seed in args.seeds], args.agent_steps, args.out / "appo", extra, parallel=1)
        for run in runs:
            print(duel_row(run))
        return 0 if all(run.status == 0 for run in runs) else 1
    runs = run_all([(env, seed) for seed in args.seeds], args.agent_steps, args.out / "appo", extra, parallel=1)
    results = [read(run, eval_episodes=0) for run in runs]
    done = [r for r in results if r.run.status == 0 and len(r.values)]
    curves = {f"appo seed {r.run.seed}": (r.steps, r.values) for r in results if len(r.values)}
    tics = {f"appo seed {r.run.seed}": t for r in results if (t := appo_tics(r.run)) is not None}
    rows = [
        median_row("appo", "return", [r.final for r in done]),
        median_row("appo", "episode length", [tics[f"appo seed {r.run.seed}"][1][-1] for r in done], " tics"),
    ]
    if args.sf_python:
        returns, lengths = sf_run(args.sf_python, args.scenario, args.agent_steps, args.out, args.sf_seed)
        name = f"Sample Factory 2.1.1 (seed {args.sf_seed})"
        if returns is not None:
            curves["Sample Factory 2.1.1"] = returns
            rows.append(f"{name}: return {returns[1][-1]:8.1f}  (at {int(returns[0][-1]):,} steps)")
        else:
            rows.append(f"{name}: return not in game units (its own scenario file's rewards)")
        tics["Sample Factory 2.1.1"] = lengths
        rows.append(f"{name}: episode length {lengths[1][-1]:8.1f} tics  (at {int(lengths[0][-1]):,} steps)")
    print(f"\n{env}: training return (game units) and episode length at {args.agent_steps:,} agent steps")
    print("\n".join(row for row in rows if row))
    title = f"{env}, 2 workers x 8 envs"
    if curves:
        plot(
            curves, title, args.out / f"{args.scenario}.png", "training return (mean of the last episodes, game units)"
        )
    if tics:
        plot(tics, title, args.out / f"{args.scenario}_tics.png", "episode length (mean of the last episodes, tics)")
    return 0 if len(done) == len(args.seeds) else 1


def median_row(engine: str, what: str, finals: list[float], unit: str = "") -> str:
    """`engine`'s median of `what` over seeds with its min and max; empty without a finished seed."""
    if not finals:
        return ""
    median, spread = statistics.median(finals), f"min {min(finals):.1f}, max {max(finals):.1f}"
    return f"{engine} (median of {len(finals)} seeds): {what} {median:8.1f}{unit}  ({spread})"


if __name__ == "__main__":
    sys.exit(main())
