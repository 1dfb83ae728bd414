"""Actor workers never import torch: the driver hands them the shared tensors as numpy arrays and the
weight stores as ParamViews (appo/protocol/shared_views.py), and acting ones build numpy passes from the model's
description. A probe env (tests/support/probe_env.py) reports, from inside each actor worker of a real run, the
torch modules its process has imported; the run must still learn its way to the end and exit 0."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT


def probes_of_a_run(tmp_path: Path, *flags: str) -> list[dict]:
    probe_dir = tmp_path / "probes"
    probe_dir.mkdir()
    command = [
        sys.executable,
        "train_appo.py",
        "--env=tests.support.probe_env:ProbeEnv",
        f"--train_dir={tmp_path}",
        "--experiment=probe",
        "--num_workers=2",
        "--num_envs_per_worker=4",
        "--rollout=16",
        "--batch_size=128",
        "--train_for_env_steps=6000",
        "--report_interval=1",
        *flags,
    ]
    env = {**os.environ, "APPO_PROBE_DIR": str(probe_dir)}
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=150)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "reached 6000 env steps" in done.stderr, done.stderr[-2000:]
    return [json.loads(p.read_text()) for p in probe_dir.glob("*.json")]


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    "flags",
    [
        ("--use_rnn=True", "--rnn_size=16"),  # actors act (numpy GRU) for their own envs: the default
        ("--actor_inference=False",),  # policy worker processes act; actors only step envs
        ("--num_policies=2",),  # a population acting in the actors, one stacked pass
    ],
    ids=["acting_gru", "policy_workers", "population"],
)
@pytest.mark.slow
def test_actor_workers_never_import_torch(tmp_path: Path, flags: tuple[str, ...]):
    probes = probes_of_a_run(tmp_path, *flags)
    actors = {p["name"]: p for p in probes if p["name"].startswith("actor_worker_")}
    assert sorted(actors) == ["actor_worker_0", "actor_worker_1"], sorted(p["name"] for p in probes)
    for name, probe in actors.items():
        assert probe["torch"] == [], f"{name} imported {probe['torch'][:5]}"
    # The driver builds the env too (for its spaces), with torch imported: the probe sees it there.
    assert any(p["torch"] for p in probes if not p["name"].startswith("actor_worker_"))
