"""Seed and hyperparameter sweeps: every configuration of a grid as its own run, N at a time.

    python -m appo.tools.sweep --grid '{"seed": [0, 1, 2], "learning_rate": [3e-4, 1e-3]}' --max_parallel=2 \\
        -- --env=HalfCheetah-v5 --train_for_env_steps=1000000

Each configuration is an ordinary `train_appo.py` run in `train_dir/<name>/<config>/` (the config's flags as its
experiment name, e.g. `learning_rate=0.001,seed=0`), started as a subprocess with the flags after `--` plus the
config's (a list value as several values: `--actor_mlp_layers 32 32`; in the folder's name `actor_mlp_layers=32+32`,
and any character unsafe in a file name as %XX: `env=ALE%2FPong-v5`). A run that exits 0 having trained its whole
`--train_for_env_steps` (or `--train_for_iterations`) gets `sweep_result.json` (its final return and curve) beside
its cfg.json; running the same sweep again skips those and starts the others again (each resumes from its own
checkpoints), also a run that `--train_for_seconds` (a limit of each session) stopped early. At the end,
`results.md` / `results.json` hold the final return (the last 100 episodes' average the run reported last) per
configuration, mean and std over its seeds, and `curves.png` the return against env steps: the mean over seeds
with a band from the lowest to the highest seed.

With `--backend=ray` (and `--ray_address=auto` on a cluster's head; without it a private Ray instance on this
machine) each configuration is a Ray task that runs on whichever node has `--cpus_per_run` CPUs free, with the
local backend there (appo/tools/sweep_ray.py); the table and PNG are made here from the curves the tasks send back.

Why not Ray Tune: a trial here is a whole multi-process run (learner, actor workers, shared memory, its own
checkpoints and resume), which Tune would have to run inside one of its worker processes without seeing the
resources of its children; what a grid sweep needs on one machine (a bounded pool of subprocesses, skip what is
done) is a few lines, and Ray tasks (not Tune trials) spread the same runs over a cluster. A single run too big
for one node is the other way round: `--backend=ray --ray_address=auto` among the runs' flags spreads its actor
workers over the cluster while the sweep runs locally.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import itertools
import json
import signal
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from appo.protocol.processes import stop_signals_unblocked
from appo.tools.sweep_runs import TAG, LocalRuns, final_return
from appo.utils.paths import budget_reached, cfg_path, write_text_atomic

RESULT_FILE = "sweep_result.json"


def configs(grid: dict[str, list[Any]]) -> list[dict[str, Any]]:
    """Every combination of the grid's values, in the grid's key order."""
    keys = list(grid)
    return [dict(zip(keys, values, strict=True)) for values in itertools.product(*(grid[k] for k in keys))]


def _safe(text: str) -> str:
    """`text` with every character but letters, digits, `.`, `_` and `-` as %XX: a folder name that stays distinct
    (`ALE/Pong-v5` -> `ALE%2FPong-v5`)."""
    return "".join(c if c.isascii() and (c.isalnum() or c in "._-") else f"%{ord(c):02X}" for c in str(text))


def _value_name(value: Any) -> str:
    """A grid value in a run's name: a list's items joined by `+` (as several values on the command line)."""
    if isinstance(value, (list, tuple)):
        return "+".join(_safe(v) for v in value)
    return _safe(value)


def config_name(config: dict[str, Any]) -> str:
    """The run's experiment name: `key=value` pairs, sorted by key, joined by commas; characters that are not safe
    in a file name as %XX, a list's values joined by `+` (e.g. `actor_mlp_layers=32+32,env=ALE%2FPong-v5`)."""
    return ",".join(f"{_safe(k)}={_value_name(config[k])}" for k in sorted(config))


def config_flags(config: dict[str, Any]) -> list[str]:
    """A configuration's command-line flags: a list as several values (`--actor_mlp_layers 32 32`)."""
    from appo.config.flags import flags_to_argv

    return flags_to_argv(config)


