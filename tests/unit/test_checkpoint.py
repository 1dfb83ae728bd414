"""Unit tests for appo.learning.checkpoint: bit-exact round trips, pruning, corruption fallback, crash safety,
weights_only."""

from __future__ import annotations

import logging
import pickle
from pathlib import Path
from typing import Any

import pytest
import torch

from appo.learning import checkpoint as ck


def _make_state(seed: int = 0, version: int = 1) -> dict[str, Any]:
    """A realistic learner state: model + Adam state after one step + scalars."""
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    opt = torch.optim.Adam(model.parameters(), lr=3e-4)
    loss = model(torch.randn(16, 4)).square().mean()
    loss.backward()
    opt.step()
    return {
        "model": model.state_dict(),
        "optimizer": opt.state_dict(),
        "version": version,
        "env_steps": 1234 * version,
        "lr": 3e-4,
        "name": "test",
        "done": False,
        "history": [1.5, 2.5],
    }


def _assert_equal(a: Any, b: Any) -> None:
    """Recursive bit-exact comparison (tensors with torch.equal and matching dtype)."""
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor)
        assert a.dtype == b.dtype and a.shape == b.shape
        assert torch.equal(a, b)
    elif isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys()
        for k in a:
            _assert_equal(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            _assert_equal(x, y)
    else:
        assert type(a) is type(b) and a == b


def test_round_trip_is_bit_exact(tmp_path: Path) -> None:
    state = _make_state()
    path = ck.save_checkpoint(tmp_path, state, version=7, env_steps=4096, keep=3)
    assert path.name == "checkpoint_000000007_4096.pth"
    assert path.parent == tmp_path
    assert "step" in str(state["optimizer"]["state"][0])  # Adam actually has state to round-trip
    loaded = ck.load_checkpoint(path)
    _assert_equal(state, loaded)
    latest = ck.load_latest(tmp_path)
    assert latest is not None
    _assert_equal(state, latest[0])
    assert latest[1] == path
    assert not list(tmp_path.glob("*.tmp"))


def test_creates_missing_directory(tmp_path: Path) -> None:
    d = tmp_path / "train_dir" / "exp" / "checkpoint_p0"
    path = ck.save_checkpoint(d, {"x": 1}, version=1, env_steps=10, keep=2)
    assert path.exists()


def test_keep_prunes_older(tmp_path: Path) -> None:
    for v in range(1, 6):
        ck.save_checkpoint(tmp_path, {"v": v}, version=v, env_steps=v * 100, keep=2)
    names = [p.name for p in ck.list_checkpoints(tmp_path)]
    assert names == ["checkpoint_000000004_400.pth", "checkpoint_000000005_500.pth"]


def test_list_sorted_by_version_and_ignores_others(tmp_path: Path) -> None:
    # Versions beyond 9 digits and out-of-order creation still sort numerically.
    for v in (10, 2, 1_000_000_000):
        ck.save_checkpoint(tmp_path, {"v": v}, version=v, env_steps=v, keep=0)
    (tmp_path / "checkpoint_000000099_1.pth.tmp").write_bytes(b"junk")
    (tmp_path / "notes.txt").write_text("hi")
    ck.save_best(tmp_path, {"v": 2}, version=2, env_steps=2, metric=1.0)
    versions = [int(p.name.split("_")[1]) for p in ck.list_checkpoints(tmp_path)]
    assert versions == [2, 10, 1_000_000_000]
    assert ck.list_checkpoints(tmp_path / "missing") == []
    assert ck.load_latest(tmp_path / "missing") is None


def test_truncated_newest_falls_back_with_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    old = ck.save_checkpoint(tmp_path, _make_state(0, 1), version=1, env_steps=100, keep=5)
    new = ck.save_checkpoint(tmp_path, _make_state(1, 2), version=2, env_steps=200, keep=5)
    data = new.read_bytes()
    new.write_bytes(data[: len(data) // 2])
    with caplog.at_level(logging.WARNING, logger="appo"):
        result = ck.load_latest(tmp_path)
    assert result is not None
    state, path = result
    assert path == old
    assert state["version"] == 1
    assert any(new.name in r.getMessage() and r.levelno == logging.WARNING for r in caplog.records)


def test_load_latest_none_when_all_corrupt(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    p = ck.save_checkpoint(tmp_path, {"a": 1}, version=1, env_steps=1, keep=5)
    p.write_bytes(b"")
    with caplog.at_level(logging.WARNING, logger="appo"):
        assert ck.load_latest(tmp_path) is None
    assert any(p.name in r.getMessage() for r in caplog.records)


def test_interrupted_save_leaves_previous_intact(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    prev_state = _make_state(0, 1)
    prev = ck.save_checkpoint(tmp_path, prev_state, version=1, env_steps=100, keep=1)
    prev_bytes = prev.read_bytes()
    real_save = torch.save

    def failing_save(obj: Any, f: Any, *args: Any, **kwargs: Any) -> None:
        # Write part of a real payload, then die, as a crash or full disk would mid-write.
        real_save(obj, f, *args, **kwargs)
        f.seek(0)
        f.truncate(100)
        raise OSError("simulated crash during save")

    monkeypatch.setattr(torch, "save", failing_save)
    with pytest.raises(OSError, match="simulated crash"):
        ck.save_checkpoint(tmp_path, _make_state(1, 2), version=2, env_steps=200, keep=1)
    monkeypatch.undo()

    assert not (tmp_path / ck.checkpoint_name(2, 200)).exists()
    assert not list(tmp_path.glob("*.tmp"))
    assert ck.list_checkpoints(tmp_path) == [prev]
    assert prev.read_bytes() == prev_bytes
    result = ck.load_latest(tmp_path)
    assert result is not None
    _assert_equal(prev_state, result[0])


def test_stale_tmp_ignored_and_cleaned(tmp_path: Path) -> None:
    stale = tmp_path / "checkpoint_000000009_900.pth.tmp"
    tmp_path.mkdir(exist_ok=True)
    stale.write_bytes(b"half a checkpoint")
    assert ck.list_checkpoints(tmp_path) == []
    assert ck.load_latest(tmp_path) is None
    ck.save_checkpoint(tmp_path, {"a": 1}, version=1, env_steps=1, keep=2)
    assert not stale.exists()


def test_best_keeps_only_one(tmp_path: Path) -> None:
    assert ck.find_best(tmp_path) is None
    b1 = ck.save_best(tmp_path, {"v": 1}, version=1, env_steps=100, metric=10.0)
    assert b1.name == "best_000000001_100_10.000.pth"
    b2 = ck.save_best(tmp_path, {"v": 3}, version=3, env_steps=300, metric=-2.5)
    assert b2.name == "best_000000003_300_-2.500.pth"
    assert not b1.exists()
    assert ck.find_best(tmp_path) == b2
    assert ck.load_checkpoint(b2) == {"v": 3}
    # Best files do not count as regular checkpoints, and pruning never removes the best.
    ck.save_checkpoint(tmp_path, {"v": 4}, version=4, env_steps=400, keep=1)
    ck.save_checkpoint(tmp_path, {"v": 5}, version=5, env_steps=500, keep=1)
    assert [p.name for p in ck.list_checkpoints(tmp_path)] == ["checkpoint_000000005_500.pth"]
    assert b2.exists()


class _Payload:
    """An arbitrary class: unpickling it would run code, so weights_only loading must refuse it."""

    def __init__(self) -> None:
        self.x = 1


def test_arbitrary_pickled_object_is_refused(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    good = ck.save_checkpoint(tmp_path, {"a": torch.ones(2)}, version=1, env_steps=1, keep=5)
    evil = tmp_path / ck.checkpoint_name(2, 2)
    torch.save({"obj": _Payload()}, evil)
    with pytest.raises(pickle.UnpicklingError):
        ck.load_checkpoint(evil)
    # load_latest treats the refused file like a corrupt one and falls back.
    with caplog.at_level(logging.WARNING, logger="appo"):
        result = ck.load_latest(tmp_path)
    assert result is not None and result[1] == good
    assert any(evil.name in r.getMessage() for r in caplog.records)


def test_map_location(tmp_path: Path) -> None:
    p = ck.save_checkpoint(tmp_path, {"t": torch.arange(3)}, version=1, env_steps=1, keep=1)
    loaded = ck.load_checkpoint(p, map_location=torch.device("cpu"))
    assert loaded["t"].device.type == "cpu"
    if torch.cuda.is_available():
        result = ck.load_latest(tmp_path, map_location="cuda")
        assert result is not None and result[0]["t"].device.type == "cuda"


def test_every_kind_of_stale_tmp_is_cleaned_by_the_next_save(tmp_path: Path) -> None:
    """A kill mid-write leaves the temporary file of a checkpoint, a PBT snapshot or the replay; the next save
    removes them all, and nothing else."""
    stale = [tmp_path / n for n in ("pbt_snapshot_for_p1.pth.tmp", "replay.pth.tmp", "best_000000002_9_1.000.pth.tmp")]
    mine = tmp_path / "notes.pth.tmp"  # not a name appo writes
    for p in [*stale, mine]:
        p.write_bytes(b"half a file")
    ck.save_checkpoint(tmp_path, {"a": 1}, version=1, env_steps=1, keep=2)
    assert [p.name for p in stale if p.exists()] == []
    assert mine.exists()
