"""Device-clean: every algorithm trains, evaluates and checkpoints with its models on another device than the
env data, caught without a GPU. The runs put the learner's and policy workers' models on a stand-in device
(tests/support/stand_in_gpu.py: torch's meta device, which raises on every op mixing it with host tensors, as CUDA
does, and on `.numpy()` of a device tensor). Before appo/models/device.py, UDRL's greedy evaluation fed a host
observation to the learner's model: every UDRL/RCP run on a GPU machine died at its first evaluation;
this test failed the same way.

MAML-TRPO is not here: its meta-learner runs on the host whatever --device says (docs/algorithms.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

import appo.driver.runner as runner
from appo.config.algorithms import ALGORITHMS
from appo.config.cfg import merge_cfg
from tests.integration.test_serial_determinism import restore_process_identity  # noqa: F401 (a fixture)
from tests.support.stand_in_gpu import stand_in_gpu

ENVS = {"sac": "Pendulum-v1"}
ON_DEVICE = sorted(name for name, spec in ALGORITHMS.items() if spec.traits.consumes != "meta_batches")


@pytest.mark.parametrize("algo", ON_DEVICE)
@pytest.mark.slow
def test_every_algorithm_runs_with_its_models_on_a_device(
    algo: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    restore_process_identity: None,  # noqa: F811
) -> None:
    flags = {
        "env": ENVS.get(algo, "CartPole-v1"),
        "algo": algo,
        "experiment": algo,
        "train_dir": str(tmp_path),
        "num_workers": 1,
        "num_envs_per_worker": 2,
        "worker_num_splits": 1,
        "rollout": 16,
        "serial_mode": True,
        "numpy_inference": False,  # the policy worker's torch forward on the device
        "train_for_env_steps": 2000,
        "eval_interval": 1000,  # the engine's evaluator (a model of its own on the host)
        "report_interval": 1.0,
        "save_every_sec": 1e9,
    }
    if algo in ("udrl", "rcp_r", "rcp_a"):  # iterations soon, each with its greedy evaluation
        flags |= {"udrl_warmup_episodes": 4, "udrl_episodes_per_iteration": 4, "udrl_eval_every": 1}
        flags |= {"udrl_updates_per_iteration": 2, "rcp_updates_per_iteration": 2, "udrl_eval_episodes": 1}
    if algo == "sac":
        flags |= {"learning_starts": 500, "updates_per_env_step": 0.1}  # each update on the stand-in device costs 0.1 s
    cfg = merge_cfg(flags, None)
    monkeypatch.setattr(runner, "resolve_device", lambda cfg: "meta")
    with stand_in_gpu():
        assert runner.run(cfg) == 0
    checkpoints = list((tmp_path / algo).rglob("*.pth"))
    assert checkpoints, "the run saved no checkpoint"
