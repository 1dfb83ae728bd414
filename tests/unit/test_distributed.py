"""The pieces of several learner ranks that need no second process (appo/learning/distributed.py): the exact merge
of statistics, the shard sizes, a single rank being the single learner, the state digest that says ranks are in
step (and that a resumed learner holds its checkpoint's state), and the flags' one-line errors."""

from __future__ import annotations

import os
import time

import gymnasium as gym
import numpy as np
import pytest
import torch

from appo.algorithms.common.ranks import Ranks, update_finite
from appo.config.cfg import Cfg
from appo.config.derive import derive
from appo.config.verify import verify
from appo.learning.checkpoint import list_checkpoints
from appo.learning.distributed import backend_for, shard_sizes, state_digest
from appo.learning.learner import Learner
from appo.models.normalize import RunningMeanStd, merge_moments
from appo.models.registry import make_model
from appo.protocol.param_sync import ParamStore


def moments(x: torch.Tensor) -> tuple[float, torch.Tensor, torch.Tensor]:
    if len(x) == 0:
        return 0.0, torch.zeros(x.shape[1:], dtype=torch.float64), torch.zeros(x.shape[1:], dtype=torch.float64)
    return float(len(x)), x.mean(0), x.var(0, correction=0)


def test_merged_parts_equal_the_statistics_of_their_concatenation():
    gen = torch.Generator().manual_seed(0)
    parts = [torch.randn(n, 3, generator=gen, dtype=torch.float64) * 5 + 2 for n in (7, 0, 1, 40)]
    counts, means, variances = zip(*(moments(p) for p in parts), strict=True)
    count, mean, var = merge_moments(
        torch.tensor(counts, dtype=torch.float64), torch.stack(means), torch.stack(variances)
    )
    whole = torch.cat(parts)
    assert count.item() == len(whole)
    torch.testing.assert_close(mean, whole.mean(0), rtol=1e-14, atol=1e-14)
    torch.testing.assert_close(var, whole.var(0, correction=0), rtol=1e-13, atol=1e-13)


def test_shards_are_contiguous_and_as_equal_as_can_be():
    assert shard_sizes(16, 2) == [8, 8]
    assert shard_sizes(7, 3) == [3, 2, 2]
    assert shard_sizes(1, 2) == [1, 0]
    assert sum(shard_sizes(1001, 7)) == 1001


def test_backend_is_nccl_only_for_distinct_gpus():
    assert backend_for(["cpu", "cpu"]) == "gloo"
    assert backend_for(["cuda:0", "cuda:1"]) == "nccl"
    assert backend_for(["cuda:0", "cuda:0"]) == "gloo"  # nccl refuses two ranks on one GPU


