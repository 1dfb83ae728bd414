"""Shared tensors handed to a spawned child as numpy (appo/protocol/shared_views.py; the child's body is
tests/support/numpy_child.py): the child maps the same memory (its writes are the parent's tensors' values and the
other way round), reads a weight store through the same seqlock, and never imports torch."""

from __future__ import annotations

import numpy as np
import torch

from appo.protocol.param_sync import ParamStore
from appo.protocol.processes import spawn_context
from appo.protocol.shared_views import SharedArray, for_numpy_process
from tests.support.numpy_child import child


def test_a_spawned_child_sees_shared_tensors_as_numpy_without_torch():
    arrays = {
        "obs": torch.zeros(3, 4).share_memory_(),
        "steps": torch.arange(5, dtype=torch.int64).share_memory_()[1:],  # a view with an offset
        "empty": torch.zeros(0, 2).share_memory_(),
    }
    arrays["obs"][0, 0] = 3.5
    model = torch.nn.Module()
    model.w = torch.nn.Parameter(torch.tensor([[1.0, 2.0]]))
    store = ParamStore(model)
    with torch.no_grad():
        model.w[0, 1] = 9.0
    store.publish(model, 17)
    counter = torch.zeros(2, dtype=torch.int64).share_memory_()
    ctx = spawn_context()
    receive, send = ctx.Pipe(duplex=False)
    process = ctx.Process(target=child, args=(*for_numpy_process((arrays, store, (counter,))), send))
    process.start()
    try:
        assert receive.poll(60), "the child sent nothing"
        got = receive.recv()
    finally:
        process.join(30)
        if process.is_alive():
            process.kill()
    assert process.exitcode == 0
    assert got == {
        "types": ["ndarray"],
        "seen": 3.5,
        "ints": [1, 2, 3, 4],
        "version": 17,
        "weight": 9.0,
        "torch": [],
    }
    assert arrays["obs"][1, 2].item() == 7.0 and counter[0].item() == 42  # the child's writes, in the parent's tensors


def test_param_views_copy_the_published_state():
    store = ParamStore(torch.nn.Linear(2, 3))
    layer = torch.nn.Linear(2, 3)
    store.publish(layer, 5)
    version, state = store.pull_state()
    assert version == 5
    np.testing.assert_array_equal(state["weight"], layer.weight.detach().numpy())
    state["weight"][:] = 0.0  # a copy: the store is untouched
    assert store.state["weight"].abs().sum() > 0


def test_only_shared_contiguous_cpu_tensors():
    for tensor in (torch.zeros(3), torch.zeros(4, 4).share_memory_().t()):
        try:
            SharedArray(tensor)
        except ValueError as exc:
            assert "contiguous CPU tensor in shared memory" in str(exc)
        else:
            raise AssertionError(f"accepted {tensor.shape}")
