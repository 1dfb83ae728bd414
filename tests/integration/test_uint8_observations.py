"""uint8 observations through whole runs of train_appo.py: the frames actor workers write reach the learner's batch
bit for bit and still uint8 (nothing upcasts them before the model), with the local backend (actor workers in their
own processes, the learner in another) and in serial mode; and the pixel env (envs/common/quadrant_image.py) trains,
checkpoints and reports episodes with no model flags.

The env (tests/support/noise_frames_env.py) records the sha1 of every frame it returns; a sitecustomize on the
runs' PYTHONPATH (tests/support/frame_spy/) records what the learner's batcher hands the algorithm."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from appo.learning.checkpoint import list_checkpoints
from tests.conftest import ROOT, run_script

SPY = ROOT / "tests" / "support" / "frame_spy"
NOISE = ["--env=tests.support.noise_frames_env:NoiseFramesEnv", "--num_workers=2", "--num_envs_per_worker=4"]
NOISE += ["--rollout=8", "--batch_size=64", "--train_for_env_steps=1200", "--device=cpu", "--report_interval=1"]


def recorded(frame_dir: Path) -> tuple[set[str], list[dict]]:
    """(every frame the envs returned, every batch the learner took) as the env and the spy wrote them."""
    emitted = set()
    for path in frame_dir.glob("frames-*.txt"):
        emitted.update(path.read_text().split())
    batches = [json.loads(line) for path in frame_dir.glob("batches-*.jsonl") for line in path.read_text().splitlines()]
    return emitted, batches


@pytest.mark.parametrize("mode", ["local", "serial"])
@pytest.mark.slow
def test_uint8_frames_reach_the_learners_batch_bit_identical(mode, tmp_path, train_dir, monkeypatch) -> None:
    frame_dir = tmp_path / "frames"
    frame_dir.mkdir()
    monkeypatch.setenv("APPO_FRAME_DIR", str(frame_dir))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(SPY), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    args = [*NOISE, f"--train_dir={train_dir}", f"--experiment={mode}", f"--serial_mode={mode == 'serial'}"]
    result = run_script("train_appo.py", args, timeout=120)
    assert result.returncode == 0, result.stdout[-3000:]
    emitted, batches = recorded(frame_dir)
    assert batches, f"the spy saw no batch\n{result.stdout[-3000:]}"
    assert {b["dtype"] for b in batches} == {"torch.uint8"}
    frames = [h for b in batches for h in b["frames"]]
    assert len(frames) >= 64 * 9 // 8  # at least one batch of 8 trajectories of 9 frames each
    strangers = [h for h in frames if h not in emitted]
    assert not strangers, f"{len(strangers)} of {len(frames)} batch frames are no frame an env returned"
    assert len(set(frames)) > len(frames) // 2  # real frames, not one repeated (poison would be one frame)


def test_the_quadrant_image_env_runs_checkpoints_and_reports(train_dir) -> None:
    args = ["--env=appo.envs.common.quadrant_image:QuadrantImageEnv", "--num_workers=2", "--num_envs_per_worker=4"]
    args += ["--rollout=16", "--batch_size=128", "--train_for_env_steps=3000", "--device=cpu", "--report_interval=1"]
    result = run_script("train_appo.py", [*args, f"--train_dir={train_dir}", "--experiment=quadrant"], timeout=60)
    assert result.returncode == 0, result.stdout[-3000:]
    exp = train_dir / "quadrant"
    ckpts = list_checkpoints(exp / "checkpoint_p0")
    assert ckpts, result.stdout[-3000:]
    assert torch.load(ckpts[-1], weights_only=True)["env_steps"] >= 3000
    acc = EventAccumulator(str(exp / "summaries" / "0"), size_guidance={"scalars": 0})
    acc.Reload()
    returns = [e.value for e in acc.Scalars("episode/return_mean")]
    assert returns and all(0.0 <= r <= 20.0 for r in returns), returns  # 20-step episodes, reward 0 or 1
    assert max(e.value for e in acc.Scalars("episode/length_mean")) == 20.0
