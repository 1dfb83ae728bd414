"""Batcher: trajectories leave the shared slots in the arrival order of TrajectoryReady (a group may straddle
two batches and is released only once fully copied), stale ones are dropped by policy lag, released groups are
cleared in the group_at_learner control tensor, and `envs` messages take exactly their slots; synchronous PPO's
iterations take the same number of groups from every split, in each split's order."""

from __future__ import annotations

from typing import NamedTuple

import gymnasium as gym
import numpy as np
import pytest
import torch

from appo.config.cfg import Cfg
from appo.config.derive import Derived, derive
from appo.learning.batcher import Batch, Batcher
from appo.protocol.buffers import allocate_control, allocate_trajectories, first_slot, group_index
from appo.protocol.messages import SlotsReleased, TrajectoryReady

OBS = gym.spaces.Box(-1, 1, (5,), np.float32)
ACT = gym.spaces.Box(-1, 1, (2,), np.float32)
T = 4  # rollout
VERSION = 10  # the learner's version in every take() below unless a test says otherwise


class Setup(NamedTuple):
    cfg: Cfg
    derived: Derived
    buffers: dict[str, torch.Tensor]
    at_learner: torch.Tensor  # [num_groups, num_policies] uint8


def make_setup() -> Setup:
    """2 workers x 2 splits x 3 envs per split, 2 policies (so more than one slot group per split)."""
    cfg = Cfg(num_workers=2, num_envs_per_worker=6, worker_num_splits=2, rollout=T, batch_size=16, num_policies=2)
    d = derive(cfg)
    assert d.envs_per_split == 3 and d.slot_groups_per_split > 2, d
    buffers = allocate_trajectories(cfg, d, OBS, ACT)
    # Every cell of slot s holds s, so a batch row tells which slot it was copied from.
    for slot in range(d.num_slots):
        for key in buffers:
            if key != "policy_versions":
                buffers[key][slot] = slot
    buffers["policy_versions"].fill_(VERSION)
    return Setup(cfg, d, buffers, allocate_control(cfg, d)["group_at_learner"])


def make_batcher(s: Setup, trajectories_per_batch: int) -> Batcher:
    return Batcher(
        s.buffers,
        trajectories_per_batch,
        "cpu",
        s.at_learner,
        (s.cfg.worker_num_splits, s.derived.slot_groups_per_split),
    )


def ready(
    s: Setup, worker: int, split: int, group: int, policy_id: int = 0, envs: tuple[int, ...] | None = None
) -> TrajectoryReady:
    first = first_slot(s.cfg, s.derived, worker, split, group)
    num_envs = s.derived.envs_per_split if envs is None else len(envs)
    return TrajectoryReady(policy_id, worker, split, group, first, num_envs, envs)


def slots(msg: TrajectoryReady) -> list[int]:
    envs = range(msg.num_envs) if msg.envs is None else msg.envs
    return [msg.first_slot + e for e in envs]


def released(msg: TrajectoryReady) -> SlotsReleased:
    return SlotsReleased(msg.worker_idx, msg.split_idx, msg.group_idx, msg.policy_id)


def batch_slots(batch: Batch) -> list[int]:
    """The slot each batch row came from; every tensor of the batch must agree on it row by row."""
    rows = batch.tensors["rewards"][:, 0].long()
    for key, tensor in batch.tensors.items():
        if key == "policy_versions":
            continue
        per_row = tensor.reshape(tensor.shape[0], -1).long()
        assert torch.all(per_row == rows[:, None]), f"{key} rows come from other slots than rewards: {per_row}"
    return rows.tolist()


def hand_over(s: Setup, msg: TrajectoryReady) -> None:
    """What the actor worker does before it sends TrajectoryReady."""
    s.at_learner[group_index(s.cfg, s.derived, msg.worker_idx, msg.split_idx, msg.group_idx), msg.policy_id] = 1


def test_arrival_order_and_a_group_straddling_two_batches():
    s = make_setup()
    batcher = make_batcher(s, trajectories_per_batch=4)
    # Arrival order differs from slot order on purpose.
    a, b, c = ready(s, 1, 1, 2), ready(s, 0, 0, 1), ready(s, 1, 0, 0)
    assert slots(a)[0] > slots(c)[0] > slots(b)[0]

    batcher.add(a)
    assert not batcher.is_ready(), "3 trajectories pending, 4 needed: must not be ready"
    batcher.add(b)
    assert batcher.is_ready(), "6 trajectories pending, 4 needed: must be ready"
    first = batcher.take(VERSION, max_policy_lag=100)
    expected = slots(a) + slots(b)[:1]
    assert batch_slots(first) == expected, f"first batch slots {batch_slots(first)} != {expected}"
    assert first.releases == [released(a)], f"only the fully copied group may be released, got {first.releases}"
    assert first.env_steps == 4 * T and first.dropped == 0, (first.env_steps, first.dropped)

    assert not batcher.is_ready(), "2 trajectories of b left, 4 needed: must not be ready"
    batcher.add(c)
    assert batcher.is_ready(), "5 trajectories pending, 4 needed: must be ready"
    second = batcher.take(VERSION, max_policy_lag=100)
    expected = slots(b)[1:] + slots(c)[:2]
    assert batch_slots(second) == expected, f"second batch slots {batch_slots(second)} != {expected}"
    assert second.releases == [released(b)], f"b is now fully copied, c is not: got {second.releases}"
    assert not batcher.is_ready(), "1 trajectory of c left: must not be ready"


