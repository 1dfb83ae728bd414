"""SAC's replay on a Ray cluster (--backend=ray, --num_replay_shards=N): the replay lives in N Ray actors
(`ReplayShard`, each a ring of --replay_size / N transitions), rollout actors push transitions into them in chunks,
and the learner samples from them with batches prefetched, so that neither side waits on the other's calls.

  rollout actor (appo/backends/ray/actors.py RayActorWorker): a full slot group -> its transitions
  (appo/algorithms/sac/replay.py
      `transitions`, actions in [-1, 1]) -> one `add` call to a shard, round robin over the shards (one call per
      group: a few hundred transitions, never one per transition). The group's small bookkeeping rows (policy
      versions) still go to the driver, and its TrajectoryReady to the learner, which counts the env steps: the
      replay ratio and backpressure work as in a local run.
  learner (`ShardedReplay`, what SAC's `replay` is then): `sample(n)` returns the next of the minibatches asked for
      in earlier calls (BATCHES_PER_CALL at a time, PREFETCH calls ahead); each call takes from every shard in
      proportion to its size, so a sample is uniform over all transitions. Each reply carries its shard's size;
      `size` is their sum.
  driver (appo/backends/ray/backend.py RayBackend): creates the shards before anything else starts (named actors in the
      run's own namespace, so the learner process finds them by name), logs what each received from which worker
      when the run stops, and kills them after the learner's final checkpoint.

A shard that dies (its node lost) is restarted empty by Ray; the calls that failed are not retried, the learner
samples from the other shards meanwhile and logs it. Checkpoints (--save_replay) hold the shards' rows in the same
format as the local replay's, so a run can resume on either backend."""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from appo.algorithms.sac.replay import FIELDS, Replay
from appo.models.device import to_device
from appo.utils.logging import log

# The learner asks for BATCHES_PER_CALL minibatches in one call (each still uniform over the replay as it was then),
# and keeps PREFETCH such calls in flight: a call's round trip (a few ms, far more on a loaded node) is paid once per
# 8 updates and hidden behind them. The newest transitions reach the sampled batches a few updates later than
# they would locally: noise against a replay of up to 10^6 transitions.
BATCHES_PER_CALL = 8
PREFETCH = 2
SIZES_MAX_AGE = 0.5  # seconds a learner trusts the shard sizes it last heard before asking again


@dataclass(frozen=True)
class ReplayLocation:
    """Where a run's replay shards are: the cluster's address, the run's Ray namespace, the shards' actor names."""

    address: str
    namespace: str
    names: tuple[str, ...]

    # The learner's replay factory (Learner's `replay_factory`): the backend hands this over, so the learner core
    # builds its Ray replay without importing a backend.
    def __call__(self, capacity: int, device: str) -> ShardedReplay:
        return ShardedReplay(self, capacity, device)

    def release(self) -> None:
        """Leave the Ray cluster this (learner) process joined as a client; the driver stops Ray itself."""
        import ray

        if ray.is_initialized():
            ray.shutdown()


def shard_names(num_shards: int) -> tuple[str, ...]:
    return tuple(f"replay_shard_{i}" for i in range(num_shards))


class ReplayShard:
    """One shard of the replay, as a Ray actor (its methods run one at a time: adds and samples never overlap)."""

    def __init__(
        self, capacity: int, obs_shape: tuple[int, ...], action_dim: int, seed: int, obs_dtype: Any = torch.float32
    ) -> None:
        from appo.protocol.processes import limit_threads

        self._limits = limit_threads(1)
        self.replay = Replay(capacity, obs_shape, action_dim, obs_dtype=obs_dtype)  # uint8 frames stay uint8
        self.generator = torch.Generator().manual_seed(seed)
        self.from_worker: dict[int, int] = {}  # actor worker index -> transitions received from it
        self.chunks = 0

    def add(self, rows: dict[str, np.ndarray], worker_idx: int) -> int:
        """Append one chunk of transitions (each field [n, ...]); returns the shard's size."""
        self.replay.add({k: torch.from_numpy(rows[k]) for k in FIELDS})
        n = len(rows["rewards"])
        self.from_worker[worker_idx] = self.from_worker.get(worker_idx, 0) + n
        self.chunks += 1
        return self.replay.size

    def sample(self, n: int) -> tuple[dict[str, np.ndarray], int]:
        """n transitions drawn uniformly from the filled rows (none while empty), and the shard's size."""
        if n <= 0 or self.replay.size == 0:
            return {}, self.replay.size
        batch = self.replay.sample(n, self.generator)
        return {k: v.numpy() for k, v in batch.items()}, self.replay.size

    def stats(self) -> dict[str, Any]:
        return {"size": self.replay.size, "chunks": self.chunks, "from_worker": dict(self.from_worker)}

    def state_dict(self) -> dict[str, Any]:
        return self.replay.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> int:
        self.replay.load_state_dict(state)
        return self.replay.size


