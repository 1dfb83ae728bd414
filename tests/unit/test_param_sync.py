"""ParamStore: a reader never sees half of a publish, and a reader killed mid-pull blocks nobody."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal

import pytest
import torch
from torch import nn

from appo.protocol.param_sync import ParamStore


def _model(value: float) -> nn.Module:
    model = nn.Sequential(nn.Linear(64, 64), nn.Linear(64, 8))
    with torch.no_grad():
        for p in model.parameters():
            p.fill_(value)
    return model


def _publish_forever(store: ParamStore) -> None:
    version = 0
    while True:
        version += 1
        store.publish(_model(float(version)), version)


def test_pulls_are_whole_while_a_process_publishes():
    store = ParamStore(_model(0.0))
    ctx = mp.get_context("spawn")
    writer = ctx.Process(target=_publish_forever, args=(store,), daemon=True)
    writer.start()
    try:
        reader = _model(-1.0)
        seen = set()
        while len(seen) < 200:
            version = store.pull(reader)
            values = torch.cat([p.detach().flatten() for p in reader.parameters()])
            # Every tensor holds the value of one and the same publish, and that publish's version.
            assert torch.all(values == values[0]), "a pull mixed two publishes"
            assert float(values[0]) == version
            seen.add(version)
    finally:
        writer.kill()
        writer.join(5)


def _pull_forever(store: ParamStore) -> None:
    reader = _model(0.0)
    while True:
        store.pull(reader)


def test_a_reader_killed_mid_pull_does_not_block_the_writer():
    store = ParamStore(_model(0.0))
    ctx = mp.get_context("spawn")
    readers = [ctx.Process(target=_pull_forever, args=(store,), daemon=True) for _ in range(2)]
    for r in readers:
        r.start()
    try:
        for version in range(1, 51):
            store.publish(_model(float(version)), version)
        for r in readers:
            os.kill(r.pid, signal.SIGKILL)  # likely mid-copy: they do nothing else
            r.join(5)
        for version in range(51, 101):
            store.publish(_model(float(version)), version)  # would hang on a lock the killed readers held
        fresh = _model(0.0)
        assert store.pull(fresh) == 100
        assert all(torch.all(p == 100.0) for p in fresh.parameters())
    finally:
        for r in readers:
            r.kill()
            r.join(5)


def test_a_publish_left_unfinished_fails_the_pull_clearly():
    """The writer died mid-copy (the counter stays odd): readers raise instead of spinning forever."""
    store = ParamStore(_model(0.0))
    store.sequence += 1
    with pytest.raises(RuntimeError, match="unfinished"):
        store.pull(_model(0.0), patience=0.2)
