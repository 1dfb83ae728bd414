"""Runs with a centralised value (--value_input=team, envs/multi_agent/team_value.py) on mpe2's simple_spread_v3 with
its preset (MAPPO's recipe, shrunk to a test's size): serial mode trains the same weights twice from one seed, the
value's trunk trains, the exported policy file and `load_policy` carry the policy alone and play the game; Ray runs
it; a state value on an env without a global state is one line before any process starts."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

import appo
from appo.learning.checkpoint import load_latest
from tests.conftest import ROOT, run_script
from tests.support.ray_cluster import RayWatch, needs_ray

pytest.importorskip("mpe2")
SPREAD = "--env=mpe2.simple_spread_v3:parallel_env"
# One iteration is one rollout of every game: 1 worker x 4 games x 3 agents x 25 steps.
SMALL = [SPREAD, "--value_input=team", "--num_workers=1", "--num_envs_per_worker=4", "--batch_size=300"]
SMALL += ["--num_epochs=2", "--rnn_size=16", "--train_for_env_steps=1500", "--report_interval=1"]


def train(train_dir: Path, experiment: str, *args: str) -> Path:
    result = run_script("train_appo.py", [*args, f"--train_dir={train_dir}", f"--experiment={experiment}"], 150)
    assert result.returncode == 0, result.stdout[-3000:]
    return train_dir / experiment


@pytest.mark.timeout(300)
def test_serial_runs_train_the_same_team_value_and_export_only_the_policy(train_dir: Path) -> None:
    runs = [train(train_dir, name, *SMALL, "--serial_mode", "--seed=2") for name in ("first", "second")]
    first, second = (load_latest(run / "checkpoint_p0")[0] for run in runs)
    assert first["version"] == 5
    differ = [k for k in first["model"] if not torch.equal(first["model"][k], second["model"][k])]
    assert not differ, f"same seed, different weights in {differ}"
    team_keys = [k for k in first["model"] if k.startswith("team_")]
    assert "team_value_head.weight" in team_keys and "value_head.weight" not in first["model"]
    assert first["model"]["team_normalizer.count"] > 0  # the value's input normaliser learned the batches
    out = train_dir / "spread.npz"
    export = [sys.executable, "-m", "appo.export", f"--train_dir={train_dir}", "--experiment=first", f"--out={out}"]
    done = subprocess.run([*export, "--format=npz"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    with np.load(out) as saved:
        assert not [k for k in saved.files if "team_" in k], "the policy file carries the centralised value"
    for policy in (appo.load_policy(out), appo.load_policy(runs[0])):
        returns = policy.evaluate(episodes=2)
        assert len(returns) == 2 and all(-200 < r < 0 for r in returns)


def test_a_state_value_on_an_env_without_a_global_state_is_one_line(train_dir: Path) -> None:
    args = ["--env=paddle_duel", "--value_input=state", f"--train_dir={train_dir}", "--experiment=nostate"]
    result = run_script("train_appo.py", args, 60)
    assert result.returncode != 0
    lines = [line for line in result.stdout.splitlines() if line.startswith("error:")]
    assert lines == [
        "error: --value_input=state: --env=paddle_duel has no global state (PettingZoo's state() and state_space); "
        "--value_input=team reads every agent's observation instead"
    ]
    assert not (train_dir / "nostate").exists()


@needs_ray
@pytest.mark.timeout(180)
@pytest.mark.slow
def test_a_team_value_trains_on_ray_and_leaves_no_ray_process(train_dir: Path) -> None:
    from tests.integration.test_ray_backend import ACTOR_LINE, Run

    ray = RayWatch()
    flags = [*SMALL[:-2], "--num_workers=2", "--train_for_env_steps=3000", "--backend=ray", "--ray_object_store_mb=100"]
    with Run(train_dir, flags, env=ray.env) as run:
        run.wait_for(ACTOR_LINE.pattern, timeout=90, count=2)
        status = run.finish(timeout=150)
    assert status == 0, run.output()
    state = load_latest(train_dir / "run" / "checkpoint_p0")[0]
    assert state["env_steps"] >= 3000 and state["model"]["team_normalizer.count"] > 0
    deadline = time.monotonic() + 5
    while (left := ray.alive()) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not left, f"Ray processes left: {left}"