def test_batch_is_a_copy_and_has_trajectory_shapes():
    s = make_setup()
    batcher = make_batcher(s, trajectories_per_batch=3)
    msg = ready(s, 0, 1, 0)
    batcher.add(msg)
    batch = batcher.take(VERSION, max_policy_lag=100)
    shapes = {k: tuple(v.shape) for k, v in batch.tensors.items()}
    assert shapes["obs"] == (3, T + 1, 5) and shapes["actions"] == (3, T, 2) and shapes["rewards"] == (3, T), shapes
    assert set(shapes) == set(s.buffers), f"batch fields {sorted(shapes)} != trajectory fields {sorted(s.buffers)}"
    # The actor refills a released group at once: the batch must not see that.
    s.buffers["rewards"][slots(msg)] = -1.0
    assert batch_slots(batch) == slots(msg), f"batch changed with the buffers: {batch.tensors['rewards']}"


def test_stale_trajectories_are_dropped_and_counted():
    s = make_setup()
    batcher = make_batcher(s, trajectories_per_batch=6)
    a, b = ready(s, 0, 0, 0), ready(s, 0, 1, 0)
    versions = {
        slots(a)[0]: [7, 7, 7, 7],  # lag 3 == max_policy_lag: kept
        slots(a)[1]: [6, 10, 10, 10],  # only its first step is 4 behind: dropped (the max counts)
        slots(a)[2]: [10, 10, 10, 10],  # lag 0: kept
        slots(b)[0]: [9, 8, 9, 10],  # kept
        slots(b)[1]: [0, 0, 0, 0],  # lag 10: dropped
        slots(b)[2]: [10, 9, 8, 7],  # kept, its last step has the maximal allowed lag
    }
    for slot, v in versions.items():
        s.buffers["policy_versions"][slot] = torch.tensor(v)
    batcher.add(a)
    batcher.add(b)
    batch = batcher.take(VERSION, max_policy_lag=3)

    kept = [slot for slot, v in versions.items() if VERSION - min(v) <= 3]
    assert batch_slots(batch) == kept, f"kept slots {batch_slots(batch)} != {kept}"
    assert batch.dropped == 2, f"dropped {batch.dropped} != 2"
    assert batch.env_steps == 6 * T, f"env_steps {batch.env_steps} != {6 * T} (dropped steps count too)"
    expected_lag = torch.tensor([VERSION - x for slot in kept for x in versions[slot]])
    kept_versions = batch.tensors["policy_versions"].flatten()
    assert torch.equal(VERSION - kept_versions, expected_lag), f"versions of kept rows {kept_versions.tolist()}"
    assert batch.releases == [released(a), released(b)], f"dropped trajectories free their group: {batch.releases}"


def test_all_dropped_gives_an_empty_batch():
    s = make_setup()
    batcher = make_batcher(s, trajectories_per_batch=3)
    batcher.add(ready(s, 1, 1, 1))
    batch = batcher.take(VERSION + 5, max_policy_lag=4)
    assert batch.dropped == 3 and batch.tensors["rewards"].shape[0] == 0, (batch.dropped, batch.tensors["rewards"])
    assert batch.tensors["policy_versions"].numel() == 0 and batch.env_steps == 3 * T, batch.env_steps


def test_release_clears_exactly_the_released_cells():
    s = make_setup()
    batcher = make_batcher(s, trajectories_per_batch=4)
    a, b, c = ready(s, 1, 0, 3), ready(s, 0, 1, 2), ready(s, 1, 1, 1)
    other = ready(s, 1, 0, 3, policy_id=1)  # a's group, the other policy's part: not this learner's
    for msg in (a, b, c, other):
        hand_over(s, msg)
    batcher.add(a)
    batcher.add(b)
    expected = s.at_learner.clone()

    first = batcher.take(VERSION, max_policy_lag=100)
    batcher.mark_released(first.releases)
    expected[group_index(s.cfg, s.derived, 1, 0, 3), 0] = 0
    assert torch.equal(s.at_learner, expected), f"after releasing a: {s.at_learner.nonzero().tolist()}"

    batcher.add(c)
    second = batcher.take(VERSION, max_policy_lag=100)
    assert second.releases == [released(b)], second.releases
    batcher.mark_released(second.releases)
    expected[group_index(s.cfg, s.derived, 0, 1, 2), 0] = 0
    held = s.at_learner.nonzero().tolist()
    assert torch.equal(s.at_learner, expected), f"after releasing b, cells held: {held}"
    assert sorted(held) == sorted(
        [[group_index(s.cfg, s.derived, 1, 1, 1), 0], [group_index(s.cfg, s.derived, 1, 0, 3), 1]]
    ), held


