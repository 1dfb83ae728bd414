"""A run on an env whose Discrete actions start elsewhere than 0 (gymnasium's `Discrete(n, start=k)`; the env raises
on an action outside its space): the actor workers hand it the policy's index plus the start, so it trains, and
`appo.load_policy`'s numpy policy (from the run, and from its npz export) plays it the same way."""

from __future__ import annotations

import subprocess
import sys

import numpy as np

import appo
from tests.conftest import ROOT, run_script
from tests.support.offset_actions import ACTIONS, OffsetActionsEnv


def test_a_run_trains_and_its_policy_plays_with_the_index_plus_the_start(train_dir, tmp_path) -> None:
    args = ["--env=tests.support.offset_actions:OffsetActionsEnv", "--serial_mode=True", "--device=cpu"]
    args += ["--num_workers=1", "--num_envs_per_worker=2", "--rollout=8", "--batch_size=16", "--max_env_errors=1"]
    args += ["--train_for_env_steps=64", f"--train_dir={train_dir}", "--experiment=offset"]
    result = run_script("train_appo.py", args, timeout=120)
    assert result.returncode == 0, result.stdout[-3000:]  # (an env given the bare index fails the run)
    out = tmp_path / "offset.npz"
    exported = subprocess.run(
        [sys.executable, "-m", "appo.export", f"--train_dir={train_dir}", "--experiment=offset", f"--out={out}"]
        + ["--format=npz"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert exported.returncode == 0, exported.stderr[-3000:]
    for policy in (appo.load_policy(train_dir / "offset"), appo.load_policy(out)):
        observations = np.array([[0, 0], [1, 10], [2, 12], [3, 11]], np.float32)
        assert all(ACTIONS.contains(int(a)) for a in policy.act(observations)[0])
        env = OffsetActionsEnv()
        assert len(policy.evaluate(env, episodes=2, seed=0)) == 2 and len(env.taken) == 10
