"""Shared tensors as numpy arrays in processes that never import torch (actor workers acting in numpy).

The driver allocates every shared tensor with torch (`share_memory_`: under torch's default file-descriptor
strategy, a memory file whose descriptor torch's own pickling passes to children). `for_numpy_process` replaces,
in the arguments of such a child, each shared tensor by a `SharedArray`: a handle that pickles the same descriptor
(multiprocessing's DupFd, as torch does) and unpickles, in the child, as a numpy array mapped over the same memory;
and each `ParamStore` by its `ParamViews`. The child sees the same bytes as every torch process, writes included,
with no copy and no torch. Nothing is named in /dev/shm, so nothing can leak there: the memory goes when the last
process holding it exits.
"""

from __future__ import annotations

import mmap
import os
import sys
import time
import zlib
from collections.abc import Iterable
from multiprocessing import reduction
from typing import Any

import numpy as np


def numpy_views(arrays: dict[str, Any]) -> dict[str, np.ndarray]:
    """numpy views on the same memory (the actor's hot loop is numpy): of CPU tensors, or the arrays themselves."""
    return {name: np.asarray(array) for name, array in arrays.items()}


class SharedArray:
    """A picklable handle on a shared CPU tensor's memory; in the process that unpickles it, a numpy array over
    that memory. Pickle it only to start a child (the descriptor travels with the spawn)."""

    def __init__(self, tensor: Any) -> None:
        if tensor.device.type != "cpu" or not tensor.is_shared() or not tensor.is_contiguous():
            raise ValueError("SharedArray: needs a contiguous CPU tensor in shared memory")
        self.tensor = tensor  # keeps the memory (and its descriptor) alive as long as the handle
        storage = tensor.untyped_storage()
        self.fd, self.nbytes = storage._share_fd_cpu_() if storage.nbytes() else (-1, 0)
        self.offset = tensor.storage_offset() * tensor.element_size()
        self.shape = tuple(tensor.shape)
        self.dtype = tensor.numpy().dtype.str

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        if self.nbytes == 0:  # no memory to share
            return np.empty, (self.shape, self.dtype)
        return _attach, (reduction.DupFd(self.fd), self.nbytes, self.offset, self.shape, self.dtype)


def _attach(dup: Any, nbytes: int, offset: int, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    fd = dup.detach()
    try:
        memory = mmap.mmap(fd, nbytes)
    finally:
        os.close(fd)  # the mapping keeps the memory
    return np.frombuffer(memory, dtype=dtype, count=int(np.prod(shape, dtype=np.int64)), offset=offset).reshape(shape)


def state_checksum(arrays: Iterable[np.ndarray]) -> int:
    """crc32 over the bytes of `arrays` in order: what a publish of the weights writes beside them, and what a
    reader checks its copy against (appo/protocol/param_sync.py says why)."""
    crc = 0
    for array in arrays:
        crc = zlib.crc32(memoryview(np.ascontiguousarray(array)).cast("B"), crc)
    return crc


class ParamViews:
    """A `ParamStore` (appo/protocol/param_sync.py) read in numpy: the same shared state dict, version, sequence
    counter and checksum, and the same protocol, copying into numpy arrays instead of a torch model."""

    def __init__(self, state: dict[str, Any], version: Any, sequence: Any, checksum: Any) -> None:
        self.state, self.version, self.sequence, self.checksum = state, version, sequence, checksum

    def current_version(self) -> int:
        return int(self.version[0])

    def current_stamp(self) -> int:
        """As ParamStore.current_stamp: the sequence counter, moved by every publish."""
        return int(self.sequence[0])

    def pull_state(self, patience: float = 5.0) -> tuple[int, dict[str, np.ndarray]]:
        """(version, a copy of the published state dict), never half of an update; raises like ParamStore.pull when
        a publish stays unfinished for `patience` seconds (its learner died mid-copy)."""
        deadline = time.monotonic() + patience
        while True:
            before = int(self.sequence[0])
            if before % 2 == 0:
                version = int(self.version[0])
                state = {name: np.array(value, copy=True) for name, value in self.state.items()}
                if int(self.sequence[0]) == before and state_checksum(state.values()) == int(self.checksum[0]):
                    return version, state
            if time.monotonic() > deadline:
                raise RuntimeError(f"published weights unfinished for {patience:g} s (their learner died?)")
            time.sleep(0.0001)


def torch_free_possible() -> bool:
    """Whether shared tensors can be handed to a child as numpy (torch's file-descriptor sharing, on Linux)."""
    torch = sys.modules.get("torch")
    return torch is None or torch.multiprocessing.get_sharing_strategy() == "file_descriptor"


def for_numpy_process(obj: Any) -> Any:
    """`obj` (process arguments: tuples, NamedTuples, lists, dicts) with every shared tensor as a SharedArray and
    every ParamStore as its ParamViews, so that the child unpickles them without importing torch."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(obj, torch.Tensor):
        return SharedArray(obj)
    views = getattr(obj, "numpy_views", None)
    if callable(views):
        return views()
    if isinstance(obj, dict):
        return {k: for_numpy_process(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [for_numpy_process(v) for v in obj]
    if isinstance(obj, tuple):
        items = [for_numpy_process(v) for v in obj]
        return type(obj)(*items) if hasattr(obj, "_fields") else tuple(items)
    return obj


def for_actor_process(args: tuple) -> tuple:
    """An actor worker's arguments without torch objects where torch shares memory by descriptor (Linux); as they
    are elsewhere (the child then imports torch to take them)."""
    return for_numpy_process(args) if torch_free_possible() else args
