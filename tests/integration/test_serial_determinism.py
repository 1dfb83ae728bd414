"""--serial_mode is deterministic: the same seed trains bit-identical weights, another seed does not.
Runs drive appo.driver.runner.run in this process and compare the final checkpoints tensor by tensor."""

from __future__ import annotations

import multiprocessing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

from appo.config.cfg import merge_cfg
from appo.config.derive import derive
from appo.driver.runner import run
from appo.learning.checkpoint import load_latest
from appo.utils.logging import log

ITERATIONS = 5
# One iteration (batch_size * num_batches_per_epoch = 128 steps) is exactly one rollout of every env
# (2 workers x 4 envs x 16 steps), so even synchronous PPO (Pendulum's preset) does not round it up.
SMALL = {
    "num_workers": 2,
    "num_envs_per_worker": 4,
    "worker_num_splits": 2,
    "rollout": 16,
    "batch_size": 64,
    "num_batches_per_epoch": 2,
    "device": "cpu",
    "serial_mode": True,
    "report_interval": 1000.0,
    "save_every_sec": 1e9,
}


@pytest.fixture
def restore_process_identity() -> Iterator[None]:
    """run() names this process "driver" and points the appo logger at the run's log.txt: undo both."""
    process = multiprocessing.current_process()
    name = process.name
    try:
        import setproctitle

        title = setproctitle.getproctitle()
    except ImportError:
        setproctitle, title = None, None
    yield
    process.name = name
    if setproctitle is not None:
        setproctitle.setproctitle(title)
    for handler in list(log.handlers):
        log.removeHandler(handler)
        handler.close()


def train(train_dir: Path, env: str, experiment: str, seed: int) -> dict[str, Any]:
    """Train ITERATIONS iterations in serial mode; returns the final checkpoint's state."""
    probe = merge_cfg({"env": env, **SMALL}, None)
    samples = derive(probe).samples_per_iteration
    assert samples == probe.batch_size * probe.num_batches_per_epoch, f"{env}: iteration rounded to {samples} steps"
    cfg = merge_cfg(
        {
            "env": env,
            **SMALL,
            "train_dir": str(train_dir),
            "experiment": experiment,
            "seed": seed,
            "train_for_env_steps": ITERATIONS * samples,
        },
        None,
    )
    status = run(cfg)
    assert status == 0, f"{env} {experiment}: run exited {status}"
    loaded = load_latest(train_dir / experiment / "checkpoint_p0")
    assert loaded is not None, f"{env} {experiment}: no checkpoint"
    return loaded[0]


def differing(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> list[str]:
    assert a.keys() == b.keys(), f"model keys differ: {sorted(a.keys() ^ b.keys())}"
    return [k for k in a if not torch.equal(a[k], b[k])]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("env", ["CartPole-v1", "Pendulum-v1"])
def test_serial_mode_is_deterministic(train_dir: Path, env: str, restore_process_identity: None):
    first = train(train_dir, env, "first", seed=3)
    second = train(train_dir, env, "second", seed=3)
    other = train(train_dir, env, "other_seed", seed=4)

    # The budget is ITERATIONS * samples env steps and one iteration takes `samples` of them: one version each.
    samples = derive(merge_cfg({"env": env, **SMALL}, None)).samples_per_iteration
    for name, state in (("first", first), ("second", second), ("other_seed", other)):
        assert state["version"] == ITERATIONS, f"{name}: version {state['version']} != {ITERATIONS}"
        assert state["env_steps"] == ITERATIONS * samples, f"{name}: env_steps {state['env_steps']}"

    same = differing(first["model"], second["model"])
    assert not same, f"{env}: same seed, different weights in {same}"
    moments = differing(first["optimizer"]["state"][0], second["optimizer"]["state"][0])
    assert not moments, f"{env}: same seed, different Adam state in {moments}"
    # Every learned tensor depends on the seed; the normalisers' sample counts do not (same budget).
    changed = differing(first["model"], other["model"])
    seeded = [k for k in first["model"] if not k.endswith(".count")]
    assert set(seeded) <= set(changed), f"{env}: another seed left {sorted(set(seeded) - set(changed))} identical"