def test_mark_released_uses_the_group_index_of_buffers():
    s = make_setup()
    batcher = make_batcher(s, trajectories_per_batch=1)
    cfg, d = s.cfg, s.derived
    for w in range(cfg.num_workers):
        for split in range(cfg.worker_num_splits):
            for g in range(d.slot_groups_per_split):
                for p in range(cfg.num_policies):
                    s.at_learner.fill_(1)
                    batcher.mark_released([SlotsReleased(w, split, g, p)])
                    cleared = (s.at_learner == 0).nonzero().tolist()
                    want = [[group_index(cfg, d, w, split, g), p]]
                    assert cleared == want, f"SlotsReleased({w}, {split}, {g}, {p}) cleared {cleared}, not {want}"


@pytest.mark.parametrize("per_batch", [1, 3])
def test_envs_messages_take_exactly_their_slots(per_batch: int):
    """A group whose envs ran two policies: each learner takes only its own envs' slots, and each clears only
    its own column of group_at_learner."""
    s = make_setup()
    p0, p1 = make_batcher(s, per_batch), make_batcher(s, 1)
    mixed0, mixed1 = ready(s, 1, 1, 1, 0, envs=(0, 2)), ready(s, 1, 1, 1, 1, envs=(1,))
    tail = ready(s, 0, 0, 0, 0, envs=(2,))
    for msg in (mixed0, mixed1, tail):
        hand_over(s, msg)
    gi = group_index(s.cfg, s.derived, 1, 1, 1)

    p0.add(mixed0)
    p0.add(tail)
    p1.add(mixed1)
    taken0: list[int] = []
    releases0: list[SlotsReleased] = []
    while p0.is_ready():
        batch = p0.take(VERSION, max_policy_lag=100)
        taken0 += batch_slots(batch)
        releases0 += batch.releases
        p0.mark_released(batch.releases)
        if released(mixed0) not in releases0:
            assert s.at_learner[gi, 0] == 1, f"group released after {taken0} of {slots(mixed0)}"
    assert taken0 == slots(mixed0) + slots(tail), f"policy 0 took {taken0}"
    assert releases0 == [released(mixed0), released(tail)], releases0
    assert s.at_learner[gi].tolist() == [0, 1], f"policy 1 still holds its part: {s.at_learner[gi].tolist()}"

    batch1 = p1.take(VERSION, max_policy_lag=100)
    assert batch_slots(batch1) == slots(mixed1), f"policy 1 took {batch_slots(batch1)}"
    p1.mark_released(batch1.releases)
    assert s.at_learner.sum() == 0, f"cells still held: {s.at_learner.nonzero().tolist()}"


def test_synchronous_iterations_take_the_same_rounds_from_every_split_in_fill_order():
    """--collect_ahead: 2 workers x 2 splits, one round per iteration, two groups per split. Worker 0 fills both its
    groups (this iteration's and the next) before worker 1 fills any: the iteration must wait for worker 1's first
    round and take worker 0's first groups only; taken in arrival order it would hold both of worker 0's rounds and
    leave worker 1's first round, collected with the same weights, to be trained a version later still."""
    cfg = Cfg(num_workers=2, num_envs_per_worker=6, worker_num_splits=2, rollout=T, batch_size=12 * T)
    cfg.async_rl, cfg.collect_ahead = False, True
    d = derive(cfg)
    assert d.slot_groups_per_split == 2 and d.trajectories_per_iteration == 12, d
    s = Setup(cfg, d, allocate_trajectories(cfg, d, OBS, ACT), allocate_control(cfg, d)["group_at_learner"])
    for slot in range(d.num_slots):
        s.buffers["rewards"][slot] = slot
    batcher = Batcher(s.buffers, 12, "cpu", s.at_learner, (2, 2), rounds_per_split=1)
    fast = [ready(s, 0, split, group) for group in (0, 1) for split in (0, 1)]
    slow = [ready(s, 1, split, 0) for split in (0, 1)]
    for msg in fast:
        batcher.add(msg)
    assert not batcher.is_ready()  # 12 trajectories from worker 0 alone are not an iteration
    for msg in slow:
        batcher.add(msg)
    assert batcher.is_ready()
    batch = batcher.take(VERSION, 100)
    first_round = [m for m in fast if m.group_idx == 0] + slow
    assert sorted(batch.tensors["rewards"][:, 0].long().tolist()) == sorted(x for m in first_round for x in slots(m))
    assert sorted((r.worker_idx, r.split_idx, r.group_idx) for r in batch.releases) == sorted(
        (m.worker_idx, m.split_idx, m.group_idx) for m in first_round
    )
    assert not batcher.is_ready()  # worker 0's second round waits for worker 1's
    for msg in (ready(s, 1, split, 1) for split in (0, 1)):
        batcher.add(msg)
    second = batcher.take(VERSION, 100)
    assert {int(x) // d.envs_per_split for x in second.tensors["rewards"][:, 0]} == {
        group_index(cfg, d, w, split, 1) for w in (0, 1) for split in (0, 1)
    }
