"""Sharding each batch over the learner ranks of a policy (`--learner_world_size`), by whole trajectories.

Rank 0 takes the batch as the single learner does (appo/learning/batcher.py: the next iteration's slots, those
beyond --max_policy_lag dropped), splits the kept trajectories into G contiguous parts (rank 0's first), sends
each rank r > 0 its part's slot indices (`ShardReady`: only indices travel, the trajectories stay in shared
memory), copies its own part, and waits until every rank has copied before the slot groups can go back to the
actor workers. Rank r copies its part as soon as the message arrives, on its receiving thread, so the wait is
a copy's length, not a training iteration's."""

from __future__ import annotations

from typing import Any

import torch

from appo.learning.batcher import Batch, Batcher
from appo.learning.distributed import RankLink, shard_sizes
from appo.protocol.messages import ShardReady, SlotsReleased, TrajectoryReady


class ShardingBatcher:
    """Rank 0's batcher: the batcher's calls, with `take` returning rank 0's shard of the batch."""

    def __init__(self, batcher: Batcher, link: RankLink, policy_id: int, clock: Any = None) -> None:
        """`clock()`: seconds of the session (the schedules' clock), sent with every shard."""
        self.batcher, self.link, self.policy_id, self.clock = batcher, link, policy_id, clock
        self.batches = 0  # batches taken (the number ShardReady and RankLink.copied count in)

    def add(self, msg: TrajectoryReady) -> None:
        self.batcher.add(msg)

    def is_ready(self) -> bool:
        return self.batcher.is_ready()

    def mark_released(self, releases: list[SlotsReleased]) -> None:
        self.batcher.mark_released(releases)

    def take(self, version: int, max_policy_lag: int) -> Batch:
        taken = self.batcher.take_slots(version, max_policy_lag)
        seconds = self.clock() if self.clock is not None else -1.0
        self.batches += 1
        sizes = shard_sizes(int(taken.index.numel()), self.link.world_size)
        shards = torch.split(taken.index, sizes)
        for rank in range(1, self.link.world_size):
            slots = tuple(int(s) for s in shards[rank])
            msg = ShardReady(self.policy_id, rank, self.batches, slots, taken.env_steps, seconds)
            self.link.inboxes[rank].put(msg)
        tensors = self.batcher.copy(shards[0])
        # The slot groups may go back to the actors (async mode: now) only once every rank holds its copy.
        self.link.wait_copied(self.batches)
        return Batch(tensors, taken.env_steps, taken.dropped, taken.releases, seconds=seconds)


def take_shard(batcher: Batcher, link: RankLink, rank: int, msg: ShardReady) -> Batch:
    """Rank r > 0: copy the shard `msg` names out of shared memory and tell rank 0 it is done."""
    tensors = batcher.copy(torch.tensor(msg.slots, dtype=torch.int64))
    link.copied[rank] = msg.batch_idx
    return Batch(tensors, msg.env_steps, 0, [], seconds=msg.seconds)
