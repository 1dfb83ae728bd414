"""Sixteen actor workers on a tabular MDP of 20 states (each task's tables kilobytes long), with the driver's and
learners' queues held to the socket buffer a stock host allows (net.core.wmem_max 212,992): the run trains to its
time budget, every report and meta-test arrives (nothing logged as dropped), and it exits cleanly."""

from __future__ import annotations

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from tests.conftest import run_script

ARGS = ["--env=tabular_mdp", "--mdp_states=20", "--num_workers=16", "--num_envs_per_worker=16"]
ARGS += ["--num_test_tasks=16", "--meta_test_interval=25000", "--train_for_seconds=75", "--device=cpu"]


@pytest.mark.slow
def test_sixteen_workers_on_a_20_state_mdp_within_a_stock_socket_buffer(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("APPO_QUEUE_BUFFER_BYTES", "212992")
    result = run_script("train_appo.py", [*ARGS, f"--train_dir={tmp_path}", "--experiment=mdp"], timeout=300)
    log = (tmp_path / "mdp" / "log.txt").read_text()
    assert result.returncode == 0, result.stdout[-3000:]
    assert "unreadable" not in log and "fragments stopped" not in log, log[-3000:]
    acc = EventAccumulator(str(tmp_path / "mdp" / "summaries" / "0"), size_guidance={"scalars": 0})
    acc.Reload()
    tags = acc.Tags()["scalars"]
    assert [t for t in tags if t.startswith("episode_by_task/")], tags
    steps = acc.Scalars("train/env_steps")[-1].value if "train/env_steps" in tags else None
    tests = acc.Scalars("meta_test_sampled/trial_return") if "meta_test_sampled/trial_return" in tags else []
    assert len(tests) >= 2, f"meta-tests that arrived: {len(tests)} ({steps} env steps)\n{log[-3000:]}"
