"""MAML's episode buffers and the meta-learner's Hessian-vector-product helpers (--algo=maml_trpo).

The episodes of a meta-iteration, one row per task (the actor workers sample them: appo/backends/maml_actors.py
copies each task's rollout into its row), in shared memory (allocated by the MAML driver; `EpisodeBuffers`):
    per buffer b (0: train episodes, 1: validation episodes; the meta-test reuses them):
        obs [K, E, T, obs_dim] float32, actions [K, E, T, act_dim] float32 (as sampled, before clipping),
        rewards [K, E, T] float32 (0 after an episode's end), lengths [K, E] int64

The TRPO step's conjugate gradient needs the mean KL's Hessian-vector product about ten times per meta-iteration;
each is a sum over tasks, so `HvpPool` spreads the tasks over --num_workers helper processes (`hvp_worker_main`),
each computing J_k F_k J_k v for its rows into hvp_out, and the driver sums them in task order (the same bits as
one process computes).
"""

from __future__ import annotations

import queue
from collections.abc import Callable
from typing import Any, NamedTuple

import gymnasium as gym
import numpy as np
import torch

from appo.protocol.messages import ErrorReport, HvpReady, HvpRequest, Stop
from appo.protocol.param_sync import ParamStore


class EpisodeBuffers(NamedTuple):
    hvp_in: torch.Tensor  # [P]: the vector of the KL Hessian-vector product being computed
    hvp_out: torch.Tensor  # [K, P]: each task's product
    obs: list[torch.Tensor]
    actions: list[torch.Tensor]
    rewards: list[torch.Tensor]
    lengths: list[torch.Tensor]

    def episodes(self, buffer: int, rows: int | list[int]) -> Any:
        """A copy of rows 0..rows-1 (or the rows listed) of `buffer` as Episodes [K, E, T, ...]."""
        from appo.algorithms.maml.algorithm import Episodes

        index = list(range(rows)) if isinstance(rows, int) else rows
        lengths = self.lengths[buffer][index]
        T = self.rewards[buffer].shape[-1]
        mask = (torch.arange(T) < lengths.unsqueeze(-1)).float()
        return Episodes(
            self.obs[buffer][index].clone(),
            self.actions[buffer][index].clone(),
            self.rewards[buffer][index].clone(),
            mask,
        )


def episode_horizon(env: gym.Env) -> int:
    """The time limit of `env` (its TimeLimit wrapper's), which fixes T of the episode buffers."""
    while isinstance(env, gym.Wrapper):
        if isinstance(env, gym.wrappers.TimeLimit):
            return int(env._max_episode_steps)
        env = env.env
    raise ValueError(f"--algo=maml_trpo: the env {env} has no time limit; pass --max_episode_steps")


def allocate_buffers(
    num_rows: int, episodes: int, horizon: int, obs_dim: int, act_dim: int, num_params: int
) -> EpisodeBuffers:
    def shared(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return torch.zeros(shape, dtype=dtype).share_memory_()

    return EpisodeBuffers(
        shared(num_params),
        shared(num_rows, num_params),
        [shared(num_rows, episodes, horizon, obs_dim) for _ in range(2)],
        [shared(num_rows, episodes, horizon, act_dim) for _ in range(2)],
        [shared(num_rows, episodes, horizon) for _ in range(2)],
        [shared(num_rows, episodes, dtype=torch.int64) for _ in range(2)],
    )


def episode_seed(seed: int, stream: int, iteration: int, row: int, episode: int) -> np.random.SeedSequence:
    """The seeds of one episode (env reset, action noise: `generate_state(2)`), from where it stands alone."""
    return np.random.SeedSequence([seed, stream, iteration, row, episode])


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
        from appo.algorithms.maml.algorithm import MamlTrpo, make_policy

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
    from appo.protocol.processes import component_main

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
        from appo.protocol.processes import spawn_context, start_process

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
        from appo.algorithms.maml.algorithm import mean_in_order

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
        from appo.protocol.processes import stop_processes
        from appo.utils.logging import log

        for inbox in getattr(self, "inboxes", []):
            inbox.put(Stop())
        forced = stop_processes(self.processes)
        if forced:
            log.warning("hvp workers stopped by force: %s", ", ".join(forced))
