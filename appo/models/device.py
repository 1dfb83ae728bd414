"""Where env data meets a model: the one pair of helpers that moves tensors to a model's device and back.

Env data (observations, rewards, recurrent states, batches from the shared trajectory table) lives on the host; a
model lives where --device puts it (a GPU under the default `auto` on a GPU machine). Every crossing goes through
`to_device` on the way in and `to_host` on the way out, so no path feeds host data to a GPU model or reads a GPU
tensor as numpy. tests/unit/test_device_clean.py runs every algorithm with its models on a stand-in device to keep it
so on machines without a GPU.
"""

from __future__ import annotations

from typing import TypeVar

import numpy as np
import torch
from torch import nn

Data = TypeVar("Data", torch.Tensor, dict)


def model_device(model: nn.Module) -> torch.device:
    """The device of `model`'s parameters (the host for a model without any)."""
    for p in model.parameters():
        return p.device
    return torch.device("cpu")


def to_device(data: Data, device: torch.device | str, non_blocking: bool = False) -> Data:
    """A tensor, or each tensor of a dict, on `device` (numpy arrays are wrapped first; no copy when already there)."""
    if isinstance(data, dict):
        return {k: to_device(v, device, non_blocking) for k, v in data.items()}  # type: ignore[return-value]
    if isinstance(data, np.ndarray):
        data = torch.from_numpy(data)
    return data.to(device, non_blocking=non_blocking)


def to_host(data: Data) -> Data:
    """A tensor, or each tensor of a dict, detached and on the host (no copy when already there)."""
    if isinstance(data, dict):
        return {k: to_host(v) for k, v in data.items()}  # type: ignore[return-value]
    return data.detach().cpu()


def to_numpy(tensor: torch.Tensor) -> np.ndarray:
    """A model output as a numpy array (through the host)."""
    return to_host(tensor).numpy()


def compute_dtype(precision: str, device: torch.device | str) -> torch.dtype | None:
    """--learner_precision on `device`: None for float32, or torch.bfloat16. `auto` takes bf16 only where the hardware
    does it natively (a CUDA device that supports it; a CPU whose oneDNN has native bf16 instructions, AVX512-BF16 or
    AMX), where it about halves a convnet's training time (Nature CNN, batch 256, one AVX512-BF16 core: 175 -> 90 ms
    for its forward and backward pass); elsewhere bf16 would be emulated, slower than float32."""
    if precision != "auto":
        return torch.bfloat16 if precision == "bf16" else None
    kind = torch.device(device).type
    if kind == "cuda":
        native = torch.cuda.is_bf16_supported()
    else:
        native = kind == "cpu" and torch.backends.mkldnn.is_available() and torch.ops.mkldnn._is_mkldnn_bf16_supported()
    return torch.bfloat16 if native else None
