"""Driver checks made before any process exists."""

from __future__ import annotations

import shutil
from collections import namedtuple
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from appo.config.cfg import Cfg
from appo.config.derive import derive
from appo.driver.preflight import check_shared_memory
from appo.protocol.buffers import shared_bytes
from appo.protocol.wiring import queue_bytes

SPACES = (gym.spaces.Box(-1, 1, (17,), np.float32), gym.spaces.Box(-1, 1, (6,), np.float32))
Usage = namedtuple("Usage", "total used free")


def test_too_small_dev_shm_is_refused_with_the_size_needed(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(shutil, "disk_usage", lambda _path: Usage(64 * 2**20, 60 * 2**20, 4 * 2**20))
    with pytest.raises(SystemExit) as exc:
        check_shared_memory(Cfg(num_workers=16), SPACES, shm=str(tmp_path))
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert err.startswith(f"error: {tmp_path} has 4 MB free, this run needs about") and "--num_workers" in err


def test_enough_dev_shm_passes_and_less_than_needed_is_refused(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    cfg = Cfg(num_workers=16)
    need = shared_bytes(cfg, derive(cfg), *SPACES) + queue_bytes(cfg.num_workers, cfg.num_policies)
    assert need > 2**20  # 16 workers' buffers: the check has something real to weigh
    asked: list[str] = []
    free = 2 * need

    def usage(path: str) -> Usage:
        asked.append(path)
        return Usage(2**40, 2**40 - free, free)

    monkeypatch.setattr(shutil, "disk_usage", usage)
    assert check_shared_memory(cfg, SPACES, shm=str(tmp_path)) is None
    # It measured the directory it was given (a check that returned early would pass the line above too).
    assert asked == [str(tmp_path)] and capsys.readouterr().err == ""
    free = need - 1  # the same run, one byte short of what its shared tensors and queues take
    with pytest.raises(SystemExit) as exc:
        check_shared_memory(cfg, SPACES, shm=str(tmp_path))
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {tmp_path} has ") and "--num_workers" in err


def test_driver_stops_with_an_error_when_training_stalls(tmp_path):
    import time

    from appo.driver.runner import Driver
    from appo.protocol.messages import TrainReport

    driver = Driver(Cfg(stall_timeout=0.3), tmp_path)
    try:
        driver.on_messages([TrainReport(0, 1000, 1, {})])
        assert driver.should_stop() is None  # progress
        time.sleep(0.15)
        driver.on_messages([TrainReport(0, 2000, 2, {})])
        assert driver.should_stop() is None
        time.sleep(0.4)
        assert driver.should_stop() == "stalled"
        assert "no training progress for 0.3 s (--stall_timeout)" in driver.errors[0]
    finally:
        driver.writers.close()
