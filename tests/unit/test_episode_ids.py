"""The episode-id codec (appo/protocol/episode_ids.py): what an actor worker packs, a learner reads back."""

from __future__ import annotations

import numpy as np

from appo.protocol import episode_ids


def test_ids_unpack_to_what_was_packed() -> None:
    envs = np.array([0, 1, 15, 2**20], dtype=np.int64)
    counts = np.array([0, 7, 2**24 - 1, 123], dtype=np.int64)
    ids = episode_ids.pack(envs, 513, counts)
    assert [episode_ids.unpack(int(i)) for i in ids] == [
        (int(e), 513, int(c)) for e, c in zip(envs, counts, strict=True)
    ]
    assert [episode_ids.env_of(int(i)) for i in ids] == envs.tolist()


def test_a_restarted_worker_gives_its_episodes_new_ids() -> None:
    envs, counts = np.arange(4, dtype=np.int64), np.zeros(4, dtype=np.int64)
    first, restarted = episode_ids.pack(envs, 0, counts), episode_ids.pack(envs, 1, counts)
    assert not set(first.tolist()) & set(restarted.tolist())
    assert [episode_ids.env_of(int(i)) for i in restarted] == envs.tolist()
