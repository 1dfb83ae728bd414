"""The meta-learner's Hessian-vector-product helpers (--algo=maml_trpo): processes and their queues, started by the
MAML driver (appo/maml/driver.py); they read the episodes from the shared episode buffers (appo/maml/buffers.py).

The TRPO step's conjugate gradient needs the mean KL's Hessian-vector product about ten times per meta-iteration;
each is a sum over tasks, so `HvpPool` spreads the tasks over --num_workers helper processes (`hvp_worker_main`),
each computing J_k F_k J_k v for its rows into hvp_out, and the driver sums them in task order (the same bits as
one process computes).
"""

from __future__ import annotations

import queue
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import torch

from appo.maml.algorithm import MamlTrpo, make_policy, mean_in_order
from appo.maml.buffers import EpisodeBuffers
from appo.protocol.messages import ErrorReport, HvpReady, HvpRequest, Stop
from appo.protocol.param_sync import ParamStore
from appo.protocol.processes import component_main, spawn_context, start_process, stop_processes
from appo.utils.logging import log


class HvpHelper:
    """One helper's share of the KL Hessian-vector products (the meta-batch's tasks it is sent)."""

    def __init__(
        self, cfg: Any, buffers: EpisodeBuffers, spaces: tuple[gym.Space, gym.Space], theta: ParamStore
    ) -> None:
        """`theta`: the store of the meta-parameters (the actors' weight set 0)."""
        self.cfg, self.buffers, self.spaces, self.theta = cfg, buffers, spaces, theta
        self.hvp_cache: tuple[tuple, list] | None = None  # ((iteration, rows), those rows' products)

    def on_hvp(self, msg: HvpRequest) -> None:
        """Write J_k F_k J_k v of each task row of `msg` into the hvp output (the meta-batch's products are built
        once per iteration, at its first request)."""
        if self.hvp_cache is None or self.hvp_cache[0] != (msg.iteration, msg.rows):
            self.hvp_cache = ((msg.iteration, msg.rows), self._task_hvps(msg.rows))
        v = self.buffers.hvp_in.clone()
        for row, product in zip(msg.rows, self.hvp_cache[1], strict=True):
            self.buffers.hvp_out[row] = product(v)

    def _task_hvps(self, rows: tuple[int, ...]) -> list:
        model = make_policy(self.cfg, *self.spaces)
        self.theta.pull(model)
        learner = MamlTrpo(self.cfg, model)
        index = list(rows)
        train, valid = self.buffers.episodes(0, index), self.buffers.episodes(1, index)
        return learner.task_hvps(learner.task_batches(train, valid))


def hvp_worker_main(
    cfg: Any,
    worker_idx: int,
    inbox: Any,
    driver_queue: Any,
    buffers: EpisodeBuffers,
    spaces: tuple[Any, Any],
    theta: ParamStore,
) -> None:
    """The helper process: serve HvpRequests until Stop."""

    class Queues:  # component_main reports a failure to `driver_queue`
        pass

    queues = Queues()
    queues.driver_queue = driver_queue  # type: ignore[attr-defined]

    def body() -> None:
        helper = HvpHelper(cfg, buffers, spaces, theta)
        while True:
            try:
                msg = inbox.get(timeout=1.0)
            except queue.Empty:
                continue
            if isinstance(msg, Stop):
                return
            helper.on_hvp(msg)
            driver_queue.put(HvpReady(worker_idx, msg.seq))

    component_main(cfg, f"hvp_worker_{worker_idx}", queues, body)


class HvpPool:
    """The helper processes (none with --serial_mode: then the learner computes the products itself)."""

    def __init__(self, cfg: Any, buffers: EpisodeBuffers, spaces: tuple[Any, Any], theta: ParamStore) -> None:
        self.buffers = buffers
        self.processes: list[Any] = []
        if cfg.serial_mode:
            return
        ctx = spawn_context()
        self.results = ctx.Queue()
        self.inboxes = [ctx.Queue() for _ in range(cfg.num_workers)]
        for w in range(cfg.num_workers):
            args = (cfg, w, self.inboxes[w], self.results, buffers, spaces, theta)
            self.processes.append(start_process(ctx, hvp_worker_main, args, f"hvp_worker_{w}"))

    def hvp(self, iteration: int, num_rows: int) -> Callable[[torch.Tensor], torch.Tensor] | None:
        """v -> the meta-batch's KL Hessian-vector product, each task's computed by one helper and averaged here in
        task order (the same bits as in one process); None with --serial_mode."""
        if not self.processes:
            return None
        jobs: dict[int, list[int]] = {}
        for k in range(num_rows):
            jobs.setdefault(k % len(self.processes), []).append(k)
        seq = [0]

        def hvp(v: torch.Tensor) -> torch.Tensor:
            seq[0] += 1
            self.buffers.hvp_in.copy_(v)
            for w, rows in jobs.items():
                self.inboxes[w].put(HvpRequest(iteration, seq[0], tuple(rows)))
            self._wait(set(jobs))
            return mean_in_order(self.buffers.hvp_out[:num_rows].clone())

        return hvp

    def _wait(self, pending: set[int]) -> None:
        """Until every helper in `pending` has answered."""
        while pending:
            try:
                reply = self.results.get(timeout=1.0)
            except queue.Empty:
                dead = [p.name for p in self.processes if not p.is_alive()]
                if dead:
                    raise RuntimeError(f"hvp workers died: {', '.join(dead)}") from None
                continue
            if isinstance(reply, ErrorReport):
                raise RuntimeError(f"{reply.component}: {reply.error.strip().splitlines()[-1]}")
            assert isinstance(reply, HvpReady), f"unexpected {reply!r}"
            pending.discard(reply.worker_idx)

    def close(self) -> None:
        for inbox in getattr(self, "inboxes", []):
            inbox.put(Stop())
        forced = stop_processes(self.processes)
        if forced:
            log.warning("hvp workers stopped by force: %s", ", ".join(forced))
