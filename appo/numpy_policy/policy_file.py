"""The exported policy file (`python -m appo.export --format=npz`): one .npz that numpy alone reads back.

Inside, with no pickled objects (np.load(allow_pickle=False) reads it):
- `__meta__`: UTF-8 JSON as uint8, {"format": "appo-policy", "version": 1, "model": the numpy pass's description
  (appo/numpy_policy/ops.py), "cfg": the run's cfg (env, task split, trial length: what rebuilds the env),
  "observation_shape", "action": {"type": "Discrete", "n"} (and "start" where the space starts elsewhere than 0:
  the env takes the policy's index plus it) or {"type": "Box", "shape"}, "source": where the weights came from
  (checkpoint, version, env steps)};
- `state/<name>`: the model's state dict as numpy arrays, under torch's names;
- `action/low`, `action/high`: the Box action bounds (Box actions only).
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import numpy as np

from appo.utils.paths import write_bytes_atomic

FORMAT, VERSION = "appo-policy", 1


class PolicyFileError(ValueError):
    """An unreadable or foreign policy file; the message is one line naming the file."""


def write_policy_file(
    path: str | Path, meta: dict[str, Any], state: dict[str, np.ndarray], arrays: dict[str, np.ndarray]
) -> Path:
    """Write `meta` (JSON-able), `state` and other `arrays` to `path` atomically (temp file, fsync, rename)."""
    path = Path(path)
    payload = {"__meta__": np.frombuffer(json.dumps({"format": FORMAT, "version": VERSION, **meta}).encode(), np.uint8)}
    payload.update({f"state/{k}": np.asarray(v) for k, v in state.items()})
    payload.update(arrays)
    buffer = io.BytesIO()
    np.savez(buffer, **payload)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_bytes_atomic(path, buffer.getvalue())
    return path


def read_policy_file(path: str | Path) -> tuple[dict[str, Any], dict[str, np.ndarray], dict[str, np.ndarray]]:
    """(meta, state, other arrays) of a file written by `write_policy_file`. PolicyFileError when it is not one."""
    path = Path(path)
    if not path.is_file():
        raise PolicyFileError(f"{path}: no such file")
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {k: data[k] for k in data.files}
    except Exception as exc:  # not a zip, truncated, pickled objects: all mean "not our file"
        raise PolicyFileError(f"{path}: not a readable .npz ({type(exc).__name__}: {exc})") from exc
    if "__meta__" not in arrays:
        raise PolicyFileError(f"{path}: not an appo policy file (no __meta__)")
    meta = json.loads(arrays.pop("__meta__").tobytes().decode())
    if meta.get("format") != FORMAT or meta.get("version") != VERSION:
        raise PolicyFileError(
            f"{path}: format {meta.get('format')!r} version {meta.get('version')!r}; "
            f"this appo reads {FORMAT!r} version {VERSION}"
        )
    state = {k[len("state/") :]: v for k, v in arrays.items() if k.startswith("state/")}
    other = {k: v for k, v in arrays.items() if not k.startswith("state/")}
    return meta, state, other
