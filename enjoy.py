"""Watch a trained policy: `python enjoy.py [--experiment=NAME] [--checkpoint=best] [--save_video]`.

The env and model come from train_dir/NAME/cfg.json; appo/tools/evaluate.py has the evaluation flags. Without
--experiment, the run of --train_dir written most recently (appo/tools/runs.py: latest_run) is watched."""

from __future__ import annotations

import sys

from appo.config.cfg import Cfg, build_parser, parse_cfg
from appo.tools.evaluate import EnjoyCfg, enjoy
from appo.tools.runs import format_time, latest_run, no_runs_message
from utils.logging import init_logging, log


def with_latest_experiment(argv: list[str]) -> tuple[list[str], str | None]:
    """`argv` plus `--experiment=` the latest run of --train_dir when no --experiment was typed, and the line
    that says so (None when --experiment was typed). SystemExit(2) with one line when train_dir holds no run."""
    typed = vars(build_parser("enjoy.py", EnjoyCfg).parse_args(argv))  # --help and bad flags end here
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


def main(argv: list[str] | None = None) -> int:
    argv, note = with_latest_experiment(list(sys.argv[1:] if argv is None else argv))
    cfg = parse_cfg(argv, prog="enjoy.py", cls=EnjoyCfg)
    if note is not None:
        init_logging(cfg.log_level)
        log.info(note)
    return enjoy(cfg)


if __name__ == "__main__":
    sys.exit(main())
