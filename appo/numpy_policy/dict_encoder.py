"""The Dict observation encoder's forward pass in numpy (torch-free), for the `ActorCritic`'s numpy twin
(appo/numpy_policy/actor_critic.py) and exported Dict policies: appo/models/encoders.py's `MultiInputEncoder`
computed layer for layer. Each image key through its convnet (appo/numpy_policy/conv.py), the other keys flattened
to float32, concatenated, standardised by the model's running statistics (`--normalize_input`) and through the MLP,
the parts concatenated (image keys in sorted order, then the MLP's) and, where there are several, through the mixing
Linear + activation.

Observations come packed (appo/envs/packed_obs.py: one uint8 array of every key's bytes, as the trajectory buffers
hold them) or as a dict of arrays by key, each [B, *the key's shape].

A spec (what the description of a model carries as its "encoder"): {"kind": "dict", "activation": "tanh" | "relu" |
"elu" (the MLP's and the mixing layer's), "images": {key: an image encoder's spec}, "vector_keys": [key, ...],
"packed": [[key, dtype, shape, offset, nbytes], ...] (the packed layout; absent: dict observations only)}.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from appo.numpy_policy.conv import ImageEncoderPass
from appo.numpy_policy.ops import State, mlp, run_layers
from appo.utils import packed_layout


class DictEncoderPass:
    """`MultiInputEncoder`'s forward pass: obs (packed [B, total] uint8, or a dict of [B, *shape] arrays) ->
    features [B, F] float32, the weights read from `state` under `prefix` (e.g. "encoder")."""

    def __init__(
        self, state: State, prefix: str, spec: dict[str, Any], normalize: Callable[[np.ndarray], np.ndarray] | None
    ) -> None:
        self.images = {k: ImageEncoderPass(state, f"{prefix}.images.{k}", s) for k, s in sorted(spec["images"].items())}
        self.vector_keys = list(spec["vector_keys"])
        self.layers = mlp(state, f"{prefix}.mlp", spec["activation"])
        self.mix = mlp(state, f"{prefix}.mix", spec["activation"])  # empty for a single part
        self.packed = packed_layout.as_layout(spec.get("packed", []))
        self.normalize = normalize  # the vector keys' input normalisation (the model's), or None

    def unpack(self, packed: np.ndarray) -> dict[str, np.ndarray]:
        """Packed observations [B, total] as a dict of [B, *shape] arrays in each key's dtype (views where the
        bytes allow)."""
        if not self.packed:
            raise ValueError("this Dict policy was saved without a packed layout: pass a dict of arrays by key")
        return packed_layout.unpack(packed, self.packed)

    def __call__(self, obs: np.ndarray | Mapping[str, np.ndarray]) -> np.ndarray:
        x = obs if isinstance(obs, Mapping) else self.unpack(obs)
        parts = [encoder(np.asarray(x[k])) for k, encoder in self.images.items()]
        if self.vector_keys:
            flat = [np.asarray(x[k], dtype=np.float32).reshape(len(x[k]), -1) for k in self.vector_keys]
            vectors = np.concatenate(flat, axis=1)
            parts.append(run_layers(self.layers, vectors if self.normalize is None else self.normalize(vectors)))
        h = np.concatenate(parts, axis=1) if len(parts) > 1 else parts[0].astype(np.float32, copy=False)
        return run_layers(self.mix, h)


def encoder_pass(
    state: State, prefix: str, spec: dict[str, Any], normalize: Callable[[np.ndarray], np.ndarray] | None = None
) -> ImageEncoderPass | DictEncoderPass:
    """The numpy pass of the encoder `spec` describes: a convnet's or the Dict encoder's (whose vector keys
    `normalize` standardises, where given)."""
    if spec["kind"] == "dict":
        return DictEncoderPass(state, prefix, spec, normalize)
    return ImageEncoderPass(state, prefix, spec)
