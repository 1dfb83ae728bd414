"""The observation encoders, chosen by the observation space and `--encoder`: the first layers of a model, which turn
an observation into a feature vector for the core and the heads.

| --encoder   | a flat Box (vector) | a 3-D Box (an image)        | a Dict                                      |
|-------------|---------------------|-----------------------------|---------------------------------------------|
| auto        | MLP                 | Nature CNN                  | each image key: Nature CNN; the rest: MLP   |
| mlp         | MLP                 | MLP of the flattened pixels | every key through one MLP                   |
| nature, ... | error               | that convnet                | each image key: that convnet; the rest: MLP |

- MLP: Linear + `--nonlinearity` per `--encoder_mlp_layers` size (`build_mlp`), on the observation flattened and
  normalised by the model's running mean/std (`--normalize_input`: vector inputs and a Dict
  observation's vector keys, never images).
- The convnets (architectures: appo/numpy_policy/conv.py, whose tables both the torch and the numpy pass are built
  from): "nature", the Nature DQN CNN as CleanRL's ppo_atari has it (ReLU, linear 512); "simple", Sample Factory's
  convnet_simple (ELU, linear 512); "impala", the IMPALA ResNet (16, 32, 32 channels, ReLU, linear 256). Every conv
  and linear layer of theirs starts orthogonal with gain sqrt(2) and zero biases, as in CleanRL. Their width is
  fixed: `--encoder_mlp_layers` sizes MLPs only.
- An image is a Box with 3 dims. Its layout is read from its shape: channels-last (H, W, C) when the last axis is
  shorter than the first ((64, 64, 3), (84, 84, 4)), else channels-first (C, H, W) ((4, 84, 84) stacked Atari
  frames, (3, 64, 64)); channels-last images are permuted inside the encoder. A uint8 image is cast to float and
  divided by 255 inside the encoder (whatever dtype the tensor arrives in: the space decides), so observations can
  stay uint8 from the env to the learner; a float image is used as is. `--normalize_input` never applies to images;
  `--normalize_images` standardises each pixel (after the division) by running statistics of its own, which the
  learner updates from its batches (Sample Factory's --normalize_input on images; the Doom preset's).
- Dict (`MultiInputEncoder`): keys in sorted order; the image keys' conv features, then the MLP's output over the
  other keys flattened and concatenated, then mixed by one Linear + activation (MIX_WIDTH); it takes a dict of
  tensors. Not normalised; no numpy pass yet. The engine
  carries Dict observations packed into one uint8 array (appo/envs/packed_obs.py); `unpack_obs` takes them apart.

Every encoder takes inputs with any number of leading dims ([B, ...] when acting, [N, T, ...] when training) and
returns [*lead, out_size]. The MLP is a plain `nn.Sequential` so that vector models keep their parameter names
(`encoder.0.weight`, ...), their initialisation and their draws from torch's generator, as before encoders were
chosen here: old checkpoints load, serial runs stay bit-identical.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor, nn
from torch.nn import functional

from appo.config.cfg import ENCODERS
from appo.models.normalize import RunningMeanStd
from appo.numpy_policy.conv import (
    CONV_ACTIVATIONS,
    CONV_STACKS,
    FC_SIZES,
    IMPALA_CHANNELS,
    conv_output_hw,
)

# --encoder's values (appo/config/cfg.py ENCODERS): auto, mlp, then the convnets, IMAGE_ENCODERS.
_ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU, "elu": nn.ELU}


def build_mlp(in_size: int, layers: list[int], nonlinearity: str) -> tuple[nn.Sequential, int]:
    """Linear + activation per hidden size; returns the MLP and its output width (`in_size` when empty)."""
    modules: list[nn.Module] = []
    size = in_size
    for hidden in layers:
        modules += [nn.Linear(size, hidden), _ACTIVATIONS[nonlinearity]()]
        size = hidden
    return nn.Sequential(*modules), size


def is_image(space: gym.Space) -> bool:
    return isinstance(space, gym.spaces.Box) and len(space.shape) == 3


def is_channels_last(shape: tuple[int, ...]) -> bool:
    """Whether an image of `shape` is (H, W, C): its last axis is shorter than its first (module doc)."""
    return shape[-1] < shape[0]


def _init(module: nn.Module) -> None:
    """Orthogonal weights with gain sqrt(2) and zero biases for every conv and linear layer in `module`."""
    for layer in module.modules():
        if isinstance(layer, (nn.Conv2d, nn.Linear)):
            nn.init.orthogonal_(layer.weight, gain=math.sqrt(2.0))
            nn.init.zeros_(layer.bias)


class ImageEncoder(nn.Module):
    """The part every convnet shares: input preparation (cast, divide by 255 for uint8 spaces, channels-first),
    any leading dims, `body` (the convs) then `fc` (Linear + activation). Subclasses build `body`."""

    def __init__(self, kind: str, space: gym.spaces.Box) -> None:
        super().__init__()
        self.kind = kind
        self.obs_shape = tuple(int(s) for s in space.shape)
        self.channels_last = is_channels_last(self.obs_shape)
        self.divisor = 255.0 if space.dtype == np.uint8 else 1.0
        c, h, w = (self.obs_shape[2], *self.obs_shape[:2]) if self.channels_last else self.obs_shape
        oh, ow = conv_output_hw(kind, h, w)
        if oh <= 0 or ow <= 0:
            raise ValueError(f"--encoder={kind}: the image {self.obs_shape} is too small for this convnet")
        self.in_channels = c
        self.flat_size = oh * ow * (IMPALA_CHANNELS[-1] if kind == "impala" else CONV_STACKS[kind][-1][0])
        self.out_size = FC_SIZES[kind]
        self.activation = _ACTIVATIONS[CONV_ACTIVATIONS[kind]]
        self.pixel_normalizer: RunningMeanStd | None = None  # --normalize_images (`normalize_pixels`)
        # The convs' and linear layer's arithmetic: None for float32, or a lower precision they run in under autocast
        # (the learner's --learner_precision sets it; weights, gradients and the features handed on stay float32).
        self.compute_dtype: torch.dtype | None = None

    def _finish(self) -> None:
        self.fc = nn.Sequential(nn.Linear(self.flat_size, self.out_size), self.activation())
        _init(self)

    def spec(self) -> dict[str, Any]:
        """What the numpy pass needs besides the weights (appo/numpy_policy/conv.py)."""
        spec = {"kind": self.kind, "channels_last": self.channels_last, "divisor": self.divisor}
        norm = self.pixel_normalizer
        return spec if norm is None else spec | {"pixel_epsilon": norm.epsilon, "pixel_clip": norm.clip}

    def normalize_pixels(self) -> None:
        """From now on every pixel is standardised by running statistics of its own before the convs (Sample
        Factory's --normalize_input on images: a static background reads as zeros, what moves stands out). The
        statistics are of the scaled pixels in the observation's own layout; the learner updates them from `pixels`
        of its batches; they travel with the weights as buffers."""
        self.pixel_normalizer = RunningMeanStd(self.obs_shape)

    def pixels(self, obs: Tensor, layout: torch.memory_format = torch.contiguous_format) -> Tensor:
        """obs [*lead, *obs_shape] -> [B, *obs_shape] float32 in `layout`, divided by the divisor: what the statistics
        learn and, unstandardised, what the convs see. One copy (none for float frames laid out so already)."""
        x = obs.reshape(-1, *self.obs_shape).to(torch.float32, memory_format=layout)
        if self.divisor != 1.0:
            x = x / self.divisor if obs.is_floating_point() else x.div_(self.divisor)
        return x

    def pixel_affine(self) -> tuple[Tensor, Tensor]:
        """(scale, shift) [*obs_shape] float32 with (raw pixel) * scale - shift = (pixel / divisor - mean) / std:
        the standardisation as one pass over a fresh float copy of the frames, in their own layout."""
        norm = self.pixel_normalizer
        std = torch.sqrt(norm.var + norm.epsilon)
        return (1.0 / (self.divisor * std)).float(), (norm.mean / std).float()

    def forward(self, obs: Tensor) -> Tensor:
        """obs [*lead, *obs_shape] -> features [*lead, out_size].

        The convs run on channels-last memory (NCHW tensors with channels innermost): a channels-first batch is laid
        out so in the one float copy its cast makes anyway (a channels-last observation's permuted view already is).
        oneDNN's CPU convolutions train about a third faster on it (Nature CNN, batch 256, forward and backward)."""
        lead = obs.shape[: obs.dim() - 3]
        layout = torch.contiguous_format if self.channels_last else torch.channels_last
        if self.pixel_normalizer is None:
            x = self.pixels(obs, layout)
        else:
            scale, shift = self.pixel_affine()
            x = obs.reshape(-1, *self.obs_shape).to(torch.float32, memory_format=layout, copy=True)
            x = x.mul_(scale).sub_(shift)
            if self.pixel_normalizer.clip is not None:
                x = x.clamp_(-self.pixel_normalizer.clip, self.pixel_normalizer.clip)
        if self.channels_last:
            x = x.permute(0, 3, 1, 2)
        if self.compute_dtype is None:
            x = self.fc(self.convs(x).flatten(1))  # (flatten: batch-size free in traced graphs)
        else:
            with torch.autocast(x.device.type, dtype=self.compute_dtype):
                x = self.fc(self.convs(x).flatten(1)).float()
        return x.reshape(*lead, self.out_size)

    def convs(self, x: Tensor) -> Tensor:
        return self.body(x)


class ConvStackEncoder(ImageEncoder):
    """The plain convnets ("nature", "simple"): conv + activation per CONV_STACKS row, then the linear layer."""

    def __init__(self, kind: str, space: gym.spaces.Box) -> None:
        super().__init__(kind, space)
        modules: list[nn.Module] = []
        channels = self.in_channels
        for out, kernel, stride in CONV_STACKS[kind]:
            modules += [nn.Conv2d(channels, out, kernel, stride=stride), self.activation()]
            channels = out
        self.body = nn.Sequential(*modules)
        self._finish()


class ResidualBlock(nn.Module):
    """x + conv1(relu(conv0(relu(x)))), both convs 3x3 with padding 1 (the shape is kept)."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv0 = nn.Conv2d(channels, channels, 3, padding=1)
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x: Tensor) -> Tensor:
        return x + self.conv1(torch.relu(self.conv0(torch.relu(x))))


class ImpalaStack(nn.Module):
    """conv 3x3 (padding 1), max-pool 3x3 stride 2 (padding 1), two residual blocks."""

    def __init__(self, in_channels: int, channels: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(in_channels, channels, 3, padding=1)
        self.res0 = ResidualBlock(channels)
        self.res1 = ResidualBlock(channels)

    def forward(self, x: Tensor) -> Tensor:
        return self.res1(self.res0(functional.max_pool2d(self.conv(x), 3, stride=2, padding=1)))


class ImpalaEncoder(ImageEncoder):
    """The IMPALA ResNet: one ImpalaStack per IMPALA_CHANNELS entry, ReLU, then the linear layer."""

    def __init__(self, space: gym.spaces.Box) -> None:
        super().__init__("impala", space)
        channels = [self.in_channels, *IMPALA_CHANNELS]
        self.body = nn.ModuleList(ImpalaStack(a, b) for a, b in zip(channels[:-1], channels[1:], strict=True))
        self._finish()

    def convs(self, x: Tensor) -> Tensor:
        for stack in self.body:
            x = stack(x)
        return torch.relu(x)


def make_image_encoder(kind: str, space: gym.spaces.Box) -> ImageEncoder:
    return ImpalaEncoder(space) if kind == "impala" else ConvStackEncoder(kind, space)


MIX_WIDTH = 256  # the layer that mixes a Dict encoder's parts


class MultiInputEncoder(nn.Module):
    """A Dict observation space's encoder: each image key (a 3-D Box, when `image_kind` is given) through its own
    convnet, every other key flattened, concatenated and through one MLP; the outputs concatenated (image keys in
    sorted order, then the MLP's: `parts`) and, where there are several, through one Linear + activation of
    MIX_WIDTH, so that the heads can read what the keys say together (a linear head on the bare concatenation cannot
    act on an image feature one way or another depending on a vector key). Takes a dict of tensors, each
    [*lead, *its shape]."""

    def __init__(self, space: gym.spaces.Dict, image_kind: str | None, layers: list[int], nonlinearity: str) -> None:
        super().__init__()
        for key, sub in space.spaces.items():
            if not isinstance(sub, gym.spaces.Box):
                raise ValueError(f"a Dict observation space: key {key!r} is {sub}; only Box keys are supported")
        keys = sorted(space.spaces)
        self.image_keys = [k for k in keys if image_kind is not None and is_image(space[k])]
        self.vector_keys = [k for k in keys if k not in self.image_keys]
        self.nonlinearity = nonlinearity
        self.images = nn.ModuleDict({k: make_image_encoder(image_kind, space[k]) for k in self.image_keys})
        self.vector_shapes = {k: tuple(int(d) for d in space[k].shape) for k in self.vector_keys}
        self.vector_dims = {k: len(shape) for k, shape in self.vector_shapes.items()}
        self.vector_sizes = {k: int(np.prod(shape, dtype=np.int64)) for k, shape in self.vector_shapes.items()}
        self.vector_size = sum(self.vector_sizes.values())
        self.mlp: nn.Sequential | None = None
        mlp_size = 0
        if self.vector_keys:
            self.mlp, mlp_size = build_mlp(self.vector_size, layers, nonlinearity)
        size = sum(e.out_size for e in self.images.values()) + mlp_size
        self.mix: nn.Sequential | None = None
        if len(self.images) + (self.mlp is not None) > 1:
            self.mix = nn.Sequential(nn.Linear(size, MIX_WIDTH), _ACTIVATIONS[nonlinearity]())
            size = MIX_WIDTH
        self.out_size = size

    def spec(self) -> dict[str, Any]:
        """The encoder as its numpy pass describes it (appo/numpy_policy/dict_encoder.py; the packed layout is the
        model's to add)."""
        images = {k: self.images[k].spec() for k in self.image_keys}
        return {"kind": "dict", "activation": self.nonlinearity, "images": images, "vector_keys": self.vector_keys}

    def forward(self, obs: Mapping[str, Tensor]) -> Tensor:
        parts = self.parts(obs)
        return self.mix(parts) if self.mix is not None else parts

    def parts(self, obs: Mapping[str, Tensor]) -> Tensor:
        """Each key's features, concatenated: the image keys' convnets in order, then the MLP's."""
        parts = [self.images[k](obs[k]) for k in self.image_keys]
        if self.mlp is not None:
            parts.append(self.mlp(self.vectors(obs)))
        return torch.cat(parts, dim=-1)

    def vectors(self, obs: Mapping[str, Tensor]) -> Tensor:
        """The vector keys of `obs` (each [*lead, *its shape]) flattened to float32 and concatenated in order:
        [*lead, vector_size], what the MLP reads."""
        flat = []
        for k in self.vector_keys:
            x = obs[k]
            flat.append(x.reshape(*x.shape[: x.dim() - self.vector_dims[k]], -1).float())
        return torch.cat(flat, dim=-1)

    def with_vectors(self, obs: Mapping[str, Tensor], flat: Tensor) -> dict[str, Tensor]:
        """`obs` with its vector keys replaced by the pieces of `flat` [*lead, vector_size] (`vectors`' layout)."""
        out, start = dict(obs), 0
        for k in self.vector_keys:
            size = self.vector_sizes[k]
            out[k] = flat[..., start : start + size].reshape(*flat.shape[:-1], *self.vector_shapes[k])
            start += size
        return out


@functools.cache
def _torch_dtype(numpy_dtype: str) -> torch.dtype:
    return torch.from_numpy(np.empty(0, dtype=numpy_dtype)).dtype


def unpack_obs(packed: Tensor, layout: tuple) -> dict[str, Tensor]:
    """Packed Dict observations (uint8 [*lead, total], appo/envs/packed_obs.py; `layout` its space's) back into a
    dict of tensors [*lead, *the key's shape] in each key's dtype, as the Dict encoder takes them."""
    lead = packed.shape[:-1]
    out = {}
    for k in layout:
        part = packed[..., k.offset : k.offset + k.nbytes]
        dtype = _torch_dtype(k.dtype)
        if dtype != torch.uint8:
            part = part.contiguous().view(dtype)
        out[k.key] = part.reshape(*lead, *k.shape)
    return out


def encoder_kind(cfg: Any, space: gym.Space) -> str:
    """Which encoder `--encoder` gives for `space`: "mlp", an image encoder's name, or "dict" (MultiInputEncoder).
    ValueError, one line, for an unknown value or a convnet asked for without any image to read."""
    choice = getattr(cfg, "encoder", "auto")
    if choice not in ENCODERS:
        raise ValueError(f"--encoder={choice}: must be one of {', '.join(ENCODERS)}")
    if isinstance(space, gym.spaces.Dict):
        return "dict"
    if choice == "auto":
        return "nature" if is_image(space) else "mlp"
    if choice != "mlp" and not is_image(space):
        raise ValueError(f"--encoder={choice}: needs image observations (a 3-D Box), the env has {space}")
    return choice


def require_mlp(cfg: Any, space: gym.Space) -> None:
    """For models with MLPs only (SAC's): ValueError, one line, unless `--encoder` gives the MLP for `space`."""
    kind = encoder_kind(cfg, space)
    if kind == "dict":
        raise ValueError(f"--algo={cfg.algo}: Dict observation spaces are not supported (its networks are MLPs)")
    if kind != "mlp":
        raise ValueError(
            f"--algo={cfg.algo}: image observations {space} need a convnet, which its networks do not have "
            "(--encoder=mlp flattens them into the MLP)"
        )


def make_encoder(cfg: Any, space: gym.Space, mlp_layers: list[int] | None = None) -> tuple[nn.Module, int]:
    """The encoder `encoder_kind` names for `space`, and its output width. `mlp_layers`: the MLP's hidden sizes
    (default `--encoder_mlp_layers`; the MLP part of a Dict encoder too)."""
    kind = encoder_kind(cfg, space)
    layers = list(cfg.encoder_mlp_layers if mlp_layers is None else mlp_layers)
    if kind == "mlp":
        return build_mlp(int(np.prod(space.shape)), layers, cfg.nonlinearity)
    if kind == "dict":
        choice = getattr(cfg, "encoder", "auto")
        image_kind = None if choice == "mlp" else ("nature" if choice == "auto" else choice)
        encoder: nn.Module = MultiInputEncoder(space, image_kind, layers, cfg.nonlinearity)
    else:
        encoder = make_image_encoder(kind, space)
    return encoder, encoder.out_size


def set_compute_dtype(model: nn.Module, dtype: torch.dtype | None) -> None:
    """Every convnet of `model` runs its convs and linear layer in `dtype` (None: float32); see ImageEncoder."""
    for module in model.modules():
        if isinstance(module, ImageEncoder):
            module.compute_dtype = dtype
