"""Learning tests: the engine must actually learn, in both the multi-process and the serial mode.
Thresholds are on the average return of the last 100 episodes, read back from the run's tensorboard
file with tensorboard's own reader: what the run reports at its end (what a user reads), not the top value
anywhere in the curve."""

from __future__ import annotations

from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from tests.conftest import run_script

MODES = {"workers2": ["--num_workers=2"], "serial": ["--serial_mode", "--num_workers=2"]}
# Two data-parallel learner ranks (DDP over gloo, one process each): CartPole only, to keep CI's time.
RANKS2 = {"ranks2": ["--num_workers=2", "--learner_world_size=2"]}


def returns(summary_dir: Path) -> list[tuple[int, float]]:
    acc = EventAccumulator(str(summary_dir), size_guidance={"scalars": 0})
    acc.Reload()
    return [(e.step, e.value) for e in acc.Scalars("episode/return_mean")]


def train(train_dir: Path, env: str, steps: int, mode: str, timeout: float) -> list[tuple[int, float]]:
    args = [
        f"--env={env}",
        f"--train_dir={train_dir}",
        "--experiment=learn",
        f"--train_for_env_steps={steps}",
        "--report_interval=2",
        "--seed=1",
        *(MODES | RANKS2)[mode],
    ]
    run_script("train_appo.py", args, timeout=timeout, check=True)
    return returns(train_dir / "learn" / "summaries" / "0")


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("mode", MODES)
def test_cartpole_reaches_450(train_dir, mode):
    curve = train(train_dir, "CartPole-v1", 400_000, mode, timeout=280)
    final = curve[-1][1]
    assert final >= 450, f"CartPole final average return {final:.1f} < 450; curve {curve[-5:]}"


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_cartpole_reaches_450_with_two_learner_ranks(train_dir):
    curve = train(train_dir, "CartPole-v1", 400_000, "ranks2", timeout=280)
    final = curve[-1][1]
    assert final >= 450, f"CartPole (2 learner ranks) final average return {final:.1f} < 450; curve {curve[-5:]}"


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("mode", MODES)
def test_pendulum_reaches_minus_250(train_dir, mode):
    curve = train(train_dir, "Pendulum-v1", 300_000, mode, timeout=280)
    final = curve[-1][1]
    assert final >= -250, f"Pendulum final average return {final:.1f} < -250; curve {curve[-5:]}"
