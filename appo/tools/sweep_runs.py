"""One sweep run, wherever it runs: `python -m appo.cli train` started in its own session, and its final return read
back from tensorboard. `LocalRuns` keeps a sweep's runs as subprocesses of this machine (appo/tools/sweep_ray.py: as
Ray tasks)."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

from appo.tools.plot import load_events, scalar_series

TAG = "episode/return_mean"
ROOT = Path(__file__).resolve().parents[2]  # the checkout (or install): the runs start there


def final_return(run_dir: Path) -> tuple[float, np.ndarray, np.ndarray]:
    """The last reported average return of policy 0, and its curve (env steps, values)."""
    series = scalar_series(load_events(run_dir / "summaries" / "0"), TAG)
    if series is None:
        return float("nan"), np.zeros(0), np.zeros(0)
    steps, _wall, values = series
    return float(values[-1]), steps, values


def start_run(args: list[str], log: Path, preexec_fn: Any = None) -> subprocess.Popen:
    """A training run with `args`, appending to `log`, in its own session: a Ctrl-C in the sweep's terminal reaches
    each run once, as the SIGTERM its launcher sends."""
    with open(log, "a") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "appo.cli", "train", *args],
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=preexec_fn,
        )


class LocalRuns:
    """Runs in flight as subprocesses of this machine."""

    def __init__(self) -> None:
        self.procs: dict[str, subprocess.Popen] = {}

    def __len__(self) -> int:
        return len(self.procs)

    def start(self, name: str, args: list[str], run_dir: Path, log: Path) -> None:
        self.procs[name] = start_run(args, log)

    def finished(self) -> list[tuple[str, int, dict[str, Any] | None]]:
        done = [(name, proc.returncode) for name, proc in self.procs.items() if proc.poll() is not None]
        for name, _status in done:
            del self.procs[name]
        return [(name, status, None) for name, status in done]

    def stop(self) -> None:
        for proc in self.procs.values():
            proc.send_signal(signal.SIGTERM)  # each run saves and exits

    def close(self) -> None:
        pass
