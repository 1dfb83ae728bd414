"""UDRL learns LunarLander-v3 (issue 17's acceptance, slow: 12 minutes per seed on 2 cores). The figures come from
the run's last checkpoint, as benchmarks/udrl_lunarlander.py reads them; needs box2d (`pip install -e .[box2d]`)."""

from __future__ import annotations

import pytest

pytest.importorskip("Box2D")

from benchmarks.udrl_lunarlander import run_seed  # noqa: E402


@pytest.mark.slow
@pytest.mark.timeout(2 * 13 * 60 + 120)
def test_udrl_learns_lunarlander_in_12_minutes_per_seed(tmp_path):
    results = [run_seed(tmp_path, seed, 12.0, []) for seed in (0, 1)]
    for r in results:
        assert r["last10_return"] - r["first10_return"] >= 40, results
        assert r["top_buffer_return"] >= 30, results
    assert max(r["last10_return"] for r in results) >= -30, results
