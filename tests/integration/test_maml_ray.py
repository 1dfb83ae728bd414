"""MAML-TRPO with --backend=ray (appo/maml/ray_actors.py): on Ray's two-node simulation (ray.cluster_utils), with
one rollout actor killed by SIGKILL mid-run and the run stopped and resumed, navigation2d's iterations, weights and
meta-test are bit for bit those of the local backend with the same seed, and enjoy.py reads the run as a local
one's; Ctrl-C of a run on a private Ray instance leaves no process and no Ray process behind."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import numpy as np
import pytest
import torch

from appo.learning.checkpoint import load_latest
from tests.conftest import run_script
from tests.integration.test_maml import TINY, scalars
from tests.integration.test_ray_backend import ACTOR_LINE, Run, actors
from tests.support.ray_cluster import needs_ray

# Iterations long enough (40 episodes of up to 60 steps per phase) for the kill to land while the actors sample.
NAV = [*TINY, "--env=navigation2d", "--num_workers=2", "--fast_batch_size=10", "--max_episode_steps=60"]
TAGS = ("maml/return_pre", "maml/return_post", "maml/kl", "maml/surrogate_after", "maml/ls_steps", "train/version")


@needs_ray
@pytest.mark.timeout(240)
@pytest.mark.slow
def test_navigation2d_on_two_ray_nodes_through_kill_9_and_resume_equals_local(cluster, train_dir):
    c, worker_node = cluster
    ray_run = [*NAV, "--backend=ray", f"--ray_address={c.address}"]
    with Run(train_dir, [*ray_run, "--train_for_iterations=6"]) as run:
        found = run.wait_for(ACTOR_LINE.pattern, timeout=90, count=2)
        assert {m[3] for m in found} == {c.head_node.node_id, worker_node.node_id}, [m[0] for m in found]
        run.wait_for(r"iteration 2,", timeout=60)
        os.kill(int(found[0][4]), signal.SIGKILL)
        status = run.finish(timeout=120)
    text = run.text()
    assert status == 0, run.output()
    victim = int(found[0][1])
    assert f"actor_worker_{victim} died" in text, text[-3000:]
    assert [inc for w, inc in actors(text) if w == victim and inc > 0] == [1], text[-3000:]
    # Resumed from the first session's checkpoint (iteration 6) for two more iterations.
    with Run(train_dir, [*ray_run, "--train_for_iterations=8"]) as run:
        assert run.finish(timeout=120) == 0, run.output()
    local = train_dir.parent / "local_runs"
    run_script("train_appo.py", [*NAV, "--train_for_iterations=8", f"--train_dir={local}", "--experiment=l"], 240, True)
    a, b = scalars(train_dir / "run"), scalars(local / "l")
    assert [v for _, v in a["train/version"]] == [float(i) for i in range(1, 9)]  # the second session ran two
    for tag in TAGS:
        assert len(a[tag]) == 8 and a[tag] == b[tag], (tag, a[tag], b[tag])
    (wa, _), (wb, _) = load_latest(train_dir / "run" / "checkpoint_p0"), load_latest(local / "l" / "checkpoint_p0")
    assert wa["version"] == wb["version"] == 8
    assert all(torch.equal(wa["model"][k], wb["model"][k]) for k in wb["model"])
    npz_a, npz_b = (np.load(d / "meta_test" / "iter_8.npz") for d in (train_dir / "run", local / "l"))
    np.testing.assert_array_equal(npz_a["returns"], npz_b["returns"])
    enjoy = [f"--train_dir={train_dir}", "--experiment=run", "--no_render", "--task=1"]
    shown = run_script("enjoy.py", enjoy, 60, True)
    assert [line.split(":")[0] for line in shown.stdout.splitlines() if "adaptation:" in line] == [
        "before adaptation",
        "after adaptation",
    ], shown.stdout


@needs_ray
@pytest.mark.timeout(120)
@pytest.mark.slow
def test_ctrl_c_of_a_maml_run_on_ray_leaves_nothing_behind(train_dir: Path) -> None:
    # tests/integration/test_signals.py's check: exit within 15 s of SIGINT, no process of the run, nothing new in
    # /dev/shm, no Ray process (GCS, raylet, workers) of its private instance.
    from tests.integration.test_signals import interrupt_at

    args = [*NAV, "--backend=ray", "--ray_object_store_mb=100", "--train_for_iterations=100000"]
    interrupt_at([*args, f"--train_dir={train_dir}", "--experiment=sigint"], "iteration 2,")
    # Stopped as a run stops at a signal: the checkpoint of the last meta-iteration, no final meta-test (minutes).
    assert list((train_dir / "sigint" / "checkpoint_p0").glob("*.pth"))
