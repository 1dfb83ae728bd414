"""A Dict observation env (an image and a vector: envs/common/quadrant_image.py's QuadrantDictEnv) through a whole run
of train_appo.py with no model flags: it trains on the local backend (the actor workers acting with the Dict encoder's
numpy pass), checkpoints and reports episodes; enjoy.py plays it; ONNX and TorchScript exports take one input per
key, and the npz export and `appo.load_policy` (numpy) take the env's dict observations or packed ones: all act as
the torch model on the env's own observations."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

import appo
from appo.config.cfg import make_cfg, read_saved_cfg
from appo.envs import make_env
from appo.learning.checkpoint import list_checkpoints, load_checkpoint
from appo.models.registry import make_model
from tests.conftest import ROOT, run_script

ENV = "appo.envs.common.quadrant_image:QuadrantDictEnv"
FLAGS = [f"--env={ENV}", "--num_workers=2", "--num_envs_per_worker=4", "--rollout=16", "--batch_size=128"]
FLAGS += ["--train_for_env_steps=2000", "--device=cpu", "--report_interval=1"]


def export(exp, fmt: str, out) -> subprocess.CompletedProcess:
    args = [f"--train_dir={exp.parent}", f"--experiment={exp.name}", f"--format={fmt}", f"--out={out}"]
    return subprocess.run(
        [sys.executable, "-m", "appo.export", *args], cwd=ROOT, capture_output=True, text=True, timeout=120
    )


def trained_model(exp, env) -> torch.nn.Module:
    """The run's last checkpoint in its torch model, for the env `env`."""
    model = make_model(make_cfg(read_saved_cfg(exp / "cfg.json")), env.observation_space, env.action_space)
    model.load_state_dict(load_checkpoint(list_checkpoints(exp / "checkpoint_p0")[-1])["model"])
    return model.eval()


def first_observations(env, n: int = 60) -> list[np.ndarray]:
    """The packed first observations of `n` episodes (seeds 0..n-1): squares in every quadrant, both flags."""
    return [env.reset(seed=seed)[0] for seed in range(n)]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    train_dir = tmp_path_factory.mktemp("train_dir")
    result = run_script("train_appo.py", [*FLAGS, f"--train_dir={train_dir}", "--experiment=dict"], timeout=150)
    assert result.returncode == 0, result.stdout[-3000:]
    return train_dir / "dict", result.stdout


@pytest.mark.slow
def test_a_dict_env_trains_checkpoints_and_reports(run) -> None:
    exp, out = run
    assert "inference: in the actor workers (numpy, cpu)" in out, out[-2000:]
    ckpts = list_checkpoints(exp / "checkpoint_p0")
    assert ckpts and load_checkpoint(ckpts[-1])["env_steps"] >= 2000
    acc = EventAccumulator(str(exp / "summaries" / "0"), size_guidance={"scalars": 0})
    acc.Reload()
    returns = [e.value for e in acc.Scalars("episode/return_mean")]
    assert returns and all(0.0 <= r <= 20.0 for r in returns), returns
    played = run_script(
        "enjoy.py",
        [f"--env={ENV}", f"--train_dir={exp.parent}", "--experiment=dict"]
        + [
            "--max_num_episodes=2",
            "--no_render",
        ],
        timeout=90,
    )
    assert played.returncode == 0 and "mean return" in played.stdout, played.stdout[-2000:]


@pytest.mark.timeout(300)
@pytest.mark.slow
def test_exports_take_one_input_per_key_and_act_as_torch(run, tmp_path) -> None:
    ort = pytest.importorskip("onnxruntime")
    exp, _ = run
    for fmt, name in (("onnx", "policy.onnx"), ("torchscript", "policy.pt")):
        result = export(exp, fmt, tmp_path / name)
        assert result.returncode == 0, result.stderr[-3000:]
    session = ort.InferenceSession(str(tmp_path / "policy.onnx"))
    assert [i.name for i in session.get_inputs()] == ["obs_flag", "obs_image", "rnn_state"]
    meta = json.loads(
        {p.key: p.value for p in __import__("onnx").load(str(tmp_path / "policy.onnx")).metadata_props}["appo_meta"]
    )
    assert [k["key"] for k in meta["observation_keys"]] == ["flag", "image"]
    assert meta["model"]["kind"] == "actor_critic" and meta["model"]["encoder"]["kind"] == "dict"
    scripted = torch.jit.load(str(tmp_path / "policy.pt"))
    env = make_env(ENV)
    model = trained_model(exp, env)
    rnn = torch.zeros(1, 1)
    for packed in first_observations(env):
        expected = model.act(torch.from_numpy(packed)[None], rnn, deterministic=True).actions
        parts = env.observation_space.unpack(packed[None])
        onnx_action, _ = session.run(
            None, {"obs_flag": parts["flag"], "obs_image": parts["image"], "rnn_state": rnn.numpy()}
        )
        ts_action, _ = scripted(torch.from_numpy(parts["flag"]), torch.from_numpy(parts["image"]), rnn)
        assert np.array_equal(onnx_action, expected.numpy()) and torch.equal(ts_action, expected)
    # (At 2,000 env steps the policy's most likely action may be the same for every observation: that the graphs
    # compute the model's function on observations that change its action is tests/unit/test_numpy_dict.py's.)


def test_load_policy_and_the_npz_export_act_as_torch_on_dicts_and_packed_observations(run, tmp_path) -> None:
    exp, _ = run
    result = export(exp, "npz", tmp_path / "p.npz")
    assert result.returncode == 0, result.stderr[-3000:]
    from_run, from_file = appo.load_policy(exp), appo.load_policy(tmp_path / "p.npz")
    env = make_env(ENV)  # packed observations, as training saw them
    model = trained_model(exp, env)
    for packed in first_observations(env):
        expected = int(model.act(torch.from_numpy(packed)[None], torch.zeros(1, 1), deterministic=True).actions)
        as_dict = env.observation_space.unpack(packed)  # what the env itself gives, key by key
        got = {from_run.act(packed)[0], from_run.act(as_dict)[0], from_file.act(packed)[0], from_file.act(as_dict)[0]}
        assert got == {expected}, (got, expected)
    assert from_file.evaluate(episodes=2) and from_run.make_env().observation_space.shape == env.observation_space.shape
