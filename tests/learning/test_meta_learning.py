"""Meta-RL learning test: on navigation2d with hidden goals and trials of two episodes, a recurrent
policy adapts within a trial. Read from the run's own meta-test on held-out goals: the second episode of
a trial must score clearly better than the first, and the recurrent policy must beat a feed-forward one
trained with the same budget (which cannot remember what it learned about the goal)."""

from __future__ import annotations

from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from tests.conftest import run_script

BUDGET = [
    "--train_for_env_steps=1500000",
    "--serial_mode",
    "--num_workers=2",
    "--seed=3",
    "--report_interval=5",
    "--meta_test_interval=100000",
]


def meta_test(summary_dir: Path, last: int = 3) -> dict[str, float]:
    """Mean return of episode 0 and 1 of a trial over the held-out tasks, averaged over the last `last`
    meta-tests (each one is deterministic but noisy from one weights version to the next)."""
    acc = EventAccumulator(str(summary_dir), size_guidance={"scalars": 0})
    acc.Reload()
    out = {}
    for tag in ("return_ep0", "return_ep1"):
        values = [e.value for e in acc.Scalars(f"meta_test/{tag}")][-last:]
        out[tag] = sum(values) / len(values)
    return out


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.xfail(
    strict=True,
    reason="issue 19: the recurrent policy does not adapt on held-out goals. Since navigation2d ends on |dx|, |dy| < "
    "0.01 (issue 12) this seed's run gives episode 0 / 1 of -10.2 / -9.3 with torch acting and diverges (-119 / "
    "-139) with numpy acting; half of seeds 3-5 diverge either way (docs/benchmarks.md). Serial mode is "
    "deterministic, so this fails every time until issue 19 is fixed, and then XPASS fails the run: remove this.",
)
def test_navigation2d_adapts_within_a_trial(tmp_path):
    results = {}
    for name, extra in (("gru", []), ("ff", ["--use_rnn=False"])):
        run_script(
            "train_appo.py",
            ["--env=navigation2d", f"--train_dir={tmp_path}", f"--experiment={name}", *BUDGET, *extra],
            timeout=420,
            check=True,
        )
        results[name] = meta_test(tmp_path / name / "summaries" / "0")
    gru, ff = results["gru"], results["ff"]
    # Returns are negative distances summed over the episode: closer to zero is better.
    assert gru["return_ep1"] > gru["return_ep0"] + 0.1 * abs(gru["return_ep0"]), results
    assert gru["return_ep1"] > ff["return_ep1"], results
