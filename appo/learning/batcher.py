"""Full trajectory slots -> one training batch.

The batcher keeps the slot groups handed over by TrajectoryReady in arrival order, copies whole
trajectories out of shared memory once an iteration's worth is there, drops (and counts) those older
than `max_policy_lag` versions, and says which groups can go back to their actor workers. A group is
released only once all of its trajectories are copied, so a group can straddle two batches.

Backpressure follows from ownership: each split owns a fixed number of slot groups; while the learner
holds them all, that split's actor worker pauses (appo/sampling/env_runner.py `is_parked`).
"""

from __future__ import annotations

from collections import deque
from typing import NamedTuple

import torch

from appo.models.device import to_device
from appo.protocol.buffers import group_number
from appo.protocol.messages import SlotsReleased, TrajectoryReady


def within_lag(versions: torch.Tensor, version: int, max_policy_lag: int) -> torch.Tensor:
    """[N] bool: the trajectories (policy versions [N, T]) none of whose steps is more than `max_policy_lag`
    versions behind `version`. The one lag filter: when a batch is taken, and again when it is trained."""
    if versions.numel() == 0:
        return torch.ones(versions.shape[0], dtype=torch.bool)
    return (version - versions).max(dim=1).values <= max_policy_lag


class Batch(NamedTuple):
    tensors: dict[str, torch.Tensor]  # each [N, T(+1), ...] on the learner's device
    env_steps: int  # steps taken out of the buffers, dropped ones included
    dropped: int  # trajectories dropped for policy lag
    releases: list[SlotsReleased]  # groups fully copied
    # Env steps counted up to and including this batch when it was taken: the clock of the learning-rate
    # schedule, the same on every learner rank (-1: not set, the learner's count when it trains).
    env_steps_total: int = -1
    # Seconds of the session when it was taken (rank 0's clock, the same on every rank; -1: not set).
    seconds: float = -1.0


class Taken(NamedTuple):
    """A batch chosen but not yet copied: what `Batch` holds, with slot indices instead of tensors."""

    index: torch.Tensor  # [N] slots of the kept trajectories, in batch order
    env_steps: int
    dropped: int
    releases: list[SlotsReleased]


