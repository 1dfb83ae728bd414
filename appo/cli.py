"""The command-line programs, installed as console scripts (setup.py) and kept at their checkout names:

    appo-train   = python train_appo.py     train, or resume the same --experiment
    appo-enjoy   = python enjoy.py          watch or record a trained policy
    appo-plot    = python -m appo.plot      curves from a run's tensorboard files
    appo-sweep   = python -m appo.sweep     a grid of training runs
    appo-export  = python -m appo.export    a checkpoint as an npz, TorchScript or ONNX policy
    appo-runs    = python -m appo.runs      the runs of a train_dir as a table

`python -m appo.cli train|enjoy ...` runs the first two from wherever appo is installed (sweeps start their runs
so)."""

from __future__ import annotations

import sys


def with_latest_experiment(argv: list[str]) -> tuple[list[str], str | None]:
    """`argv` plus `--experiment=` the latest run of --train_dir when no --experiment was typed, and the line
    that says so (None when --experiment was typed). SystemExit(2) with one line when train_dir holds no run."""
    from appo.config.cfg import Cfg, build_parser
    from appo.tools.evaluate import ENJOY_DESCRIPTION, EnjoyCfg
    from appo.tools.runs import format_time, latest_run, no_runs_message

    typed = vars(build_parser("enjoy.py", EnjoyCfg, ENJOY_DESCRIPTION).parse_args(argv))  # --help, bad flags end here
    if "experiment" in typed:
        return argv, None
    train_dir = typed.get("train_dir", Cfg.train_dir)
    found = latest_run(train_dir)
    if found is None:
        print(f"error: {no_runs_message(train_dir)}", file=sys.stderr, flush=True)
        raise SystemExit(2)
    run, written = found
    note = f"no --experiment: using the latest run in {train_dir}: {run.name} (written {format_time(written)})"
    return [*argv, f"--experiment={run.name}"], note


def train(argv: list[str] | None = None) -> int:
    """Train: the flags of train_appo.py; running the same command again resumes."""
    from appo.api import run_command_line

    return run_command_line(argv)[1]


def enjoy(argv: list[str] | None = None) -> int:
    """Watch a trained policy: the flags of enjoy.py; without --experiment, the latest run of --train_dir."""
    from appo.tools.evaluate import enjoy as run_enjoy
    from appo.tools.evaluate import ignored_flags_warning, parse_enjoy_cfg
    from appo.utils.logging import init_logging, log

    argv, note = with_latest_experiment(list(sys.argv[1:] if argv is None else argv))
    cfg, ignored = parse_enjoy_cfg(argv)
    if ignored:
        print(ignored_flags_warning(ignored), file=sys.stderr, flush=True)
    if note is not None:
        init_logging(cfg.log_level)
        log.info(note)
    return run_enjoy(cfg)


def _tool(module: str):
    def main() -> int:
        import importlib

        return importlib.import_module(module).main()

    main.__name__ = module.rpartition(".")[2]
    return main


plot = _tool("appo.tools.plot")
sweep = _tool("appo.tools.sweep")
export = _tool("appo.tools.export")
runs = _tool("appo.tools.runs")

PROGRAMS = {"train": train, "enjoy": enjoy}

if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] not in PROGRAMS:
        print(f"usage: python -m appo.cli {{{','.join(PROGRAMS)}}} [FLAGS ...]", file=sys.stderr)
        sys.exit(2)
    sys.exit(PROGRAMS[sys.argv[1]](sys.argv[2:]))
