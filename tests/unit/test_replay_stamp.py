"""A replay saved beside the checkpoints (--save_replay) says which checkpoint it was saved with; a learner killed
between writing a checkpoint and its replay leaves the two apart, and the resumed learner says so (naming both)
while it loads the replay's transitions."""

from __future__ import annotations

import logging

import gymnasium as gym
import numpy as np
import pytest

from appo.config.cfg import merge_cfg
from appo.config.derive import derive
from appo.learning import learner as learner_module
from appo.learning.checkpoint import REPLAY_FILE
from appo.learning.learner import Learner
from appo.models.registry import make_model
from appo.protocol.buffers import allocate_trajectories
from appo.protocol.param_sync import ParamStore
from appo.utils.logging import log

SPACES = (gym.spaces.Box(-1, 1, (3,), np.float32), gym.spaces.Box(-2, 2, (1,), np.float32))  # Pendulum's


def sac_learner(tmp_path) -> Learner:  # noqa: ANN001
    cfg = merge_cfg({"env": "Pendulum-v1", "algo": "sac", "save_replay": True, "device": "cpu"}, None)
    d = derive(cfg)
    params = ParamStore(make_model(cfg, *SPACES))
    learner = Learner(cfg, d, 0, allocate_trajectories(cfg, d, *SPACES), params, SPACES, tmp_path, "cpu")
    learner.init()
    return learner


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def test_a_replay_saved_with_another_checkpoint_is_named_on_resume(tmp_path, monkeypatch) -> None:
    first = sac_learner(tmp_path)
    first.save()  # version 0 and its replay
    first.version, first.env_steps = 3, 300

    def killed(*_args, **_kwargs):  # noqa: ANN002, ANN003, ANN202
        raise KeyboardInterrupt  # the stop budget ran out between the checkpoint and the replay

    monkeypatch.setattr(learner_module, "save_replay", killed)
    with pytest.raises(KeyboardInterrupt):
        first.save()
    monkeypatch.undo()
    lines = Lines()
    log.addHandler(lines)
    try:
        resumed = sac_learner(tmp_path)
    finally:
        log.removeHandler(lines)
    assert (resumed.version, resumed.env_steps) == (3, 300)
    said = [line for line in lines.lines if REPLAY_FILE in line]
    assert said and "version 0" in said[0] and "version 3" in said[0], lines.lines
