"""A trained policy outside train and enjoy, on real runs (short, serial mode):
- `appo.train(...)` in a Python session trains the weights the command line trains (same seed), and
  `appo.load_policy` of either run acts the same;
- `python -m appo.export`: ONNX (onnxruntime) and TorchScript act as the torch model to 1e-5 over 200 steps with
  episode boundaries, MLP and GRU;
- an npz export in a fresh virtualenv with numpy, gymnasium and MuJoCo only (no torch) plays exactly enjoy.py's
  deterministic returns on the same seeds: CartPole and ant_dir's GRU over whole trials."""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

import appo
from appo.learning.checkpoint import load_latest
from tests.conftest import ROOT
from tests.integration.test_serial_determinism import SMALL as SERIAL_SMALL

# The serial determinism test's small runs: five iterations of 128 env steps.
SMALL = {**SERIAL_SMALL, "seed": 3, "train_for_env_steps": 640}
PENDULUM = {"env": "Pendulum-v1", "max_episode_steps": 50}  # 200 steps: four episodes, three boundaries


def run_python(args: list[str], timeout: float = 240, python: str = sys.executable, env: dict | None = None) -> str:
    done = subprocess.run(
        [python, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=env or os.environ.copy()
    )
    assert done.returncode == 0, f"{args[:2]} exited {done.returncode}:\n{done.stderr[-3000:]}"
    return done.stdout


def train_cli(train_dir: Path, experiment: str, **flags) -> Path:
    argv = [f"--{k}={v}" for k, v in {**SMALL, **flags}.items()]
    run_python(["train_appo.py", f"--train_dir={train_dir}", f"--experiment={experiment}", *argv])
    return train_dir / experiment


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    train_dir = tmp_path_factory.mktemp("train_dir")
    return {
        "mlp": train_cli(train_dir, "mlp", **PENDULUM),
        "gru": train_cli(train_dir, "gru", **PENDULUM, use_rnn=True, rnn_size=32),
    }


@pytest.mark.timeout(300)
@pytest.mark.slow
def test_train_from_python_is_the_command_line(runs: dict[str, Path], tmp_path: Path):
    """appo.train with the command line's flags (one Python session: train, then load_policy and act)."""
    obs = np.random.default_rng(0).standard_normal((32, 3)).astype(np.float32)
    np.save(tmp_path / "obs.npy", obs)
    flags = {**SMALL, **PENDULUM, "train_dir": str(tmp_path), "experiment": "api"}
    script = (
        "import json, sys, numpy as np, appo\n"
        "if __name__ == '__main__':\n"
        f"    run = appo.train(**json.loads({json.dumps(flags)!r}))\n"
        "    assert run.status == 0, run\n"
        "    policy = appo.load_policy(run.run_dir)\n"
        f"    np.save({str(tmp_path / 'actions.npy')!r}, policy.act(np.load({str(tmp_path / 'obs.npy')!r}))[0])\n"
        "    print(run.checkpoints[0].name)\n"
    )
    (tmp_path / "session.py").write_text(script)
    printed = run_python([str(tmp_path / "session.py")]).strip().splitlines()[-1]
    cli, api = load_latest(runs["mlp"] / "checkpoint_p0"), load_latest(tmp_path / "api" / "checkpoint_p0")
    assert cli is not None and api is not None
    assert printed == cli[1].name == api[1].name  # same version, same env steps
    differ = [k for k in cli[0]["model"] if not torch.equal(cli[0]["model"][k], api[0]["model"][k])]
    assert not differ, f"appo.train and train_appo.py trained different {differ}"
    expected = appo.load_policy(runs["mlp"]).act(obs)[0]
    np.testing.assert_array_equal(np.load(tmp_path / "actions.npy"), expected)


def test_train_from_python_rejects_what_the_command_line_rejects(tmp_path: Path):
    with pytest.raises(appo.api.TrainError, match=r"^--num_workers=0: must be > 0$"):
        appo.train(env="CartPole-v1", experiment="bad", train_dir=str(tmp_path), num_workers=0)
    with pytest.raises(appo.api.TrainError, match="unrecognized arguments: --no_such_flag=1"):
        appo.train(env="CartPole-v1", experiment="bad", train_dir=str(tmp_path), no_such_flag=1)
    assert not (tmp_path / "bad").exists()


def torch_actor(run: Path):
    from appo.tools.export import find_checkpoint, load_run_policy

    cfg, model, _, _ = load_run_policy(*find_checkpoint(run))
    return cfg, model


@pytest.mark.timeout(300)
@pytest.mark.parametrize("kind", ["mlp", "gru"])
@pytest.mark.slow
def test_onnx_and_torchscript_act_as_torch(runs: dict[str, Path], kind: str, tmp_path: Path):
    ort = pytest.importorskip("onnxruntime")
    run = runs[kind]
    for fmt, suffix in (("onnx", "onnx"), ("torchscript", "pt")):
        out = run_python(
            [
                "-m",
                "appo.export",
                f"--train_dir={run.parent}",
                f"--experiment={run.name}",
                f"--format={fmt}",
                f"--out={tmp_path / ('policy.' + suffix)}",
            ]
        )
        assert f"wrote {tmp_path / ('policy.' + suffix)}" in out
    session = ort.InferenceSession(str(tmp_path / "policy.onnx"))
    meta = json.loads(
        {p.key: p.value for p in __import__("onnx").load(str(tmp_path / "policy.onnx")).metadata_props}["appo_meta"]
    )
    assert meta["cfg"]["env"] == "Pendulum-v1" and meta["model"]["core"] == ("gru" if kind == "gru" else None)
    scripted = torch.jit.load(str(tmp_path / "policy.pt"))
    cfg, model = torch_actor(run)
    env = gym.make("Pendulum-v1", max_episode_steps=50)
    obs, _ = env.reset(seed=0)
    size = 32 if kind == "gru" else 1
    rnn = torch.zeros(1, size)
    ends, worst = 0, 0.0
    for _ in range(200):
        x = torch.as_tensor(obs, dtype=torch.float32)[None]
        out = model.act(x, rnn, deterministic=True)
        onnx_action, onnx_rnn = session.run(None, {"obs": x.numpy(), "rnn_state": rnn.numpy()})
        ts_action, ts_rnn = scripted(x, rnn)
        for action, state in ((onnx_action, onnx_rnn), (ts_action.detach().numpy(), ts_rnn.detach().numpy())):
            worst = max(worst, float(np.abs(action - out.actions.numpy()).max()))
            worst = max(worst, float(np.abs(state - out.rnn_states.numpy()).max()))
        rnn = out.rnn_states
        obs, _, terminated, truncated, _ = env.step(np.clip(out.actions[0].numpy(), -2.0, 2.0))
        if terminated or truncated:
            obs, _ = env.reset()
            rnn = torch.zeros(1, size)
            ends += 1
    assert ends == 4
    assert worst <= 1e-5, f"{kind}: exported graphs differ from torch by {worst}"


def test_export_bad_input_is_one_line(runs: dict[str, Path], tmp_path: Path):
    for args, expected in (
        ([f"--train_dir={tmp_path}", "--experiment=nothing"], "not a run directory"),
        ([f"--train_dir={runs['mlp'].parent}", "--experiment=mlp", "--format=pickle"], "--format=pickle: must be"),
        ([f"--train_dir={runs['mlp'].parent}", "--experiment=mlp", "--checkpoint=best"], "no best checkpoint"),
    ):
        done = subprocess.run([sys.executable, "-m", "appo.export", *args], cwd=ROOT, capture_output=True, text=True)
        assert done.returncode == 2 and expected in done.stderr, done.stderr
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def enjoy_returns(run: Path, episodes: int) -> list[str]:
    out = run_python(
        [
            "enjoy.py",
            f"--train_dir={run.parent}",
            f"--experiment={run.name}",
            "--no_render",
            f"--max_num_episodes={episodes}",
        ]
    )
    return re.findall(r"episode \d+: return (-?[\d.]+)", out)


@pytest.mark.timeout(600)
@pytest.mark.slow
def test_npz_policy_in_a_virtualenv_without_torch(tmp_path_factory):
    """numpy + gymnasium[mujoco] (MuJoCo, imageio; the versions here) in a fresh virtualenv, the project on
    PYTHONPATH."""
    tmp = tmp_path_factory.mktemp("numpy_only")
    train_dir = tmp / "train_dir"
    cartpole = train_cli(train_dir, "cartpole", env="CartPole-v1")
    ant = train_cli(train_dir, "ant", env="ant_dir", train_for_env_steps=128)
    venv = tmp / "venv"
    run_python(["-m", "venv", str(venv)])
    pins = [f"{p}=={importlib.metadata.version(p.split('[')[0])}" for p in ("numpy", "gymnasium[mujoco]", "mujoco")]
    subprocess.run([str(venv / "bin" / "pip"), "install", "-q", *pins], check=True, capture_output=True, timeout=400)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MUJOCO_GL": "egl"}
    for run, episodes in ((cartpole, 3), (ant, 2)):
        npz = tmp / f"{run.name}.npz"
        run_python(["-m", "appo.export", f"--train_dir={train_dir}", f"--experiment={run.name}", f"--out={npz}"])
        script = (
            "import sys, appo\n"
            f"p = appo.load_policy({str(npz)!r})\n"
            f"print(' '.join(f'{{r:.1f}}' for r in p.evaluate(episodes={episodes})))\n"
            "import importlib.util; assert importlib.util.find_spec('torch') is None, 'torch is installed'\n"
            "assert 'torch' not in sys.modules\n"
        )
        out = run_python(["-c", script], python=str(venv / "bin" / "python"), env=env)
        expected = enjoy_returns(run, episodes)
        assert len(expected) == episodes, expected
        assert out.split() == expected, f"{run.name}: numpy-only {out.split()} vs enjoy.py {expected}"
