"""A child process body that imports no torch (tests/unit/test_shared_views.py): report what arrived, write back."""

from __future__ import annotations

import sys
from typing import Any


def child(arrays: dict, store: Any, nested: tuple, connection: Any) -> None:
    version, state = store.pull_state()
    torch_loaded = [m for m in sys.modules if m == "torch" or m.startswith("torch.")]
    arrays["obs"][1, 2] = 7.0
    nested[0][0] = 42
    connection.send(
        {
            "types": sorted({type(v).__name__ for v in arrays.values()}),
            "seen": float(arrays["obs"][0, 0]),
            "ints": arrays["steps"].tolist(),
            "version": version,
            "weight": float(state["w"][0, 1]),
            "torch": torch_loaded[:3],
        }
    )
    connection.close()
