"""Data-parallel learner ranks (`--learner_world_size=G`): G processes train one policy together with
torch.distributed (gloo on CPU, nccl on distinct GPUs) and DistributedDataParallel.

Rank 0 is the learner of the single-process engine: it reads the policy's queue, takes each iteration's batch
from the batcher, publishes weights, writes checkpoints and reports. It shards each batch by whole
trajectories: rank r gets the slot indices of its contiguous part in a `ShardReady` message on its own inbox
and copies those trajectories out of shared memory itself; rank 0 releases the slot groups once every rank has
copied (`RankLink.copied`). Then every rank trains on its shard; the update is the single-process update of the
whole batch (appo/algorithms/ppo.py says how), so it does not depend on G:

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

import contextlib
import datetime
import hashlib
import os
import threading
import time
from collections.abc import Iterator
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor, nn

from appo.normalize import RunningMeanStd, merge_moments
from utils.timing import Timing

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
        from appo.datagram_queue import DatagramQueue

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


class Ranks:
    """This rank's view of the learner ranks of its policy; `Ranks()` is the single-process learner."""

    def __init__(
        self, rank: int = 0, world_size: int = 1, device: str = "cpu", group: Any = None, backend: str = "gloo"
    ) -> None:
        self.rank, self.world_size, self.device, self.group = rank, world_size, device, group
        # gloo collectives run on CPU tensors, nccl ones on the rank's GPU.
        self.comm_device = device if backend == "nccl" else "cpu"
        self.timing: Timing | None = None  # the learner's: forward, backward, grad_allreduce, sync
        self._timing_lock = threading.Lock()

    @property
    def is_distributed(self) -> bool:
        return self.world_size > 1

    # --- timing -------------------------------------------------------------------------------------------
    def add_time(self, key: str, seconds: float) -> None:
        if self.timing is not None:
            with self._timing_lock:
                self.timing.totals[key] += seconds
                self.timing.counts[key] += 1

    @contextlib.contextmanager
    def timed(self, key: str) -> Iterator[None]:
        began = time.perf_counter()
        try:
            yield
        finally:
            self.add_time(key, time.perf_counter() - began)

    # --- collectives --------------------------------------------------------------------------------------
    def gather(self, row: Tensor) -> Tensor:
        """[G, *row.shape] on `row`'s device: every rank's `row` in rank order, the same bytes on every rank."""
        if not self.is_distributed:
            return row.unsqueeze(0)
        local = row.detach().to(self.comm_device).contiguous()
        parts = [torch.empty_like(local) for _ in range(self.world_size)]
        with self.timed("sync"):
            dist.all_gather(parts, local, group=self.group)
        return torch.stack(parts).to(row.device)

    def layout(self, n: int) -> tuple[int, int]:
        """(index of this rank's first trajectory in the global batch, trajectories in the global batch), given
        this rank's `n`: rank 0's part comes first, then rank 1's, ..."""
        if not self.is_distributed:
            return 0, n
        counts = [int(c) for c in self.gather(torch.tensor([n], dtype=torch.int64))[:, 0]]
        return sum(counts[: self.rank]), sum(counts)

    def all_ok(self, ok: bool) -> bool:
        """True when `ok` holds on every rank (the NaN guard's common verdict)."""
        if not self.is_distributed:
            return ok
        return bool(self.gather(torch.tensor([1 if ok else 0], dtype=torch.int64)).min() > 0)

    def mean_std(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """Mean and unbiased standard deviation of every rank's `x` together (in x's dtype, on its device);
        a rank may contribute no elements."""
        flat = x.detach().to(torch.float64).reshape(-1, 1)
        count, mean, var = _merge_rows(self.gather(_moments_row(flat)), (1,))
        unbiased = var * count / (count - 1).clamp(min=1)
        return mean[0].to(x.dtype), unbiased[0].sqrt().to(x.dtype)

    def update_normalizer(self, normalizer: RunningMeanStd, x: Tensor) -> None:
        """Fold every rank's `x` [..., *shape] into `normalizer`, as the single-process update of their
        concatenation would (Chan's merge, exact); skipped by every rank when any part is not finite (one NaN
        would poison the statistics for good)."""
        flat = x.detach().to(device=normalizer.mean.device, dtype=torch.float64).reshape(-1, *normalizer.shape)
        row = torch.cat([torch.isfinite(flat).all().to(torch.float64).reshape(1), _moments_row(flat)])
        rows = self.gather(row)
        if not bool(rows[:, 0].min() > 0):
            return
        count, mean, var = _merge_rows(rows[:, 1:], normalizer.shape)
        if count > 0:
            normalizer.merge(mean, var, count)

    def sum_stats(self, sums: dict[str, float], same_on_every_rank: tuple[str, ...] = ()) -> dict[str, float]:
        """Sum each statistic over the ranks, except those that every rank already holds whole."""
        if not self.is_distributed or not sums:
            return sums
        keys = sorted(sums)
        totals = self.gather(torch.tensor([sums[k] for k in keys], dtype=torch.float64)).sum(0)
        return {k: sums[k] if k in same_on_every_rank else float(v) for k, v in zip(keys, totals, strict=True)}

    def broadcast(self, obj: Any) -> Any:
        """Rank 0's `obj` on every rank."""
        if not self.is_distributed:
            return obj
        box = [obj]
        with self.timed("sync"):
            dist.broadcast_object_list(box, src=0, group=self.group, device=torch.device(self.comm_device))
        return box[0]

    def check_in_step(self, digest: str) -> list[str]:
        """Every rank's `digest` (of its training state), in rank order."""
        if not self.is_distributed:
            return [digest]
        row = torch.tensor(list(bytes.fromhex(digest)), dtype=torch.uint8)
        return [bytes(r.tolist()).hex() for r in self.gather(row)]

    # --- the model ----------------------------------------------------------------------------------------
    def wrap(self, model: nn.Module) -> nn.Module:
        """The module whose forward the loss runs through: `model` itself on one rank, else its DDP wrapper
        (which all-reduces and averages the gradients during backward). Either way its forward is timed."""
        module = model
        if self.is_distributed:
            from torch.nn.parallel import DistributedDataParallel

            cuda = torch.device(self.device).type == "cuda"
            module = DistributedDataParallel(
                model,
                device_ids=[torch.device(self.device).index or 0] if cuda else None,
                process_group=self.group,
                # The normalisers are buffers that every rank updates identically (update_normalizer): synced
                # from rank 0 once, here, not at every forward.
                forward_sync_buffers=False,
            )
            module.register_comm_hook(self, _timed_allreduce)
        began: list[float] = []
        module.register_forward_pre_hook(lambda _m, _args: began.append(time.perf_counter()))
        module.register_forward_hook(
            lambda _m, _args, _out: self.add_time("forward", time.perf_counter() - began.pop())
        )
        return module


def _moments_row(flat: Tensor) -> Tensor:
    """[1 + 2 * D] float64: count, mean and population variance of the rows of flat [n, *shape] (zeros when
    n is 0)."""
    n = flat.shape[0]
    if n == 0:
        zeros = flat.new_zeros(flat.shape[1:]).flatten()
        return torch.cat([flat.new_zeros(1), zeros, zeros])
    mean, var = flat.mean(dim=0), flat.var(dim=0, correction=0)
    return torch.cat([flat.new_tensor([float(n)]), mean.flatten(), var.flatten()])


def _merge_rows(rows: Tensor, shape: tuple[int, ...]) -> tuple[Tensor, Tensor, Tensor]:
    """merge_moments of the ranks' `_moments_row`s [G, 1 + 2 * D]: (count [], mean [*shape], var [*shape])."""
    d = (rows.shape[1] - 1) // 2
    means, variances = rows[:, 1 : 1 + d].reshape(-1, *shape), rows[:, 1 + d :].reshape(-1, *shape)
    return merge_moments(rows[:, 0], means, variances)


def _timed_allreduce(ranks: Ranks, bucket: Any) -> torch.futures.Future:
    """DDP's default gradient all-reduce (divide by the world size, sum), timed from launch to completion; it
    overlaps the rest of the backward pass."""
    tensor = bucket.buffer()
    tensor.div_(ranks.world_size)
    began = time.perf_counter()
    future = dist.all_reduce(tensor, group=ranks.group, async_op=True).get_future()

    def done(fut: torch.futures.Future) -> Tensor:
        ranks.add_time("grad_allreduce", time.perf_counter() - began)
        return fut.value()[0]

    return future.then(done)


# DDP checks a hook's annotations by identity; under `from __future__ import annotations` they are strings.
_timed_allreduce.__annotations__ |= {"bucket": dist.GradBucket, "return": torch.futures.Future[torch.Tensor]}


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
