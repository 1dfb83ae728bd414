"""A stand-in GPU for CPU-only machines: torch's `meta` device, with the host copies a real GPU allows.

Code under test puts its models on `meta` inside `stand_in_gpu()`. Torch itself then raises on every op that mixes
a meta tensor with a (non-scalar) CPU tensor, exactly as it raises on CUDA + CPU: a CPU observation fed to the model,
a model output used with CPU data. What a GPU allows and meta cannot do (it holds no data) gets a stand-in:
- a copy to the host (`.cpu()`, `.to("cpu")`, `cpu_tensor.copy_(meta_tensor)`, `.tolist()`) of a tensor that was
  itself moved to the device gives back the data it was moved with (a batch that goes to the learner and back is
  intact); of any other tensor (a result computed on the device) zeros of the right shape and dtype;
- `.item()`, `float()`, `int()` give 0 and `bool()` True (the checks code makes of its data, "all finite", hold
  for zeros).
What a GPU does not allow fails here too: `.numpy()` of a device tensor (it must be copied to the host first).

The values computed on the device are meaningless, so a run under the stand-in checks where tensors live, never
what is learnt.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils.weak import WeakTensorKeyDictionary

META = torch.device("meta")


def _is_meta(x: Any) -> bool:
    return isinstance(x, torch.Tensor) and x.device == META


def _to_host(args: tuple, kwargs: dict) -> bool:
    """Whether a Tensor.to(...) call targets the CPU."""
    for value in (*args[1:], kwargs.get("device")):
        if isinstance(value, (str, torch.device)):
            return torch.device(value).type == "cpu"
        if isinstance(value, torch.Tensor):
            return value.device.type == "cpu"
    return False


def _to_device(args: tuple, kwargs: dict) -> bool:
    """Whether a Tensor.to(...) call targets the meta device."""
    for value in (*args[1:], kwargs.get("device")):
        if isinstance(value, (str, torch.device)):
            return torch.device(value) == META
        if isinstance(value, torch.Tensor):
            return value.device == META
    return False


class StandInGpu(TorchFunctionMode):
    def __init__(self) -> None:
        super().__init__()
        self.moved = WeakTensorKeyDictionary()  # meta tensor -> the host tensor it was moved from

    def _host(self, t: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
        source = self.moved.get(t)
        if source is None:
            return torch.zeros(t.shape, dtype=dtype or t.dtype)
        return source.detach().clone().to(dtype or t.dtype)

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        first = args[0] if args else None
        if _is_meta(first):
            if name == "numpy":
                raise TypeError("can't convert meta (stand-in GPU) device tensor to numpy: copy it to the host first")
            if name == "cpu":
                return self._host(first)
            if name == "to" and _to_host(args, kwargs):
                dtype = next((a for a in args[1:] if isinstance(a, torch.dtype)), kwargs.get("dtype"))
                return self._host(first, dtype)
            if name in ("item", "__float__", "__int__", "__index__", "__bool__"):
                return {"__float__": 0.0, "__bool__": True}.get(name, 0)
            if name == "tolist":
                return self._host(first).tolist()
        if name == "copy_" and isinstance(first, torch.Tensor) and first.device.type == "cpu" and _is_meta(args[1]):
            with torch.no_grad():
                return first.copy_(self._host(args[1]))
        out = func(*args, **kwargs)
        if name == "to" and isinstance(first, torch.Tensor) and first.device.type == "cpu" and _to_device(args, kwargs):
            self.moved[out] = first
        return out


@contextmanager
def stand_in_gpu() -> Iterator[None]:
    # Data-dependent shapes (boolean masks, nonzero) have no meta answer: take every element as selected.
    from torch.fx.experimental import _config

    before = _config.meta_nonzero_assume_all_nonzero
    _config.meta_nonzero_assume_all_nonzero = True
    try:
        with StandInGpu():
            yield
    finally:
        _config.meta_nonzero_assume_all_nonzero = before
