"""One learner rank's view of its policy's data-parallel ranks, as an algorithm sees it (appo/learning/distributed.py
starts the ranks and their process group): `Ranks()` is the single-process learner, where every call is the identity.
appo/learning/distributed.py's docstring says what each collective keeps exact."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor, nn

from appo.models.normalize import RunningMeanStd, merge_moments
from appo.utils.timing import Timing


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
        would poison the statistics for good). With one rank: `update_finite`."""
        if not self.is_distributed:
            update_finite(normalizer, x)
            return
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


def update_finite(normalizer: RunningMeanStd, x: Tensor) -> None:
    """Running statistics take only finite data: one NaN would poison them (and every later value) for good."""
    if bool(torch.isfinite(x).all()):
        normalizer.update(x)
