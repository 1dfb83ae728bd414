"""A resumed run's shared weights hold its checkpoint before any process starts (appo/backends/local.py:
publish_checkpoints): actor workers that step before the learner has loaded act with the trained policy, not
with fresh weights."""

from __future__ import annotations

import torch

from appo.backends.local import LocalBackend
from appo.config.derive import derive
from appo.learning.checkpoint import save_checkpoint
from appo.protocol.buffers import allocate_control, allocate_trajectories
from tests.unit.test_learner import SPACES, make_learner, small_cfg


def backend_for(cfg, exp_dir) -> LocalBackend:
    d = derive(cfg)
    buffers, control = allocate_trajectories(cfg, d, *SPACES), allocate_control(cfg, d)
    return LocalBackend(cfg, d, exp_dir, SPACES, "cpu", buffers, control)


def test_the_stores_hold_the_newest_checkpoint_at_its_version(tmp_path):
    cfg = small_cfg()
    learner = make_learner(cfg, tmp_path)  # its checkpoints in tmp_path / "checkpoint_p0", the run's layout
    with torch.no_grad():
        for param in learner.model.parameters():
            param.add_(torch.randn_like(param))
    learner.version = 7
    save_checkpoint(tmp_path / "checkpoint_p0", learner.state(), 7, 1000, keep=2)

    version, state = backend_for(cfg, tmp_path).params[0].pull_state()
    assert version == 7
    trained = learner.model.state_dict()
    assert set(state) == set(trained)
    for name, value in trained.items():
        assert torch.equal(torch.from_numpy(state[name]), value), name


def test_a_fresh_run_starts_at_version_zero(tmp_path):
    version, state = backend_for(small_cfg(), tmp_path).params[0].pull_state()
    assert version == 0 and state
