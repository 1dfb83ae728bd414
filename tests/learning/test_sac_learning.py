"""SAC must learn: Pendulum-v1 with two actor workers, judged by the evaluator's deterministic episodes (the mean
return of 5, `eval/return_mean`), read back from the run's tensorboard file. Random play scores about -1,200."""

from __future__ import annotations

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from tests.conftest import run_script

BUDGET = 20_000  # the acceptance bound: an evaluation at or before this many env steps must reach -300
# Trained for 12,000 steps: seed 1 evaluated at -153 by 6,000 and -124 by 10,000 (2026-11-23), so the shorter run
# keeps a wide margin and halves the test's time. 64x64 networks instead of the default 256x256: an update costs a
# fraction as much on one core (the default networks need several minutes for these updates on two cores).
STEPS = 12_000
LEARNING_FLAGS = ["--actor_mlp_layers", "64", "64", "--critic_mlp_layers", "64", "64", "--learning_starts=2000"]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_sac_pendulum_reaches_minus_300_within_20k_steps(train_dir):
    args = [
        "--algo=sac",
        "--env=Pendulum-v1",
        f"--train_dir={train_dir}",
        "--experiment=sac",
        "--num_workers=2",
        f"--train_for_env_steps={STEPS}",
        "--eval_interval=1000",
        "--eval_episodes=5",
        "--report_interval=2",
        "--seed=1",
        *LEARNING_FLAGS,
    ]
    run_script("train_appo.py", args, timeout=280, check=True)
    acc = EventAccumulator(str(train_dir / "sac" / "summaries" / "0"), size_guidance={"scalars": 0})
    acc.Reload()
    evals = [(e.step, e.value) for e in acc.Scalars("eval/return_mean")]
    within = [v for step, v in evals if step <= BUDGET]
    assert within and max(within) >= -300, f"best evaluation within {BUDGET} steps {max(within, default=None)}; {evals}"
