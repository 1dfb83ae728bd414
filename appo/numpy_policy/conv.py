"""The image encoders' architectures and their forward pass in numpy (torch-free), for the conv `ActorCritic`'s numpy
twin (appo/numpy_policy/actor_critic.py) and exported image policies.

The tables here are the one statement of each architecture: the torch encoders (appo/models/encoders.py) are built
from them, so both sides compute the same layers with the same strides and paddings.

- "nature": the Nature DQN convnet (Mnih et al. 2015): conv 32 8x8 s4, 64 4x4 s2, 64 3x3 s1, linear 512; ReLU.
- "simple": Sample Factory's convnet_simple: conv 32 8x8 s4, 64 4x4 s2, 128 3x3 s2, linear 512; ELU.
- "impala": the IMPALA ResNet (Espeholt et al. 2018): per stack of 16, 32, 32 channels a conv 3x3 (padding 1),
  a max-pool 3x3 stride 2 (padding 1) and two residual blocks x + conv(relu(conv(relu(x)))); then ReLU, linear 256,
  ReLU.

Arrays run channels-last (N, H, W, C) inside: a conv is im2col by strided windows and one matmul. The torch weights
(out, in, kh, kw) are reordered once at load, and the first linear layer's columns are permuted from torch's
(C, H, W) flattening order to (H, W, C), so no activation is transposed per step.

A spec (what the description of a model carries, besides the state): {"kind": "nature" | "simple" | "impala",
"channels_last": bool (the observation's layout), "divisor": float (255 for uint8 images, else 1: the pixels are
divided by it)}, and with --normalize_images "pixel_epsilon" and "pixel_clip" (the pixels, once divided, are
standardised by the running statistics `pixel_normalizer.mean` / `.var` of the state, in the observation's own
layout: (x - mean) / sqrt(var + epsilon), clipped to +-clip; computed as x * scale - shift in one pass).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from appo.numpy_policy.ops import ACTIVATIONS, State, f32

# (out channels, kernel, stride) of each conv layer of the plain convnets; no padding.
CONV_STACKS: dict[str, tuple[tuple[int, int, int], ...]] = {
    "nature": ((32, 8, 4), (64, 4, 2), (64, 3, 1)),
    "simple": ((32, 8, 4), (64, 4, 2), (128, 3, 2)),
}
IMPALA_CHANNELS = (16, 32, 32)  # one stack per entry: conv 3x3 + max-pool 3x3 s2 + two residual blocks
FC_SIZES = {"nature": 512, "simple": 512, "impala": 256}  # the width of the linear layer after the convs
CONV_ACTIVATIONS = {"nature": "relu", "simple": "elu", "impala": "relu"}
IMAGE_ENCODERS = ("nature", "simple", "impala")


def conv_out(size: int, kernel: int, stride: int, pad: int = 0) -> int:
    """The output length of a conv or pool along one axis (torch's floor rule)."""
    return (size + 2 * pad - kernel) // stride + 1


def conv_output_hw(kind: str, h: int, w: int) -> tuple[int, int]:
    """(H, W) of the last conv stack's output for an h x w image; a side <= 0 means the image is too small."""
    if kind == "impala":
        for _ in IMPALA_CHANNELS:
            h, w = conv_out(h, 3, 2, 1), conv_out(w, 3, 2, 1)
        return h, w
    for _, kernel, stride in CONV_STACKS[kind]:
        h, w = conv_out(h, kernel, stride), conv_out(w, kernel, stride)
    return h, w


def conv2d(x: np.ndarray, w: np.ndarray, b: np.ndarray, stride: int, pad: int = 0) -> np.ndarray:
    """torch's Conv2d on channels-last x [N, H, W, C] with weights w [kh * kw * C, out] (as `conv_weight` lays
    them out) and bias b [out] -> [N, H', W', out]."""
    if pad:
        x = np.pad(x, ((0, 0), (pad, pad), (pad, pad), (0, 0)))
    k = int(round(np.sqrt(w.shape[0] // x.shape[-1])))
    windows = sliding_window_view(x, (k, k), axis=(1, 2))[:, ::stride, ::stride]  # [N, H', W', C, kh, kw]
    n, ho, wo = windows.shape[:3]
    cols = windows.transpose(0, 1, 2, 4, 5, 3).reshape(n * ho * wo, -1)  # (kh, kw, C) per row
    return (cols @ w + b).reshape(n, ho, wo, -1)


def max_pool(x: np.ndarray, kernel: int = 3, stride: int = 2, pad: int = 1) -> np.ndarray:
    """torch's max_pool2d (padding counts as -inf) on channels-last x [N, H, W, C]."""
    if pad:
        x = np.pad(x, ((0, 0), (pad, pad), (pad, pad), (0, 0)), constant_values=-np.inf)
    windows = sliding_window_view(x, (kernel, kernel), axis=(1, 2))[:, ::stride, ::stride]
    return windows.max(axis=(-2, -1))


def conv_weight(state: State, prefix: str) -> tuple[np.ndarray, np.ndarray]:
    """The Conv2d `prefix` of a state dict as (weight [kh * kw * in, out], bias [out]) for `conv2d`."""
    w = f32(state[f"{prefix}.weight"])  # [out, in, kh, kw]
    return w.transpose(2, 3, 1, 0).reshape(-1, w.shape[0]).copy(), f32(state[f"{prefix}.bias"])


class ImageEncoderPass:
    """An image encoder's forward pass: obs [B, *obs_shape] (any dtype, the observation's own layout) ->
    features [B, F] float32, the weights read from `state` under `prefix` (e.g. "encoder")."""

    def __init__(self, state: State, prefix: str, spec: dict[str, Any]) -> None:
        self.kind = spec["kind"]
        if self.kind not in IMAGE_ENCODERS:
            raise ValueError(f"image encoder {self.kind!r}: must be one of {', '.join(IMAGE_ENCODERS)}")
        self.channels_last = bool(spec["channels_last"])
        self.divisor = np.float32(spec["divisor"])
        self.activation = ACTIVATIONS[CONV_ACTIVATIONS[self.kind]]
        if self.kind == "impala":
            names = ("conv", "res0.conv0", "res0.conv1", "res1.conv0", "res1.conv1")
            self.stacks = [[conv_weight(state, f"{prefix}.body.{i}.{n}") for n in names] for i in range(3)]
        else:
            self.convs = [
                (*conv_weight(state, f"{prefix}.body.{2 * i}"), stride)
                for i, (_, _, stride) in enumerate(CONV_STACKS[self.kind])
            ]
        self.pixel_scale = self.pixel_shift = None
        if "pixel_epsilon" in spec:  # statistics in the observation's layout, made [H, W, C] as the arrays here
            mean = np.asarray(state[f"{prefix}.pixel_normalizer.mean"], dtype=np.float64)
            std = np.sqrt(np.asarray(state[f"{prefix}.pixel_normalizer.var"], dtype=np.float64) + spec["pixel_epsilon"])
            scale, shift = (1.0 / (float(spec["divisor"]) * std)).astype(np.float32), (mean / std).astype(np.float32)
            order = (0, 1, 2) if self.channels_last else (1, 2, 0)
            self.pixel_scale, self.pixel_shift = (a.transpose(order).copy() for a in (scale, shift))
            self.pixel_clip = spec["pixel_clip"]
        self.fc_w = f32(state[f"{prefix}.fc.0.weight"])  # [F, C * H * W], columns permuted on the first call
        self.fc_b = f32(state[f"{prefix}.fc.0.bias"])
        self._fc_hwc: np.ndarray | None = None

    def __call__(self, obs: np.ndarray) -> np.ndarray:
        # Channels-last and contiguous in one copy: the convs' strided windows then read whole pixels at a time.
        x = np.ascontiguousarray(obs if self.channels_last else obs.transpose(0, 2, 3, 1), dtype=np.float32)
        if self.pixel_scale is not None:  # --normalize_images: x * scale - shift = (x / divisor - mean) / std
            x = x * self.pixel_scale if np.may_share_memory(x, obs) else np.multiply(x, self.pixel_scale, out=x)
            x -= self.pixel_shift
            if self.pixel_clip is not None:
                np.clip(x, -self.pixel_clip, self.pixel_clip, out=x)
        elif self.divisor != 1.0:  # in place only on the copy: never scale the caller's own float array
            x = x / self.divisor if np.may_share_memory(x, obs) else np.divide(x, self.divisor, out=x)
        act = self.activation
        if self.kind == "impala":
            for conv, *res in self.stacks:
                x = max_pool(conv2d(x, *conv, stride=1, pad=1))
                for c0, c1 in (res[:2], res[2:]):
                    x = x + conv2d(act(conv2d(act(x), *c0, stride=1, pad=1)), *c1, stride=1, pad=1)
            x = act(x)
        else:
            for w, b, stride in self.convs:
                x = act(conv2d(x, w, b, stride))
        if self._fc_hwc is None:
            _, h, w, c = x.shape
            # torch flattens (C, H, W); these activations are (H, W, C): reorder the weight's columns once.
            self._fc_hwc = self.fc_w.reshape(-1, c, h, w).transpose(2, 3, 1, 0).reshape(h * w * c, -1).copy()
        return act(x.reshape(len(x), -1) @ self._fc_hwc + self.fc_b)
