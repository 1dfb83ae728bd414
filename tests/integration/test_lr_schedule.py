"""--lr_schedule=linear_decay follows whichever budget ends the run: the README's ant_dir command (its
defaults: the preset decays linearly) with a time budget instead of the README's 1800 s ends at a learning rate near
0, read back from tensorboard with tensorboard's own reader; before, a time-budgeted run decayed by env steps
toward a budget it never reached and ended at nearly the initial rate."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from appo.envs.presets import env_preset
from tests.conftest import ROOT

# Long enough that a slow or loaded machine, whose start-up (MuJoCo, the processes) took over 15 s of a 20 s budget
# in CI, still trains several iterations inside it.
SECONDS = 45.0


@pytest.mark.timeout(180)
@pytest.mark.slow
def test_a_time_budgeted_run_decays_its_learning_rate_to_the_end(tmp_path: Path):
    command = [
        sys.executable,
        "train_appo.py",
        "--env=ant_dir",
        "--experiment=ant_dir",
        f"--train_dir={tmp_path}",
        f"--train_for_seconds={SECONDS}",
        "--report_interval=0.5",
    ]
    launched = time.time()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=150)
    assert done.returncode == 0, done.stderr[-3000:]
    events = EventAccumulator(str(tmp_path / "ant_dir" / "summaries" / "0"), size_guidance={"scalars": 0})
    events.Reload()
    points = events.Scalars("train/learning_rate")
    rates = [e.value for e in points]
    initial = env_preset("ant_dir")["learning_rate"]
    assert all(b <= a for a, b in zip(rates, rates[1:], strict=False)), rates  # it only goes down
    # The rate falls with wall time at initial / SECONDS per second and reaches 0 when the budget ends (the budget
    # counts from the driver's start, a few seconds after the launch): read on the clock, not on a count of
    # iterations, so a slow machine's fewer, longer iterations pass as well as a fast one's. Before, a time-budgeted
    # run decayed by env steps toward a budget it never reached: a slope near 0 and a zero years away.
    # Each rate is summarised until the next iteration sets another: its first summary is the closest to when it
    # was set.
    firsts = [e for i, e in enumerate(points) if i == 0 or e.value != points[i - 1].value]
    assert len(firsts) >= 3, rates
    times = np.array([e.wall_time for e in firsts]) - launched
    slope, intercept = np.polyfit(times, np.array([e.value for e in firsts]), 1)
    assert -1.5 * initial / SECONDS < slope < -0.5 * initial / SECONDS, (slope, initial / SECONDS, rates)
    zero_at = -intercept / slope
    assert SECONDS - 5.0 < zero_at < SECONDS + 25.0, (zero_at, times, rates)
