"""Image and Dict observations on the backends besides the local one (real ale-py games): on --backend=ray (a private
Ray instance) Pong on its preset and QuadrantDictEnv (an image and a vector) train for a few iterations with actor
workers as Ray actors, checkpoint a model of the right kind and leave no Ray process behind; in --serial_mode (one
process) Pong trains and checkpoints its conv model."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from appo.learning.checkpoint import list_checkpoints
from tests.conftest import run_script
from tests.support.ray_cluster import RayWatch, needs_ray

RAY = ["--backend=ray", "--num_workers=2", "--device=cpu", "--report_interval=1", "--ray_object_store_mb=200"]
CASES = {
    # Pong's preset but iterations of one batch of 256 agent steps (2 workers x 4 envs x rollouts of 32); the
    # Nature CNN.
    "pong": (
        ["--env=atari_pong", "--rollout=32", "--num_batches_per_epoch=1", "--train_for_env_steps=512"],
        512,
        (32, 4, 8, 8),
    ),
    # The Dict encoder's image part: a convnet on the 64x64 RGB frame (channels last).
    "dict": (
        ["--env=appo.envs.common.quadrant_image:QuadrantDictEnv", "--num_envs_per_worker=4", "--rollout=16"]
        + ["--batch_size=128", "--train_for_env_steps=2000"],
        2000,
        None,
    ),
}


def check_run(exp: Path, steps: int, first_conv: tuple[int, ...] | None, output: str) -> None:
    """The run trained two iterations or more to `steps` and its last checkpoint holds a convnet (with a first conv
    of shape `first_conv` where given)."""
    acc = EventAccumulator(str(exp / "summaries" / "0"), size_guidance={"scalars": 0})
    acc.Reload()
    last = acc.Scalars("train/version")[-1]
    assert last.step >= steps and last.value >= 2, output
    state = torch.load(list_checkpoints(exp / "checkpoint_p0")[-1], map_location="cpu", weights_only=False)["model"]
    convs = [tuple(v.shape) for v in state.values() if v.dim() == 4]
    assert convs and (first_conv is None or first_conv in convs), convs


def test_pong_trains_in_serial_mode(train_dir: Path) -> None:
    pytest.importorskip("ale_py")
    flags, steps, first_conv = CASES["pong"]
    args = [*flags, "--serial_mode", "--device=cpu", f"--train_dir={train_dir}", "--experiment=run"]
    result = run_script("train_appo.py", args, timeout=180)
    assert result.returncode == 0, result.stdout[-3000:]
    check_run(train_dir / "run", steps, first_conv, result.stdout[-3000:])


@needs_ray
@pytest.mark.timeout(240)
@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.slow
def test_pixels_train_on_a_private_ray_instance(case: str, train_dir: Path) -> None:
    pytest.importorskip("ale_py")
    from tests.integration.test_ray_backend import ACTOR_LINE, Run

    flags, steps, first_conv = CASES[case]
    ray = RayWatch()
    with Run(train_dir, [*flags, *RAY], env=ray.env) as run:
        run.wait_for(ACTOR_LINE.pattern, timeout=120, count=2)
        assert ray.look(), "no Ray process of the run seen while it trains"
        status = run.finish(timeout=200)
    assert status == 0, run.output()
    check_run(train_dir / "run", steps, first_conv, run.output())
    deadline = time.monotonic() + 5
    while (left := ray.alive()) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not left, f"Ray processes left: {left}"
