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

from appo.buffers import group_number
from appo.messages import SlotsReleased, TrajectoryReady


class Batch(NamedTuple):
    tensors: dict[str, torch.Tensor]  # each [N, T(+1), ...] on the learner's device
    env_steps: int  # steps taken out of the buffers, dropped ones included
    dropped: int  # trajectories dropped for policy lag
    lag: torch.Tensor  # [N * T] policy lag of every kept sample (versions behind at batch time)
    releases: list[SlotsReleased]  # groups fully copied
    # Env steps counted up to and including this batch when it was taken: the clock of the learning-rate
    # schedule, the same on every learner rank (-1: not set, the learner's count when it trains).
    env_steps_total: int = -1


class Taken(NamedTuple):
    """A batch chosen but not yet copied: what `Batch` holds, with slot indices instead of tensors."""

    index: torch.Tensor  # [N] slots of the kept trajectories, in batch order
    env_steps: int
    dropped: int
    lag: torch.Tensor
    releases: list[SlotsReleased]


class Batcher:
    def __init__(
        self,
        buffers: dict[str, torch.Tensor],
        trajectories_per_batch: int,
        device: str,
        group_at_learner: torch.Tensor | None = None,
        groups_per_worker_split: tuple[int, int] = (1, 1),
    ) -> None:
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
        return self.num_pending >= self.needed

    def take(self, version: int, max_policy_lag: int) -> Batch:
        """Copy the next `trajectories_per_batch` trajectories out of shared memory."""
        taken = self.take_slots(version, max_policy_lag)
        return Batch(self.copy(taken.index), taken.env_steps, taken.dropped, taken.lag, taken.releases)

    def take_slots(self, version: int, max_policy_lag: int) -> Taken:
        """The slots of the next `trajectories_per_batch` trajectories, less those older than `max_policy_lag`
        versions, without copying them (several learner ranks each copy their own: appo/learning/shards.py)."""
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
        index = torch.cat(slots)
        T = self.buf["rewards"].shape[1]
        versions = self.buf["policy_versions"][index]
        lag = version - versions
        keep = lag.max(dim=1).values <= max_policy_lag
        if not bool(keep.all()):
            index, lag = index[keep], lag[keep]
        dropped = int((~keep).sum())
        return Taken(index, self.needed * T, dropped, lag.flatten(), releases)

    def copy(self, index: torch.Tensor) -> dict[str, torch.Tensor]:
        """The trajectories in slots `index` [n], every field of the spec table (appo/buffers.py), the
        algorithm's own included, each [n, T(+1), ...] on the learner's device."""
        return {k: v[index].to(self.device, non_blocking=True) for k, v in self.buf.items()}

    def mark_released(self, releases: list[SlotsReleased]) -> None:
        """Record that these groups leave the learner (just before SlotsReleased is sent), so that an actor
        worker restarted in between knows they are free."""
        if self.at_learner is None:
            return
        for r in releases:
            group = group_number(r.worker_idx, r.split_idx, r.group_idx, self.num_splits, self.groups_per_split)
            self.at_learner[group, r.policy_id] = 0
