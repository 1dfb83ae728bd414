"""An env that reports on the process it runs in (tests/integration/test_torch_free_actors.py): when built and at every
reset it writes, to $APPO_PROBE_DIR/<pid>.json, the process's name, the torch modules it has imported and its resident
memory. Dynamics as tests/support/faulty_envs.py's (dynamics-free, 50-step episodes)."""

from __future__ import annotations

import json
import multiprocessing
import os
import sys
from pathlib import Path

import numpy as np

from tests.support.faulty_envs import _Base


class ProbeEnv(_Base):
    def __init__(self) -> None:
        super().__init__()
        self.probe()

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        self.probe()
        return super().reset(seed=seed, options=options)

    def probe(self) -> None:
        where = os.environ.get("APPO_PROBE_DIR")
        if where:
            torch = sorted(m for m in sys.modules if m == "torch" or m.startswith("torch."))
            with open(f"/proc/{os.getpid()}/statm") as f:
                rss = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
            report = {"name": multiprocessing.current_process().name, "torch": torch, "rss": rss}
            path = Path(where) / f"{os.getpid()}.json"
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(report))
            tmp.replace(path)