def test_one_rank_is_the_single_learner():
    ranks, gen = Ranks(), torch.Generator().manual_seed(1)
    x = torch.randn(50, generator=gen)
    assert ranks.layout(12) == (0, 12)
    assert ranks.all_ok(True) and not ranks.all_ok(False)
    mean, std = ranks.mean_std(x)
    torch.testing.assert_close(mean, x.mean(), rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(std, x.std(), rtol=1e-6, atol=1e-7)
    assert ranks.sum_stats({"a": 1.5}) == {"a": 1.5}
    a, b = RunningMeanStd((4,)), RunningMeanStd((4,))
    batch = torch.randn(30, 4, generator=gen)
    ranks.update_normalizer(a, batch)
    update_finite(b, batch)
    torch.testing.assert_close(a.mean, b.mean, rtol=1e-14, atol=1e-14)
    torch.testing.assert_close(a.var, b.var, rtol=1e-13, atol=1e-13)
    ranks.update_normalizer(a, torch.full((3, 4), float("nan")))  # not finite: skipped, like update_finite
    assert a.count.item() == 30
    model = torch.nn.Linear(2, 2)
    assert ranks.wrap(model) is model


def test_state_digest_sees_one_ulp():
    state = {"w": torch.ones(3), "nested": [{"step": torch.tensor(2.0)}, 0.5]}
    same = {"w": torch.ones(3), "nested": [{"step": torch.tensor(2.0)}, 0.5]}
    assert state_digest(state) == state_digest(same)
    same["w"][1] = torch.nextafter(torch.tensor(1.0), torch.tensor(2.0))
    assert state_digest(state) != state_digest(same)


SPACES = (gym.spaces.Box(-1, 1, (4,), np.float32), gym.spaces.Discrete(2))


def test_a_resumed_learner_holds_its_checkpoints_state_exactly(tmp_path):
    """What the resume test of two ranks compares each rank's logged digest with."""
    cfg = Cfg(env="CartPole-v1", num_workers=1, num_envs_per_worker=8, worker_num_splits=1, rollout=8, batch_size=64)
    d = derive(cfg)
    from appo.protocol.buffers import allocate_trajectories

    learner = Learner(
        cfg, d, 0, allocate_trajectories(cfg, d, *SPACES), ParamStore(make_model(cfg, *SPACES)), SPACES, tmp_path, "cpu"
    )
    learner.init()
    learner.algorithm.optimizer.step()  # some optimizer state: Adam's step counters
    for p in learner.model.parameters():
        p.grad = torch.ones_like(p)
    learner.algorithm.optimizer.step()
    learner.save()
    saved = torch.load(list_checkpoints(tmp_path)[-1], weights_only=True)
    resumed = Learner(cfg, d, 0, learner.batcher.buf, ParamStore(make_model(cfg, *SPACES)), SPACES, tmp_path, "cpu")
    resumed.init()
    expected = state_digest(saved["model"], {"optimizer": saved["optimizer"]}, [saved["random_states"]["torch"]])
    assert resumed.state_digest() == expected


def lines(**overrides) -> list[str]:
    base = dict(env="CartPole-v1", rollout=16, batch_size=64, num_batches_per_epoch=1)
    return [e for e in verify(Cfg(**(base | overrides))) if "learner" in e]


def test_learner_rank_flags_are_checked_in_one_line_each():
    assert lines(learner_world_size=0) == ["--learner_world_size=0: must be >= 1"]
    assert lines(learner_world_size=2, serial_mode=True) == [
        "--learner_world_size=2: --serial_mode runs one learner in the driver process; use 1"
    ]
    assert lines(learner_world_size=8)[0].startswith("--learner_world_size=8: an iteration has 4 trajectories")
    assert lines(learner_world_size=2, learner_devices="cpu") == [
        "--learner_devices=cpu: 1 devices for --learner_world_size=2 ranks"
    ]
    assert lines(learner_world_size=2, learner_devices="cpu,tpu") == [
        "--learner_devices=cpu,tpu: 'tpu' is not cpu, cuda or cuda:N"
    ]
    assert lines(learner_world_size=2, learner_devices="cpu,cuda:0") == [
        "--learner_devices=cpu,cuda:0: all ranks on the CPU or all on CUDA"
    ]
    assert lines(learner_world_size=2, algo="sac", batch_size=256) == [
        "--learner_world_size=2: --algo=sac keeps its own replay and trains on one learner rank; use 1"
    ]
    assert lines(learner_world_size=2, algo="maml_trpo", batch_size=256) == [
        "--learner_world_size=2: --algo=maml_trpo takes its meta-step in the driver and trains on one learner rank; "
        "use 1"
    ]
    assert lines(learner_world_size=2) == []


@pytest.mark.skipif(torch.cuda.device_count() > 0, reason="needs a machine without CUDA")
def test_gpus_that_do_not_exist_are_refused():
    assert lines(learner_world_size=2, learner_devices="cuda:0,cuda:0") == [
        "--learner_devices=cuda:0,cuda:0: needs cuda:0, this machine has 0 CUDA device(s)"
    ]
    assert lines(learner_world_size=2, device="cuda") == [
        "--learner_world_size=2: needs cuda:1, this machine has 0 CUDA device(s); ranks may share a GPU: "
        "--learner_devices=cuda:0,cuda:0"
    ]


def test_more_cpu_ranks_than_cores_are_refused():
    cores = len(os.sched_getaffinity(0))
    assert lines(learner_world_size=cores + 1, batch_size=16 * (cores + 1)) == [
        f"--learner_world_size={cores + 1}: {cores + 1} CPU learner ranks on {cores} cores; use at most {cores}"
    ]


def test_rank_0_shards_a_batch_by_whole_trajectories_and_waits_for_the_copies():
    """ShardingBatcher (rank 0) and take_shard (rank 1, here a thread): rank 1 gets the slot indices of the second
    half, copies those trajectories itself, and only then does rank 0's take return (the slots may go back)."""
    import threading

    from appo.learning.batcher import Batcher
    from appo.learning.distributed import RankLink
    from appo.learning.shards import ShardingBatcher, take_shard
    from appo.protocol.buffers import allocate_trajectories
    from appo.protocol.messages import TrajectoryReady

    cfg = Cfg(env="CartPole-v1", num_workers=1, num_envs_per_worker=8, worker_num_splits=1, rollout=8, batch_size=128)
    d = derive(cfg)
    bufs = allocate_trajectories(cfg, d, *SPACES)
    bufs["rewards"][:] = torch.arange(d.num_slots, dtype=torch.float32).unsqueeze(1)  # slot number in every step
    bufs["policy_versions"][:] = 0
    link = RankLink(2, "gloo")
    try:
        lead = ShardingBatcher(Batcher(bufs, d.trajectories_per_iteration, "cpu"), link, 0)
        lead.add(TrajectoryReady(0, 0, 0, 1, 8, 8))  # slots 8..15 first, then 0..7: batch order is arrival order
        lead.add(TrajectoryReady(0, 0, 0, 0, 0, 8))
        got: list = []

        def rank_1() -> None:
            msg = link.inboxes[1].get_many(timeout=5)[0]
            time.sleep(0.2)  # rank 0 must wait for this copy
            got.append((msg, take_shard(lead.batcher, link, 1, msg)))

        thread = threading.Thread(target=rank_1)
        thread.start()
        began = time.monotonic()
        batch = lead.take(version=0, max_policy_lag=5)
        waited = time.monotonic() - began
        thread.join()
    finally:
        link.close()
    msg, shard = got[0]
    assert msg.slots == tuple(range(8)) and msg.batch_idx == 1 and msg.env_steps == 16 * 8
    assert batch.tensors["rewards"][:, 0].tolist() == list(range(8, 16))
    assert shard.tensors["rewards"][:, 0].tolist() == list(range(8))
    assert waited >= 0.2 and int(link.copied[1]) == 1
    assert len(batch.releases) == 2 and shard.releases == []
