"""ParamStore: a reader never sees half of a publish, and a reader killed mid-pull blocks nobody."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal

import pytest
import torch
from torch import nn

from appo.protocol.param_sync import ParamStore
from appo.protocol.shared_views import state_checksum


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


class _ReorderedPublish(dict):
    """A store's state dict whose reads let a publish land out of order, as a weakly ordered CPU may show it: while
    a reader copies the first tensor, the second tensor's new bytes become visible; after the second, the rest of
    the publish (first tensor, checksum, version) does, but the sequence counter's stores not yet."""

    def __init__(self, state: dict, publish_next: list) -> None:
        super().__init__(state)
        self.publish_next = publish_next  # [(name, new value) ...], then the publish's other stores

    def items(self):  # noqa: ANN201
        for i, (name, value) in enumerate(super().items()):
            yield name, value
            if self.publish_next:
                self.publish_next.pop(0)(i)


def _reordered(store_state: dict, new: dict, finish) -> _ReorderedPublish:  # noqa: ANN001
    names = list(store_state)
    steps = [
        lambda i: store_state[names[1]].__setitem__(..., new[names[1]]),  # a later store seen first
        lambda i: (store_state[names[0]].__setitem__(..., new[names[0]]), finish()),
    ]
    return _ReorderedPublish(store_state, steps)


def test_a_pull_never_keeps_a_copy_torn_by_reordered_stores() -> None:
    """The sequence counter reads even and unchanged around the copy, yet the copy holds half of the next publish:
    the checksum refuses it and the pull takes the whole publish (both the torch and the numpy reader)."""
    for reader in ("torch", "numpy"):
        store = ParamStore(nn.Linear(4, 4))
        with torch.no_grad():
            template = nn.Linear(4, 4)
            for p in template.parameters():
                p.fill_(1.0)
        store.publish(template, 1)
        state = dict(store.state)
        new = {name: torch.full_like(value, 2.0) for name, value in state.items()}

        def finish(store: ParamStore = store, new: dict = new) -> None:
            store.checksum[0] = state_checksum(v.numpy() for v in new.values())
            store.version[0] = 2  # the sequence counter's two stores are still on their way

        if reader == "torch":
            store.state = _reordered(state, new, finish)
            model = nn.Linear(4, 4)
            version = store.pull(model, patience=1.0)
            values = torch.cat([t.flatten() for t in model.state_dict().values()])
        else:
            views = store.numpy_views_here()
            views.state = _reordered(
                {k: v.numpy() for k, v in state.items()}, {k: v.numpy() for k, v in new.items()}, finish
            )
            version, pulled = views.pull_state(patience=1.0)
            values = torch.cat([torch.from_numpy(v).flatten() for v in pulled.values()])
        assert torch.all(values == values[0]), f"{reader}: a pull kept a copy torn by reordered stores"
        assert (version, float(values[0])) == (2, 2.0), reader
