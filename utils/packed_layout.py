"""The packed layout of Dict observations, in numpy alone (no gymnasium, no torch): where each key's bytes lie in
the one uint8 vector that carries a Dict observation through the engine (appo/envs/packed_obs.py), and the packing
and unpacking both sides of it do: the env wrapper and the torch-free policy (appo/numpy_policy/).

Keys are laid out by item size, largest first (then by name), and the total is padded to a multiple of the largest
item size, so that each key starts at a multiple of its own item size in every row: a slice of the bytes can be
viewed as its dtype without a copy."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

import numpy as np


class PackedKey(NamedTuple):
    key: str
    dtype: str  # numpy's dtype string, e.g. "<f4", "|u1"
    shape: tuple[int, ...]
    offset: int  # in bytes
    nbytes: int


def plan(keys: Mapping[str, tuple[Any, tuple[int, ...]]]) -> tuple[tuple[PackedKey, ...], int]:
    """(the layout, the total bytes a row) of keys given as {key: (dtype, shape)}."""
    order = sorted(keys, key=lambda k: (-np.dtype(keys[k][0]).itemsize, k))
    layout, offset = [], 0
    for key in order:
        dtype, shape = np.dtype(keys[key][0]), tuple(int(s) for s in keys[key][1])
        nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        layout.append(PackedKey(key, dtype.str, shape, offset, nbytes))
        offset += nbytes
    widest = max((np.dtype(keys[k][0]).itemsize for k in order), default=1)
    return tuple(layout), max(-(-offset // widest) * widest, 1)


def as_layout(rows: Iterable[Any]) -> tuple[PackedKey, ...]:
    """A layout from its saved form: [key, dtype, shape, offset, nbytes] lists or {field: value} dicts."""
    keys = [PackedKey(**r) if isinstance(r, Mapping) else PackedKey(*r) for r in rows]
    return tuple(k._replace(shape=tuple(int(s) for s in k.shape)) for k in keys)


def pack(obs: Mapping[str, Any], layout: tuple[PackedKey, ...], total: int) -> np.ndarray:
    """One observation (a dict by key), or a batch (each key [*lead, *shape]), as packed bytes [*lead, total]."""
    first = layout[0]
    value = np.asarray(obs[first.key])
    lead = value.shape[: value.ndim - len(first.shape)]
    out = np.zeros((*lead, total), np.uint8)
    for k in layout:
        value = np.ascontiguousarray(obs[k.key], dtype=k.dtype).reshape(*lead, -1)
        out[..., k.offset : k.offset + k.nbytes] = value.view(np.uint8)
    return out


def unpack(packed: np.ndarray, layout: tuple[PackedKey, ...]) -> dict[str, np.ndarray]:
    """Packed observations [*lead, total] back into a dict of arrays [*lead, *the key's shape] in each key's dtype
    (uint8 keys as views, the others copied to be viewed as their dtype)."""
    packed = np.asarray(packed, dtype=np.uint8)
    lead = packed.shape[:-1]
    out = {}
    for k in layout:
        part = packed[..., k.offset : k.offset + k.nbytes]
        if np.dtype(k.dtype) != np.uint8:
            part = np.ascontiguousarray(part).view(k.dtype)
        out[k.key] = part.reshape(*lead, *k.shape)
    return out