class Batcher:
    def __init__(
        self,
        buffers: dict[str, torch.Tensor],
        trajectories_per_batch: int,
        device: str,
        group_at_learner: torch.Tensor | None = None,
        groups_per_worker_split: tuple[int, int] = (1, 1),
        rounds_per_split: int | None = None,
    ) -> None:
        """`rounds_per_split`: synchronous PPO's iteration is that many groups of every split, each split's in the
        order it filled them, not the first groups to arrive (see `take_slots`); None: arrival order."""
        self.rounds = rounds_per_split
        self.buf = buffers
        self.at_learner = group_at_learner
        self.num_splits, self.groups_per_split = groups_per_worker_split
        self.needed = trajectories_per_batch
        self.device = device
        # [TrajectoryReady, its slots, number of its trajectories already taken]
        self.pending: deque[list] = deque()
        self.num_pending = 0

    def add(self, msg: TrajectoryReady) -> None:
        if msg.envs is None:
            slots = torch.arange(msg.first_slot, msg.first_slot + msg.num_envs)
        else:
            slots = msg.first_slot + torch.tensor(msg.envs, dtype=torch.int64)
        self.pending.append([msg, slots, 0])
        self.num_pending += msg.num_envs

    def is_ready(self) -> bool:
        if self.rounds is None:
            return self.num_pending >= self.needed
        return sum(self._per_split(self.rounds).values()) >= self.needed

    def _per_split(self, limit: int) -> dict[tuple[int, int], int]:
        """Trajectories pending per split, counting at most `limit` messages of each."""
        counts: dict[tuple[int, int], int] = {}
        messages: dict[tuple[int, int], int] = {}
        for msg, _, _ in self.pending:
            key = (msg.worker_idx, msg.split_idx)
            if messages.get(key, 0) < limit:
                messages[key] = messages.get(key, 0) + 1
                counts[key] = counts.get(key, 0) + msg.num_envs
        return counts

    def take(self, version: int, max_policy_lag: int) -> Batch:
        """Copy the next `trajectories_per_batch` trajectories out of shared memory."""
        taken = self.take_slots(version, max_policy_lag)
        return Batch(self.copy(taken.index), taken.env_steps, taken.dropped, taken.releases)

    def take_slots(self, version: int, max_policy_lag: int) -> Taken:
        """The slots of the next `trajectories_per_batch` trajectories, less those older than `max_policy_lag`
        versions, without copying them (several learner ranks each copy their own: appo/learning/shards.py)."""
        if self.rounds is not None:
            return self._take_rounds(version, max_policy_lag)
        slots: list[torch.Tensor] = []
        releases: list[SlotsReleased] = []
        want = self.needed
        while want > 0:
            entry = self.pending[0]
            msg, msg_slots, taken = entry
            n = min(msg.num_envs - taken, want)
            slots.append(msg_slots[taken : taken + n])
            entry[2] += n
            want -= n
            if entry[2] == msg.num_envs:
                self.pending.popleft()
                releases.append(
                    SlotsReleased(msg.worker_idx, msg.split_idx, msg.group_idx, msg.policy_id, msg.incarnation)
                )
        self.num_pending -= self.needed
        return self._taken(torch.cat(slots), releases, version, max_policy_lag)

    def _take_rounds(self, version: int, max_policy_lag: int) -> Taken:
        """Synchronous PPO: the first `rounds` groups of every split. With --collect_ahead a split holds twice that,
        and a fast split can fill its next iteration's groups before a slow one fills this iteration's; taken in
        arrival order, an iteration could then hold two rounds of the fast split, and the slow split's groups,
        left for the next iteration, would be trained two versions after the weights that collected them. A
        split starts its groups of iteration k only once its groups of k - 2 are released, after training, so
        taking each split's groups in its own order keeps every sample within one version."""
        taken: dict[tuple[int, int], int] = {}
        slots, releases, rest = [], [], deque()
        for entry in self.pending:
            msg, msg_slots, _ = entry
            key = (msg.worker_idx, msg.split_idx)
            if taken.get(key, 0) < self.rounds:
                taken[key] = taken.get(key, 0) + 1
                slots.append(msg_slots)
                releases.append(
                    SlotsReleased(msg.worker_idx, msg.split_idx, msg.group_idx, msg.policy_id, msg.incarnation)
                )
            else:
                rest.append(entry)
        self.pending = rest
        index = torch.cat(slots)
        self.num_pending -= len(index)
        return self._taken(index, releases, version, max_policy_lag)

    def _taken(self, index: torch.Tensor, releases: list[SlotsReleased], version: int, max_policy_lag: int) -> Taken:
        """The batch of trajectories in slots `index`, less those older than `max_policy_lag` versions."""
        n = len(index)
        T = self.buf["rewards"].shape[1]
        keep = within_lag(self.buf["policy_versions"][index], version, max_policy_lag)
        if not bool(keep.all()):
            index = index[keep]
        return Taken(index, n * T, int((~keep).sum()), releases)

    def copy(self, index: torch.Tensor) -> dict[str, torch.Tensor]:
        """The trajectories in slots `index` [n], every field of the spec table (appo/protocol/buffers.py), the
        algorithm's own included, each [n, T(+1), ...] on the learner's device."""
        return {k: to_device(v[index], self.device, non_blocking=True) for k, v in self.buf.items()}

    def mark_released(self, releases: list[SlotsReleased]) -> None:
        """Record that these groups leave the learner (just before SlotsReleased is sent), so that an actor
        worker restarted in between knows they are free."""
        if self.at_learner is None:
            return
        for r in releases:
            group = group_number(r.worker_idx, r.split_idx, r.group_idx, self.num_splits, self.groups_per_split)
            self.at_learner[group, r.policy_id] = 0
