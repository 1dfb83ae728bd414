"""On PYTHONPATH (tests/integration/test_uint8_observations.py), this makes every process of a run that imports the
learner's batcher record what `Batcher.copy` hands the algorithm: per batch, the observations' dtype and the sha1 of
every frame (obs [N, T + 1, ...]), one JSON line in $APPO_FRAME_DIR/batches-<pid>.jsonl. Nothing else changes: the
batch goes on as it was. The module is patched as it is imported (no process imports it earlier because of this)."""

from __future__ import annotations

import importlib.abc
import importlib.util
import json
import os
import sys

TARGET = "appo.learning.batcher"


def _patch(module) -> None:
    import hashlib

    import numpy as np

    copy = module.Batcher.copy

    def spying_copy(self, index):
        batch = copy(self, index)
        obs = batch["obs"].cpu().numpy()
        frames = obs.reshape(-1, *obs.shape[2:])
        hashes = [hashlib.sha1(np.ascontiguousarray(f).tobytes()).hexdigest() for f in frames]
        path = os.path.join(os.environ["APPO_FRAME_DIR"], f"batches-{os.getpid()}.jsonl")
        with open(path, "a") as f:
            f.write(json.dumps({"dtype": str(batch["obs"].dtype), "frames": hashes}) + "\n")
        return batch

    module.Batcher.copy = spying_copy


class _Hook(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != TARGET:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            _patch(module)

        spec.loader.exec_module = exec_module
        return spec


if os.environ.get("APPO_FRAME_DIR"):
    sys.meta_path.insert(0, _Hook())