def group_name(config: dict[str, Any]) -> str:
    """The configuration less its seed: the runs whose spread is shown as a band."""
    rest = {k: v for k, v in config.items() if k != "seed"}
    return config_name(rest) if rest else "all"


class Sweep:
    def __init__(
        self, name: str, train_dir: Path, grid: dict[str, list[Any]], train_flags: list[str], runs: Any = None
    ) -> None:
        self.dir = train_dir / name
        self.grid, self.train_flags = grid, train_flags
        self.configs = configs(grid)
        self.runs = runs if runs is not None else LocalRuns()  # LocalRuns or appo.tools.sweep_ray.RayRuns
        self.stopping = False

    def is_done(self, config: dict[str, Any]) -> bool:
        return (self.dir / config_name(config) / RESULT_FILE).is_file()

    def start(self, config: dict[str, Any]) -> None:
        name = config_name(config)
        flags = config_flags(config)
        args = [*self.train_flags, f"--train_dir={self.dir.resolve()}", f"--experiment={name}", *flags]
        (self.dir / "logs").mkdir(parents=True, exist_ok=True)
        self.runs.start(name, args, self.dir / name, self.dir / "logs" / f"{name}.txt")
        say(f"start {name}")

    def on_exit(self, name: str, status: int, remote: dict[str, Any] | None) -> bool:
        """Record a finished run: its final return and curve (read here, or sent back by its Ray task)."""
        config = next(c for c in self.configs if config_name(c) == name)
        if status != 0:
            where = (remote or {}).get("error") or f"exit {status}, see {self.dir / 'logs' / (name + '.txt')}"
            say(f"failed {name}: {where} (rerun the sweep to resume)")
            if remote and remote.get("log_tail"):
                print(remote["log_tail"], flush=True)
            return False
        run_dir = self.dir / name
        local = remote is None or cfg_path(run_dir).is_file()
        if not (budget_reached(run_dir) if local else remote.get("finished", True)):
            say(f"stopped {name} before its env-step or iteration budget (rerun the sweep to resume)")
            return False
        if remote is None:
            final, steps, values = final_return(self.dir / name)
            remote = {"final_return": final, "steps": steps.tolist(), "values": values.tolist()}
        result = {"config": config, **{k: v for k, v in remote.items() if k not in ("status", "log_tail", "finished")}}
        (self.dir / name).mkdir(parents=True, exist_ok=True)  # a Ray task on another node wrote the run there
        write_text_atomic(self.dir / name / RESULT_FILE, json.dumps(result, indent=2) + "\n")
        node = f" on node {remote['node'][:12]}" if "node" in remote else ""
        say(f"done {name}{node}: final return {result['final_return']:.1f}")
        return True

    def run(self, max_parallel: int) -> int:
        """Run every configuration not done yet, `max_parallel` at a time; returns the number that failed."""
        todo = [c for c in self.configs if not self.is_done(c)]
        skipped = len(self.configs) - len(todo)
        say(f"sweep {self.dir}: {len(self.configs)} configurations, {skipped} done already, {len(todo)} to run")
        failed = 0
        while (todo and not self.stopping) or len(self.runs):
            while todo and not self.stopping and len(self.runs) < max_parallel:
                self.start(todo.pop(0))
            time.sleep(0.2)
            for name, status, remote in self.runs.finished():
                failed += not self.on_exit(name, status, remote)
        return failed + (len(todo) if self.stopping else 0)

    def stop(self, signum: int, _frame: Any) -> None:
        """First signal: no new runs, SIGTERM to the running ones (they save and exit); then wait for them."""
        if self.stopping:
            return
        self.stopping = True
        say(f"signal {signum}: stopping {len(self.runs)} running run(s); rerun the sweep to go on")
        self.runs.stop()

    def result(self, config: dict[str, Any]) -> tuple[float, np.ndarray, np.ndarray]:
        """A finished run's final return and curve, from its result file."""
        result = json.loads((self.dir / config_name(config) / RESULT_FILE).read_text())
        if "steps" not in result:  # written by a sweep before results held the curve: read it from the run
            return final_return(self.dir / config_name(config))
        return float(result["final_return"]), np.asarray(result["steps"]), np.asarray(result["values"])

    def summarise(self) -> list[dict[str, Any]]:
        """results.md, results.json and curves.png over the runs done so far."""
        groups: dict[str, list[tuple[float, np.ndarray, np.ndarray]]] = {}
        for config in self.configs:
            if self.is_done(config):
                groups.setdefault(group_name(config), []).append(self.result(config))
        rows = []
        for group, runs in groups.items():
            finals = np.array([r[0] for r in runs])
            rows.append({"config": group, "seeds": len(runs), "mean": float(finals.mean()), "std": float(finals.std())})
        (self.dir / "results.json").write_text(json.dumps(rows, indent=2) + "\n")
        lines = ["| configuration | seeds | final return mean | std |", "|---|---|---|---|"]
        lines += [f"| {r['config']} | {r['seeds']} | {r['mean']:.1f} | {r['std']:.1f} |" for r in rows]
        (self.dir / "results.md").write_text("\n".join(lines) + "\n")
        print("\n".join(lines))
        if groups:
            plot_bands(groups, self.dir / "curves.png")
        return rows


