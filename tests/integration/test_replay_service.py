"""SAC's replay in Ray replay actors (appo/backends/ray/replay_shards.py), on a private Ray instance: two shards fed
by two "workers" through ShardPusher; the learner's client samples whole rows (never torn, never an unfilled one)
from both shards in proportion to what they hold, and a saved replay loads back into the shards row for row."""

from __future__ import annotations

import os
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from tests.support.ray_cluster import needs_ray

OBS, ACT = 3, 2


def chunk(worker: int, first: int, n: int) -> dict[str, np.ndarray]:
    """n transitions whose fields all encode (worker, row id), so a torn or mixed row shows."""
    ids = np.arange(first, first + n, dtype=np.float32)
    obs = np.stack([np.full(n, worker, np.float32), ids, ids * 2], axis=1)
    return {
        "obs": obs,
        "actions": np.stack([ids / 1e4, -ids / 1e4], axis=1),
        "rewards": ids + 1000 * worker,
        "next_obs": obs + 1,
        "terminated": (ids % 2).astype(np.float32),
    }


def check_rows(b: dict[str, torch.Tensor]) -> None:
    worker, ids = b["obs"][:, 0], b["obs"][:, 1]
    torch.testing.assert_close(b["obs"][:, 2], ids * 2, rtol=0, atol=0)
    torch.testing.assert_close(b["next_obs"], b["obs"] + 1, rtol=0, atol=0)
    torch.testing.assert_close(b["rewards"], ids + 1000 * worker, rtol=0, atol=0)
    torch.testing.assert_close(b["actions"][:, 0], ids / 1e4)
    torch.testing.assert_close(b["terminated"], ids % 2, rtol=0, atol=0)


@pytest.fixture
def ray_instance():
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    import ray

    ray.init(num_cpus=1, include_dashboard=False, logging_level="warning", namespace="replay_test")
    try:
        yield ray
    finally:
        ray.shutdown()


@needs_ray
@pytest.mark.timeout(120)
@pytest.mark.slow
def test_two_shards_fed_by_two_workers_sample_whole_rows_in_proportion_and_save_and_load(ray_instance):
    from appo.backends.ray.replay_shards import ReplayLocation, ShardedReplay, ShardPusher, create_shards, shard_names

    ray = ray_instance
    cfg = SimpleNamespace(replay_size=1000, num_replay_shards=2, ray_max_restarts=0, seed=0)
    shards = create_shards(cfg, (OBS,), ACT)
    location = ReplayLocation(ray.get_runtime_context().gcs_address, "replay_test", shard_names(2))
    pushers = [ShardPusher(shards, w) for w in (0, 1)]
    # Worker 0 sends 3 chunks of 100 (shards 0, 1, 0), worker 1 one chunk of 50 (shard 1): 200 and 150 rows.
    for first in (0, 100, 200):
        pushers[0].push(chunk(0, first, 100))
    pushers[1].push(chunk(1, 0, 50))
    stats = [ray.get(s.stats.remote()) for s in shards]
    assert [s["size"] for s in stats] == [200, 150]
    assert stats[0]["from_worker"] == {0: 200} and stats[1]["from_worker"] == {0: 100, 1: 50}

    replay = ShardedReplay(location, cfg.replay_size, "cpu")
    assert replay.size == 350
    batches = [replay.sample(64) for _ in range(200)]
    assert all(len(b["rewards"]) == 64 for b in batches)
    rows = {k: torch.cat([b[k] for b in batches]) for k in batches[0]}
    check_rows(rows)
    from_shard_0 = ((rows["obs"][:, 0] == 0) & ((rows["obs"][:, 1] < 100) | (rows["obs"][:, 1] >= 200))).float()
    assert abs(float(from_shard_0.mean()) - 200 / 350) < 0.03  # 12,800 draws: uniform over all 350 rows
    assert len({tuple(r) for r in rows["obs"].tolist()}) == 350  # every filled row drawn, nothing else

    state = replay.state_dict()
    assert state["size"] == 350
    check_rows(state["rows"])
    for s in shards:
        ray.kill(s, no_restart=True)
    fresh = create_shards(SimpleNamespace(**{**vars(cfg), "seed": 1}), (OBS,), ACT)  # held: Ray frees unheld actors
    reloaded = ShardedReplay(location, cfg.replay_size, "cpu")
    reloaded.load_state_dict(state)
    assert reloaded.sizes == [175, 175]
    again = reloaded.state_dict()
    assert sorted(map(tuple, again["rows"]["obs"].tolist())) == sorted(map(tuple, state["rows"]["obs"].tolist()))
    check_rows(again["rows"])
    assert [ray.get(s.stats.remote())["size"] for s in fresh] == [175, 175]
