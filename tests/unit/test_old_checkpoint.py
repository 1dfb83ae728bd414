"""A checkpoint written before the layout move (tests/data/checkpoint_v0: CartPole, saved by commit d415ccb's
code) still loads into today's model and acts exactly as it did then, and a run resumes from it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import gymnasium as gym
import torch

from appo.config.cfg import make_cfg, read_saved_cfg
from appo.learning.checkpoint import list_checkpoints, load_checkpoint
from appo.models.registry import make_model
from tests.conftest import ROOT, run_script

DATA = ROOT / "tests" / "data" / "checkpoint_v0"


def test_old_checkpoint_acts_as_it_did() -> None:
    cfg = make_cfg(read_saved_cfg(DATA / "cfg.json"))
    env = gym.make("CartPole-v1")
    model = make_model(cfg, env.observation_space, env.action_space)
    state = load_checkpoint(next(DATA.glob("*.pth")))
    model.load_state_dict(state["model"])
    expected = json.loads((DATA / "expected.json").read_text())
    obs = torch.tensor(expected["obs"], dtype=torch.float32)
    with torch.no_grad():
        out = model.act(obs, torch.zeros(len(obs), 1), deterministic=True)
    assert out.actions.tolist() == expected["actions"]
    assert out.values.tolist() == expected["values"]  # bit for bit: same weights, same function
    assert (state["version"], state["env_steps"]) == (expected["version"], expected["env_steps"])


def test_a_run_resumes_from_an_old_checkpoint(tmp_path: Path) -> None:
    run = tmp_path / "old"
    (run / "checkpoint_p0").mkdir(parents=True)
    shutil.copy(DATA / "cfg.json", run / "cfg.json")
    shutil.copy(next(DATA.glob("*.pth")), run / "checkpoint_p0")
    args = [f"--train_dir={tmp_path}", "--experiment=old", "--train_for_env_steps=8000", "--device=cpu"]
    proc = run_script("train_appo.py", args, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:]
    newest = load_checkpoint(list_checkpoints(run / "checkpoint_p0")[-1])
    assert (
        newest["env_steps"] >= 8000 and newest["version"] > json.loads((DATA / "expected.json").read_text())["version"]
    )
    assert "resum" in proc.stdout.lower(), proc.stdout[-2000:]