def plot_bands(groups: dict[str, list[tuple[float, np.ndarray, np.ndarray]]], out: Path) -> None:
    """Per configuration: the mean over seeds against env steps, and a band from the lowest to the highest seed
    (each seed's curve interpolated onto the env steps all of them reached)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8, 5), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    for group, runs in groups.items():
        curves = [(steps, values) for _final, steps, values in runs if len(steps)]
        if not curves:
            continue
        end = min(int(steps[-1]) for steps, _ in curves)
        start = max(int(steps[0]) for steps, _ in curves)
        grid = np.linspace(start, max(end, start), 200)
        ys = np.stack([np.interp(grid, steps, values) for steps, values in curves])
        ax.plot(grid, ys.mean(axis=0), label=f"{group} ({len(curves)} seeds)")
        ax.fill_between(grid, ys.min(axis=0), ys.max(axis=0), alpha=0.25)
    ax.set_xlabel("env steps")
    ax.set_ylabel(f"{TAG} (mean over seeds, band: min to max)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    fig.savefig(out, dpi=100)
    say(f"wrote {out}")


def say(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}][sweep] {message}", flush=True)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m appo.tools.sweep",
        description="Run every configuration of a grid as its own train_appo.py run; flags after -- go to each run.",
    )
    parser.add_argument("--grid", required=True, help='JSON: flag -> list of values, e.g. {"seed": [0, 1]}')
    parser.add_argument("--max_parallel", type=int, default=1, help="runs at a time")
    parser.add_argument("--name", default="sweep", help="the sweep's folder under --train_dir")
    parser.add_argument("--train_dir", type=Path, default=Path("./train_dir"), help="root folder of all runs")
    parser.add_argument(
        "--backend", default="local", help="local: subprocesses here; ray: each run a Ray task on a cluster's node"
    )
    parser.add_argument("--ray_address", default="", help="--backend=ray: auto or HEAD:6379; empty: a private instance")
    parser.add_argument("--cpus_per_run", type=float, default=1.0, help="--backend=ray: CPUs each run reserves")
    return parser


def parse(argv: list[str]) -> tuple[argparse.Namespace, dict[str, list[Any]], list[str]]:
    """The sweep's own flags, its grid and the runs' flags; a usage error exits 2 with one line."""
    own, train_flags = (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else (argv, [])
    parser = build_parser()
    args = parser.parse_args(own)
    try:
        grid = json.loads(args.grid)
    except json.JSONDecodeError as exc:
        parser.exit(2, f"error: --grid: not JSON ({exc})\n")
    if not isinstance(grid, dict) or not grid or not all(isinstance(v, list) and v for v in grid.values()):
        parser.exit(2, "error: --grid: must be a JSON object of non-empty lists\n")
    names = [config_name(c) for c in configs(grid)]
    if len(set(names)) < len(names):
        same = next(n for n in names if names.count(n) > 1)
        parser.exit(
            2, f"error: --grid: two configurations would share the run folder {same}; make the values distinct\n"
        )
    bad = first_bad_configuration(grid, train_flags)
    if bad:
        parser.exit(2, f"error: {bad}\n")
    taken = [f for f in train_flags if f.split("=")[0] in ("--train_dir", "--experiment")]
    if taken:
        parser.exit(2, f"error: {taken[0]}: the sweep chooses each run's folder; use --train_dir and --name\n")
    if args.max_parallel < 1:
        parser.exit(2, f"error: --max_parallel={args.max_parallel}: must be >= 1\n")
    if args.backend not in ("local", "ray"):
        parser.exit(2, f"error: --backend={args.backend}: must be local or ray\n")
    if args.cpus_per_run <= 0:
        parser.exit(2, f"error: --cpus_per_run={args.cpus_per_run}: must be > 0\n")
    if args.backend == "ray":
        if importlib.util.find_spec("ray") is None:
            parser.exit(2, "error: --backend=ray: Ray is not installed (pip install -e '.[ray]')\n")
        runs_ray = [f for f in train_flags if f.split("=")[0] in ("--backend", "--ray_address")]
        if runs_ray:
            parser.exit(
                2, f"error: {runs_ray[0]}: with the sweep's --backend=ray each run is one Ray task on one node\n"
            )
    return args, grid, train_flags


def first_bad_configuration(grid: dict[str, list[Any]], train_flags: list[str]) -> str | None:
    """What train_appo.py's parser would refuse in one of the grid's configurations (a key that is no flag, a value
    of the wrong type) or in the flags after --, as one line; None when every run's command line parses. Found here,
    before any run starts, not once per run."""
    from dataclasses import fields

    from appo.config.cfg import Cfg
    from appo.config.cfg import build_parser as train_parser

    parser = train_parser()
    names = {f.name for f in fields(Cfg)}
    unknown = [k for k in grid if k not in names]
    if unknown:
        return f"--grid: {', '.join(unknown)}: not a flag of train_appo.py (python train_appo.py --help lists them)"
    for config in [{}, *configs(grid)]:
        said = io.StringIO()
        try:
            with contextlib.redirect_stderr(said):
                parser.parse_args(config_flags(config) + train_flags)
        except SystemExit:
            lines = [line for line in said.getvalue().splitlines() if line.strip()]
            detail = lines[-1].split("error: ", 1)[-1] if lines else "not accepted"
            where = f"--grid configuration {config_name(config)}" if config else "the flags after --"
            return f"{where}: {detail}"
    return None


def main(argv: list[str] | None = None) -> int:
    args, grid, train_flags = parse(sys.argv[1:] if argv is None else argv)
    with stop_signals_unblocked():  # before Ray starts: its workers inherit the dispositions
        return _sweep(args, grid, train_flags)


def _sweep(args: argparse.Namespace, grid: dict[str, list[Any]], train_flags: list[str]) -> int:
    if args.backend == "ray":
        from appo.tools.sweep_ray import RayRuns

        runs: Any = RayRuns(args.ray_address, args.cpus_per_run)
    else:
        runs = LocalRuns()
    sweep = Sweep(args.name, args.train_dir, grid, train_flags, runs)
    previous = {s: signal.signal(s, sweep.stop) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        failed = sweep.run(args.max_parallel)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        runs.close()
    sweep.summarise()
    if failed:
        say(f"{failed} configuration(s) not done")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
