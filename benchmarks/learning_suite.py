"""Learning suite: train a list of envs x seeds to a step budget and report what a user reads.

    python benchmarks/learning_suite.py [--envs HalfCheetah-v5 Hopper-v5 ...] [--seeds 0 1 2]
        [--env_steps 1000000] [--parallel 1] [--out DIR] [extra train_appo flags...]

Each run is `train_appo.py --env=E --seed=S --train_for_env_steps=B` (plus the extra flags), one after the
other or `--parallel` at a time (each with the run's own `--num_workers`: on 2 cores, 1 at a time with 2
workers is what the issue's figures mean). When all are done it writes, under --out:
- `suite.md`: one row per env: final training return (mean of the last 100 episodes, the run's
  `episode/return_mean` at its end, with the policy's noise) as mean, std, min and median over seeds; the median
  of the final policy's deterministic evaluation (--eval_episodes episodes of the last checkpoint, played as
  enjoy.py plays them, `appo.load_policy(...).evaluate`) and the same for the best checkpoint by training
  return (what Sample Factory's published figures are); the steps reached; the wall time per run; and the public
  references (CleanRL's PPO at 1M steps, MuJoCo v4, and at 10M on Atari; Sample Factory 2's APPO at 10M, its
  published models' best evaluation);
- `<env>.png`: every seed's curve against env steps (thin) and the mean over seeds with a min-max band;
- `runs/`: the runs themselves (tensorboard, checkpoints, logs), for `python -m appo.tools.plot` and enjoy.py.
The table is also printed. A run that fails is reported as failed with its exit status (its log is in its
run folder), and the script exits non-zero.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import NamedTuple

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from appo.protocol.processes import stop_signals_unblocked  # noqa: E402
from appo.tools.plot import load_events, scalar_series  # noqa: E402

DEFAULT_ENVS = ["HalfCheetah-v5", "Hopper-v5", "Walker2d-v5", "Ant-v5", "Humanoid-v5", "InvertedPendulum-v5"]
TAG = "episode/return_mean"

# CleanRL's PPO (ppo_continuous_action.py) at 1M env steps, MuJoCo v4, mean +- std over its seeds: the
# reference of docs/results.md's MuJoCo at 1M env steps. Ant: not in that table.
CLEANRL_1M = {
    "HalfCheetah": (1443, 46),
    "Walker2d": (2288, 572),
    "Hopper": (2383, 272),
    "Humanoid": (716, 49),
    "InvertedPendulum": (963, 22),
}


# CleanRL's ppo_atari.py at 10M agent steps (40M frames), 3 seeds, mean +- std (its docs' table).
CLEANRL_ATARI_10M = {
    "atari_pong": (20.36, 0.20),
    "atari_breakout": (414.66, 28.09),
    "atari_beam_rider": (1915.93, 484.58),
}


# Sample Factory 2's APPO at 10M env steps, MuJoCo v4: its published models (docs/results.md, MuJoCo at 10M env steps).
SF2_10M = {"Ant": 5876, "HalfCheetah": 6263, "Humanoid": 5439, "Walker2d": 5488, "Hopper": 2793}


class Run(NamedTuple):
    env: str
    seed: int
    folder: Path
    status: int
    wall: float


class Result(NamedTuple):
    run: Run
    steps: np.ndarray
    values: np.ndarray
    evaluation: float = float("nan")  # mean of the final policy's deterministic episodes
    best_evaluation: float = float("nan")  # the same for the best checkpoint (by training return), SF2's measure

    @property
    def final(self) -> float:
        return float(self.values[-1]) if len(self.values) else float("nan")


def run_name(env: str, seed: int) -> str:
    return f"{env.replace(':', '_').replace('/', '_')}_s{seed}"


def launch(env: str, seed: int, env_steps: int, train_dir: Path, extra: list[str]) -> subprocess.Popen:
    cmd = [sys.executable, "train_appo.py", f"--env={env}", f"--seed={seed}", f"--experiment={run_name(env, seed)}"]
    cmd += [f"--train_dir={train_dir}", f"--train_for_env_steps={env_steps}", "--report_interval=10", *extra]
    train_dir.mkdir(parents=True, exist_ok=True)
    log = open(train_dir / f"{run_name(env, seed)}.out", "w")  # noqa: SIM115 - closed with the process
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    proc.log = log  # type: ignore[attr-defined]
    return proc


def run_all(jobs: list[tuple[str, int]], env_steps: int, train_dir: Path, extra: list[str], parallel: int) -> list[Run]:
    """Every (env, seed) job, `parallel` at a time; on Ctrl-C the running ones are stopped (each stops its
    own processes on SIGINT) before the interrupt goes on. SIGINT is taken back first where it was ignored (a
    suite started with `cmd &` or nohup inherits it so), or a Ctrl-C would never reach this loop."""
    pending, running, done = list(jobs), {}, []
    with stop_signals_unblocked():
        try:
            while pending or running:
                while pending and len(running) < parallel:
                    env, seed = pending.pop(0)
                    running[(env, seed)] = (launch(env, seed, env_steps, train_dir, extra), time.monotonic())
                    print(f"started {env} seed {seed}", flush=True)
                time.sleep(1.0)
                for key, (proc, start) in list(running.items()):
                    if proc.poll() is None:
                        continue
                    proc.log.close()
                    del running[key]
                    wall = time.monotonic() - start
                    done.append(Run(key[0], key[1], train_dir / run_name(*key), proc.returncode, wall))
                    print(f"finished {key[0]} seed {key[1]}: exit {proc.returncode}, {wall:.0f} s", flush=True)
        finally:
            for proc, _ in running.values():
                proc.send_signal(2)  # SIGINT: the driver's orderly shutdown
            for proc, _ in running.values():
                try:
                    proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
                proc.log.close()
    return done


def read(run: Run, eval_episodes: int) -> Result:
    data = None
    summaries = run.folder / "summaries" / "0"
    if summaries.is_dir():
        data = scalar_series(load_events(summaries), TAG)
    if data is None:
        return Result(run, np.zeros(0), np.zeros(0))
    steps, _, values = data
    if run.status != 0:
        return Result(run, steps, values)
    return Result(run, steps, values, evaluate(run, eval_episodes), evaluate(run, eval_episodes, "best"))


def evaluate(run: Run, episodes: int, checkpoint: str = "latest") -> float:
    """A checkpoint's deterministic episodes (the final one, or the best by training return: what Sample Factory
    publishes), as enjoy.py plays them (seeded apart from training's)."""
    if episodes <= 0:
        return float("nan")
    from appo.api import load_policy

    returns = load_policy(run.folder, checkpoint=checkpoint).evaluate(episodes=episodes, seed=10_000 + run.seed)
    return float(np.mean(returns))


def reference(env: str) -> str:
    if env in CLEANRL_ATARI_10M:
        mean, std = CLEANRL_ATARI_10M[env]
        return f"{mean:,} +- {std} (10M)"
    ref = CLEANRL_1M.get(env.split("-")[0])
    return f"{ref[0]:,} +- {ref[1]}" if ref else ""


def reference_10m(env: str) -> str:
    ref = SF2_10M.get(env.split("-")[0])
    return f"{ref:,}" if ref else ""


def table(results: list[Result], env_steps: int) -> str:
    lines = [
        f"Final training return (last 100 episodes, with the policy's noise) at {env_steps:,} env steps, over "
        "seeds; eval: the final policy's deterministic episodes (median over seeds; by seed in the last column); "
        "best eval: the same for the best checkpoint by training return (Sample Factory's published measure).",
        "",
        "| env | seeds | mean | std | min | median | eval median | best eval median | steps reached "
        "| wall per run (s) | CleanRL PPO (1M; Atari 10M) | SF2 APPO at 10M | by seed (train ; eval ; best eval) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for env in dict.fromkeys(r.run.env for r in results):
        mine = [r for r in results if r.run.env == env]
        good = [r for r in mine if r.run.status == 0 and len(r.values)]
        failed = [f"seed {r.run.seed} failed (exit {r.run.status})" for r in mine if r not in good]
        finals = [r.final for r in good]
        walls = [r.run.wall for r in good]
        if finals:
            std = statistics.stdev(finals) if len(finals) > 1 else 0.0
            cells = [f"{statistics.mean(finals):,.0f}", f"{std:,.0f}", f"{min(finals):,.0f}"]
            cells += [f"{statistics.median(finals):,.0f}", f"{statistics.median(r.evaluation for r in good):,.0f}"]
            cells += [f"{statistics.median(r.best_evaluation for r in good):,.0f}"]
            cells += [f"{min(int(r.steps[-1]) for r in good):,}", f"{statistics.median(walls):.0f}"]
        else:
            cells = ["-"] * 8
        seeds = ", ".join(str(r.run.seed) for r in good) + (f" ({'; '.join(failed)})" if failed else "")
        by_seed = " ; ".join(
            " / ".join(f"{value:,.0f}" for value in values)
            for values in ([r.final for r in good], [r.evaluation for r in good], [r.best_evaluation for r in good])
        )
        refs = f" | {reference(env)} | {reference_10m(env)} | "
        lines.append(f"| {env} | {seeds} | " + " | ".join(cells) + refs + f"{by_seed} |")
    return "\n".join(lines) + "\n"


def plot_env(env: str, results: list[Result], out: Path) -> None:
    """Each seed thin; the mean over seeds on a common grid of env steps, with the min-max band."""
    curves = [r for r in results if r.run.env == env and len(r.values) > 1]
    if not curves:
        return
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7.0, 4.5), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    # Where every seed has a value: from the latest first summary to the earliest last one.
    grid = np.linspace(max(float(r.steps[0]) for r in curves), min(float(r.steps[-1]) for r in curves), 200)
    on_grid = np.stack([np.interp(grid, r.steps, r.values) for r in curves])
    for r in curves:
        ax.plot(r.steps, r.values, linewidth=0.7, alpha=0.6, label=f"seed {r.run.seed}")
    ax.fill_between(grid, on_grid.min(axis=0), on_grid.max(axis=0), alpha=0.2, label="min-max")
    ax.plot(grid, on_grid.mean(axis=0), linewidth=2.0, color="black", label="mean")
    ax.set_title(env)
    ax.set_xlabel("env steps")
    ax.set_ylabel(f"{TAG} (last 100 episodes)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    print(f"wrote {out}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--envs", nargs="+", default=DEFAULT_ENVS)
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--env_steps", type=int, default=1_000_000)
    parser.add_argument("--parallel", type=int, default=1, help="runs at a time (each with its own workers)")
    parser.add_argument("--out", type=Path, default=Path("train_dir") / "learning_suite")
    parser.add_argument("--eval_episodes", type=int, default=10, help="final deterministic episodes per run (0: none)")
    args, extra = parser.parse_known_args(argv)
    if args.parallel < 1:
        parser.error(f"--parallel={args.parallel}: must be >= 1")
    if args.env_steps < 1:
        parser.error(f"--env_steps={args.env_steps}: must be >= 1")
    out = args.out.resolve()
    jobs = [(env, seed) for env in args.envs for seed in args.seeds]
    runs = run_all(jobs, args.env_steps, out / "runs", extra, args.parallel)
    results = [read(run, args.eval_episodes) for run in sorted(runs, key=lambda r: (args.envs.index(r.env), r.seed))]
    text = table(results, args.env_steps)
    if extra:
        text += f"\nExtra flags: `{' '.join(extra)}`\n"
    (out / "suite.md").write_text(text)
    print(text)
    for env in args.envs:
        plot_env(env, results, out / f"{env.replace(':', '_').replace('/', '_')}.png")
    return 0 if all(r.run.status == 0 and len(r.values) for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
