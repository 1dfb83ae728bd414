"""`python -m appo.sweep` records a run as done only once it has trained its env-step budget: a run that its
per-session `--train_for_seconds` stopped is started again (it resumes) by the next sweep. Grid values that are lists
go to the run as several values, and values with `/` make folder and log names that are safe and distinct. A grid
key, value or run flag that train_appo.py would refuse is one line before any run starts."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from appo.tools.sweep import config_name
from tests.conftest import ROOT

RUN_FLAGS = ["--num_workers=1", "--num_envs_per_worker=4", "--rollout=16", "--batch_size=256"]


def sweep(train_dir: Path, grid: dict, *flags: str) -> subprocess.CompletedProcess:
    args = ["--grid", json.dumps(grid), "--name=s", f"--train_dir={train_dir}", "--", *RUN_FLAGS, *flags]
    return subprocess.run(
        [sys.executable, "-m", "appo.sweep", *args], cwd=ROOT, capture_output=True, text=True, timeout=100
    )


@pytest.mark.timeout(120)
def test_a_run_stopped_by_its_session_time_limit_is_not_done_and_runs_again(train_dir):
    flags = ["--env=CartPole-v1", "--train_for_env_steps=10000000", "--train_for_seconds=2"]
    first = sweep(train_dir, {"seed": [0]}, *flags)
    assert first.returncode == 1, first.stdout + first.stderr
    assert not (train_dir / "s" / "seed=0" / "sweep_result.json").exists()
    assert "stopped seed=0 before its env-step or iteration budget" in first.stdout, first.stdout
    again = sweep(train_dir, {"seed": [0]}, *flags)
    assert "0 done already, 1 to run" in again.stdout and "] start seed=0" in again.stdout, again.stdout


@pytest.mark.timeout(120)
def test_list_values_go_as_several_values_and_slashes_make_safe_distinct_names(train_dir):
    grid = {"actor_mlp_layers": [[32, 32]], "env": ["CartPole-v1", "Nope/Nope-v0"]}
    result = sweep(train_dir, grid, "--train_for_env_steps=2048")
    assert result.returncode == 1 and "Traceback" not in result.stdout + result.stderr, result.stdout + result.stderr
    root = train_dir / "s"
    done = root / "actor_mlp_layers=32+32,env=CartPole-v1"
    assert json.loads((done / "cfg.json").read_text())["actor_mlp_layers"] == [32, 32]
    assert (done / "sweep_result.json").is_file()
    failed = "actor_mlp_layers=32+32,env=Nope%2FNope-v0"
    assert f"failed {failed}" in result.stdout, result.stdout
    assert "Nope/Nope-v0" in (root / "logs" / f"{failed}.txt").read_text()


def test_names_stay_distinct_and_a_clash_is_refused(train_dir):
    assert config_name({"a": "x/y"}) != config_name({"a": "x%2Fy"}) != config_name({"a": ["x", "y"]})
    assert config_name({"seed": 0, "learning_rate": 0.001}) == "learning_rate=0.001,seed=0"
    result = sweep(train_dir, {"seed": [0, "0"]}, "--env=CartPole-v1")
    assert result.returncode == 2 and result.stderr.startswith("error: --grid:"), result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and not train_dir.exists()


def test_a_grid_or_run_flag_that_train_appo_refuses_stops_the_sweep_before_any_run(train_dir):
    cases = [
        ({"learning_rat": [1e-3]}, [], "--grid: learning_rat: not a flag of train_appo.py"),
        ({"seed": [0], "learning_rate": [1e-3, "fast"]}, [], "--grid configuration learning_rate=fast,seed=0: "),
        ({"seed": [0]}, ["--nope=1"], "the flags after --: unrecognized arguments: --nope=1"),
    ]
    for grid, flags, said in cases:
        result = sweep(train_dir, grid, "--env=CartPole-v1", *flags)
        lines = result.stderr.strip().splitlines()
        assert result.returncode == 2 and len(lines) == 1 and lines[0].startswith(f"error: {said}"), result.stderr
    assert "invalid float value: 'fast'" in sweep(train_dir, {"learning_rate": ["fast"]}).stderr
    assert not train_dir.exists()