def create_shards(cfg: Any, obs_shape: tuple[int, ...], action_dim: int, obs_dtype: Any = torch.float32) -> list[Any]:
    """The run's replay shards as named Ray actors (in the current namespace); call after ray.init."""
    import ray

    options = {
        "num_cpus": 0,  # memory more than compute, and idle between calls: it must not keep an actor worker off a node
        "max_restarts": cfg.ray_max_restarts,
        "max_task_retries": 0,
        "scheduling_strategy": "SPREAD",
    }
    capacity = -(-cfg.replay_size // cfg.num_replay_shards)
    names = shard_names(cfg.num_replay_shards)
    return [
        ray.remote(ReplayShard)
        .options(name=name, **options)
        .remote(capacity, obs_shape, action_dim, cfg.seed * 1000 + i, obs_dtype)
        for i, name in enumerate(names)
    ]


def shard_report(shards: list[Any], timeout: float = 10.0) -> list[str]:
    """One line per shard: its size and what it received from each actor worker (logged when the run stops)."""
    import ray

    lines = []
    for i, shard in enumerate(shards):
        try:
            s = ray.get(shard.stats.remote(), timeout=timeout)
        except Exception as exc:  # gone with its node, or busy past the timeout
            lines.append(f"replay shard {i}: no answer ({type(exc).__name__})")
            continue
        workers = ", ".join(f"worker {w}: {n}" for w, n in sorted(s["from_worker"].items()))
        lines.append(f"replay shard {i}: {s['size']} transitions held, {s['chunks']} chunks received ({workers})")
    return lines


class ShardPusher:
    """A rollout actor's side: each full group's transitions go to the next shard in turn, at most `in_flight`
    calls unanswered (a slow shard slows its producers down instead of piling up chunks in the object store)."""

    def __init__(self, shards: list[Any], worker_idx: int, in_flight: int = 4) -> None:
        self.shards, self.worker_idx, self.limit = shards, worker_idx, in_flight
        self.next = worker_idx % len(shards)  # workers start on different shards
        self.pending: deque[Any] = deque()

    def push(self, rows: dict[str, np.ndarray]) -> None:
        import ray

        while len(self.pending) >= self.limit:
            ray.wait([self.pending.popleft()], num_returns=1)  # a failed call (dead shard) is dropped
        self.pending.append(self.shards[self.next].add.remote(rows, self.worker_idx))
        self.next = (self.next + 1) % len(self.shards)


class ShardedReplay:
    """The learner's view of the shards, with the calls of appo/algorithms/sac/replay.py Replay that SAC uses: `size`,
    `sample`, `state_dict`, `load_state_dict`. `fed_by_actors`: rollout actors add the transitions, not SAC."""

    fed_by_actors = True

    def __init__(self, location: ReplayLocation, capacity: int, device: str) -> None:
        import ray

        from appo.backends.ray.connection import connect_ray

        if not ray.is_initialized():  # a learner process joins the driver's cluster; a test may already be in it
            connect_ray(location.address, namespace=location.namespace)
        self.shards = [ray.get_actor(name, namespace=location.namespace) for name in location.names]
        self.capacity, self.device = capacity, device
        self.sizes = [0] * len(self.shards)
        self.sizes_at = -np.inf
        self.asked: deque[list[tuple[int, Any]]] = deque()  # per call made, in order: [(shard, ref)]
        self.ready: deque[dict[str, Tensor]] = deque()  # minibatches received, not yet used
        self.rng = np.random.default_rng()
        self.failed_calls = 0

    @property
    def size(self) -> int:
        if time.monotonic() - self.sizes_at > SIZES_MAX_AGE:
            self._ask_sizes()
        return sum(self.sizes)

    def _ask_sizes(self) -> None:
        import ray

        for i, shard in enumerate(self.shards):
            try:
                self.sizes[i] = ray.get(shard.stats.remote())["size"]
            except ray.exceptions.RayError as exc:
                self._failed(i, exc)
        self.sizes_at = time.monotonic()

    def _failed(self, shard: int, exc: BaseException) -> None:
        self.failed_calls += 1
        self.sizes[shard] = 0
        log.warning("replay shard %d: a call failed (%s); sampling from the others", shard, type(exc).__name__)

    def _ask(self, n: int) -> None:
        """Ask the shards for n transitions, split in proportion to their sizes (a multinomial draw)."""
        total = sum(self.sizes)
        counts = self.rng.multinomial(n, np.array(self.sizes) / total) if total else np.zeros(len(self.shards), int)
        self.asked.append([(i, self.shards[i].sample.remote(int(c))) for i, c in enumerate(counts) if c > 0])

    def sample(self, n: int) -> dict[str, Tensor]:
        """n transitions, uniform over every shard's filled rows (fewer when a shard died since they were asked)."""
        if not self.ready or len(self.ready[0]["rewards"]) != n:
            self.ready = self._receive(n)
        return self.ready.popleft()

    def _receive(self, n: int) -> deque[dict[str, Tensor]]:
        """The oldest call's BATCHES_PER_CALL minibatches of n (asking for the next calls first)."""
        import ray

        if sum(self.sizes) == 0:
            self._ask_sizes()
        while len(self.asked) < PREFETCH:
            self._ask(n * BATCHES_PER_CALL)
        calls = self.asked.popleft()
        self._ask(n * BATCHES_PER_CALL)
        parts = []
        for shard, ref in calls:
            try:
                rows, self.sizes[shard] = ray.get(ref)
            except ray.exceptions.RayError as exc:
                self._failed(shard, exc)
                continue
            if rows:
                parts.append(rows)
        self.sizes_at = time.monotonic()
        if not parts:
            raise ValueError("sampling an empty replay")
        rows = {k: torch.from_numpy(np.concatenate([p[k] for p in parts])) for k in FIELDS}
        count = len(rows["rewards"])
        if len(parts) > 1:  # each minibatch a uniform draw over every shard, not a block of one
            order = torch.randperm(count)
            rows = {k: v[order] for k, v in rows.items()}
        return deque(
            {k: to_device(v[i : i + n], self.device) for k, v in rows.items()} for i in range(0, count - n + 1, n)
        ) or deque([to_device(rows, self.device)])

    def state_dict(self) -> dict[str, Any]:
        """Every shard's rows (each oldest first) one after the other, in the local replay's format."""
        import ray

        states = [ray.get(shard.state_dict.remote()) for shard in self.shards]
        states = [s for s in states if s["size"]]
        if not states:
            return {"rows": {}, "size": 0}
        rows = {k: torch.cat([s["rows"][k] for s in states]) for k in FIELDS}
        return {"rows": rows, "size": sum(s["size"] for s in states)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Deal a saved replay's rows out to the shards in equal contiguous parts (each shard keeps its newest)."""
        import ray

        if not state["size"]:
            return
        parts = np.array_split(np.arange(state["size"]), len(self.shards))
        loads = [
            shard.load_state_dict.remote(
                {"rows": {k: v[torch.from_numpy(idx)] for k, v in state["rows"].items()}, "size": len(idx)}
            )
            for shard, idx in zip(self.shards, parts, strict=True)
        ]
        self.sizes = list(ray.get(loads))
        self.sizes_at = time.monotonic()
