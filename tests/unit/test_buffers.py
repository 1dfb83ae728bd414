"""Trajectory buffers: spec shapes and dtypes, poison fill, slot layout, and a round trip of slot data
written by a real child process and read back here."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch

from appo.config.cfg import Cfg
from appo.config.derive import derive
from appo.protocol.buffers import POISON, allocate_trajectories, first_slot, trajectory_spec
from appo.protocol.processes import spawn_context

OBS = gym.spaces.Box(-1, 1, (5,), np.float32)
ACT = gym.spaces.Box(-1, 1, (3,), np.float32)


def test_spec_shapes_and_dtypes():
    cfg = Cfg(rollout=16, use_rnn=True, rnn_type="lstm", rnn_size=8)
    spec = trajectory_spec(cfg, OBS, ACT)
    assert spec["obs"].shape == (17, 5) and spec["obs"].dtype == torch.float32
    assert spec["actions"].shape == (16, 3)
    assert spec["rnn_states"].shape == (17, 16)  # h and c of an LSTM
    assert spec["policy_versions"].dtype == torch.int64
    discrete = trajectory_spec(cfg, OBS, gym.spaces.Discrete(4))
    assert discrete["actions"].shape == (16, 1) and discrete["actions"].dtype == torch.int64


def test_allocation_is_shared_and_poisoned():
    cfg = Cfg(num_workers=2, num_envs_per_worker=4, rollout=8, batch_size=64)
    d = derive(cfg)
    bufs = allocate_trajectories(cfg, d, OBS, ACT)
    assert all(t.is_shared() for t in bufs.values())
    assert bufs["obs"].shape == (d.num_slots, 9, 5)
    assert torch.all(bufs["rewards"] == torch.tensor(POISON))
    assert torch.all(bufs["policy_versions"] == -1)
    assert torch.all(bufs["rnn_states"] == 0)


def test_slot_layout_covers_every_slot_once():
    cfg = Cfg(num_workers=3, num_envs_per_worker=4, worker_num_splits=2, rollout=8, batch_size=64)
    d = derive(cfg)
    seen = []
    for w in range(cfg.num_workers):
        for s in range(cfg.worker_num_splits):
            for g in range(d.slot_groups_per_split):
                first = first_slot(cfg, d, w, s, g)
                seen += list(range(first, first + d.envs_per_split))
    assert sorted(seen) == list(range(d.num_slots))


def _child_writes(bufs: dict, slot: int) -> None:
    bufs["obs"][slot] = torch.arange(bufs["obs"][slot].numel(), dtype=torch.float32).reshape(bufs["obs"][slot].shape)
    bufs["policy_versions"][slot] = 7


def test_slot_round_trip_through_child_process():
    cfg = Cfg(num_workers=1, num_envs_per_worker=2, rollout=4, batch_size=16)
    bufs = allocate_trajectories(cfg, derive(cfg), OBS, ACT)
    ctx = spawn_context()
    child = ctx.Process(target=_child_writes, args=(bufs, 1))
    child.start()
    child.join(60)
    assert child.exitcode == 0
    expected = torch.arange(5 * 5, dtype=torch.float32).reshape(5, 5)
    assert torch.equal(bufs["obs"][1], expected)
    assert torch.all(bufs["policy_versions"][1] == 7)
    assert torch.all(bufs["obs"][0] == torch.tensor(POISON))  # the neighbour slot is untouched
