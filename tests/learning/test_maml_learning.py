"""MAML-TRPO learns to adapt on navigation2d (the short variant of the acceptance; the full one, 60 iterations
of the defaults on two seeds, is benchmarks/maml_navigation.py). Half the defaults' tasks and episodes per
iteration, 10 iterations, one seed: measured on the shared 2-core machine, post-adaptation returns -26 ... -17 over
iterations 6-10 against -47 before adaptation and -76 at the first iteration; meta-test -31.9 before and -18.8
after one step. Read as a user reads it, from the run's summaries and its meta-test file."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from appo.tools.plot import load_events
from tests.conftest import run_script

ARGS = ["--algo=maml_trpo", "--env=navigation2d", "--meta_batch_size=10", "--fast_batch_size=10", "--seed=0"]
ARGS += ["--train_for_iterations=10", "--meta_test_interval=0", "--num_test_tasks=5", "--meta_test_steps=1"]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_navigation2d_adaptation_gain(train_dir: Path) -> None:
    run_script("train_appo.py", [*ARGS, "--num_workers=2", f"--train_dir={train_dir}", "--experiment=nav"], 540, True)
    acc = load_events(train_dir / "nav" / "summaries" / "0")
    pre = np.array([e.value for e in acc.Scalars("maml/return_pre")])
    post = np.array([e.value for e in acc.Scalars("maml/return_post")])
    assert len(post) == 10
    last_pre, last_post = pre[-3:].mean(), post[-3:].mean()
    figures = f"pre {np.round(pre, 1)}, post {np.round(post, 1)}"
    assert last_post >= -30, figures  # the goal is reached within a few steps after adaptation
    assert last_post - last_pre >= 10, figures  # one policy gradient step on the task's episodes pays
    assert last_post - pre[0] >= 30, figures  # and the meta-policy learned: far above where it started
    returns = np.load(train_dir / "nav" / "meta_test" / "iter_10.npz")["returns"]  # [2 steps, 5 tasks, 10 episodes]
    before, after = returns[0].mean(), returns[1].mean()
    assert after - before >= 5, f"meta-test on held-out goals: {before:.1f} before, {after:.1f} after one step"
