"""Data-parallel learner ranks (`--learner_world_size=G`): G processes train one policy together with
torch.distributed (gloo on CPU, nccl on distinct GPUs) and DistributedDataParallel.

Rank 0 is the learner of the single-process engine: it reads the policy's queue, takes each iteration's batch
from the batcher, publishes weights, writes checkpoints and reports. It shards each batch by whole
trajectories: rank r gets the slot indices of its contiguous part in a `ShardReady` message on its own inbox
and copies those trajectories out of shared memory itself; rank 0 releases the slot groups once every rank has
copied (`RankLink.copied`). Then every rank trains on its shard; the update is the single-process update of the
whole batch (appo/algorithms/ppo/algorithm.py says how), so it does not depend on G:

- `Ranks.layout`: where this rank's trajectories sit in the global batch, and how many there are;
- `Ranks.update_normalizer`: running statistics (observations, returns) merged exactly over the ranks' parts;
- `Ranks.mean_std`: advantage normalisation over the global minibatch;
- `Ranks.all_ok`: the NaN guard's verdict, taken for all ranks together (one rank skipping alone would hang
  the others in the next gradient all-reduce);
- `Ranks.wrap`: the DDP module whose backward all-reduces (averages) the gradients;
- `Ranks.sum_stats`: the logged statistics of the global batch.

With one rank every call is the identity and no process group exists. Each collective goes through `gather`
(all_gather, then the same arithmetic in rank order on every rank), so every rank derives bitwise the same
normaliser state; gradients are identical after the all-reduce, hence so are the parameters and Adam's state
(checked at start and at the end: `check_in_step`)."""

from __future__ import annotations

import datetime
import hashlib
import os
import time
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor

from appo.algorithms.common.ranks import Ranks

RENDEZVOUS_SECONDS = 120.0  # for every rank to join the process group
COLLECTIVE_SECONDS = 600.0  # a collective waiting longer for a (stuck) peer raises
COPY_SECONDS = 60.0  # for every rank to copy its shard before rank 0 gives up


def backend_for(devices: list[str]) -> str:
    """nccl when every rank has its own GPU; gloo otherwise (CPU ranks, or ranks sharing a GPU: nccl refuses
    two ranks on one device)."""
    if all(d.startswith("cuda") for d in devices) and len({torch.device(d).index or 0 for d in devices}) == len(
        devices
    ):
        return "nccl"
    return "gloo"


def shard_sizes(n: int, world_size: int) -> list[int]:
    """Trajectories of each rank when `n` are split into contiguous parts: as equal as can be, lower ranks
    taking the remainder."""
    base, extra = divmod(n, world_size)
    return [base + (1 if r < extra else 0) for r in range(world_size)]


class RankLink:
    """What the ranks of one policy share besides the process group, allocated by the driver: the rendezvous
    port (rank 0 hosts the store), each rank's pid (so that a rank waiting outside a collective notices a dead
    peer), the last batch each rank has copied, and the inbox of each rank > 0 (ShardReady, Stop; written by
    rank 0 only)."""

    def __init__(self, world_size: int, backend: str) -> None:
        from appo.protocol.datagram_queue import DatagramQueue

        self.world_size, self.backend = world_size, backend
        self.port = torch.zeros(1, dtype=torch.int64).share_memory_()
        self.pids = torch.zeros(world_size, dtype=torch.int64).share_memory_()
        self.copied = torch.zeros(world_size, dtype=torch.int64).share_memory_()
        self.inboxes: list[Any] = [None] + [DatagramQueue() for _ in range(world_size - 1)]

    def close(self) -> None:
        for inbox in self.inboxes[1:]:
            inbox.close()

    def is_alive(self, rank: int) -> bool:
        """False once rank `rank`'s process has exited (True before it has started)."""
        pid = int(self.pids[rank])
        if pid == 0:
            return True
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:  # a pid reused by another user's process: ours is gone
            return False
        return _is_running(pid)

    def dead_ranks(self) -> list[int]:
        return [r for r in range(self.world_size) if not self.is_alive(r)]

    def wait_copied(self, batch_idx: int, timeout: float = COPY_SECONDS) -> None:
        """Until every rank > 0 has copied batch `batch_idx` out of shared memory."""
        deadline = time.monotonic() + timeout
        while int(self.copied[1:].min()) < batch_idx:
            dead = self.dead_ranks()
            if dead or time.monotonic() > deadline:
                why = f"rank {dead[0]} is gone" if dead else f"not done within {timeout:g} s"
                raise RuntimeError(f"learner ranks did not copy their shard of batch {batch_idx}: {why}")
            time.sleep(0.0002)


def _is_running(pid: int) -> bool:
    """A zombie (exited, not yet reaped by the driver) is not running."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return True  # no /proc: trust kill(pid, 0)


def join_group(link: RankLink, rank: int, device: str) -> Ranks:
    """Join the process group of one policy's ranks (rank 0 hosts its store on a free port) and return this
    rank's view of it."""
    rendezvous = datetime.timedelta(seconds=RENDEZVOUS_SECONDS)
    link.pids[rank] = os.getpid()
    if rank == 0:
        store = dist.TCPStore("127.0.0.1", 0, link.world_size, True, timeout=rendezvous, wait_for_workers=False)
        link.port[0] = store.port
    else:
        deadline = time.monotonic() + RENDEZVOUS_SECONDS
        while int(link.port[0]) == 0:
            if not link.is_alive(0) or time.monotonic() > deadline:
                raise RuntimeError("learner rank 0 never opened the process group's rendezvous")
            time.sleep(0.01)
        store = dist.TCPStore("127.0.0.1", int(link.port[0]), link.world_size, False, timeout=rendezvous)
    if link.backend == "nccl":
        torch.cuda.set_device(torch.device(device))
    dist.init_process_group(
        link.backend,
        store=store,
        rank=rank,
        world_size=link.world_size,
        timeout=datetime.timedelta(seconds=COLLECTIVE_SECONDS),
    )
    return Ranks(rank, link.world_size, device, dist.group.WORLD, "nccl" if link.backend == "nccl" else "gloo")


def leave_group() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def state_digest(*states: Any) -> str:
    """sha256 of nested state (dicts, lists, tensors, numbers, strings): equal digests, equal states."""
    h = hashlib.sha256()

    def feed(x: Any) -> None:
        if isinstance(x, Tensor):
            t = x.detach().cpu().contiguous()
            h.update(f"T{t.dtype}{tuple(t.shape)}".encode())
            h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
        elif isinstance(x, dict):
            h.update(b"{")
            for k in sorted(x, key=str):
                h.update(repr(k).encode())
                feed(x[k])
            h.update(b"}")
        elif isinstance(x, list | tuple):
            h.update(b"[")
            for item in x:
                feed(item)
            h.update(b"]")
        else:
            h.update(repr(x).encode())

    for state in states:
        feed(state)
    return h.hexdigest()
