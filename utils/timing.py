"""Named time accumulators: each component times its phases (env step, waiting, inference, training)
and prints the profile at shutdown, so the place where time goes is visible without a profiler."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager


class Timing:
    def __init__(self) -> None:
        self.totals: dict[str, float] = defaultdict(float)
        self.counts: dict[str, int] = defaultdict(int)
        self.start = time.perf_counter()

    @contextmanager
    def add_time(self, key: str) -> Iterator[None]:
        begin = time.perf_counter()
        try:
            yield
        finally:
            self.totals[key] += time.perf_counter() - begin
            self.counts[key] += 1

    def profile(self) -> str:
        """One line: each key's total seconds and share of this component's wall time."""
        wall = max(time.perf_counter() - self.start, 1e-9)
        parts = [f"{k}={v:.2f}s ({100 * v / wall:.0f}%)" for k, v in sorted(self.totals.items(), key=lambda i: -i[1])]
        return f"wall={wall:.1f}s " + " ".join(parts)
