"""The Ray actor of --backend=ray (appo/backends/ray/backend.py says how the pieces meet): one actor worker's
ActorWorker / EnvRunner / PolicyWorker objects over a private trajectory table, and the driver's record of it."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from appo.config.cfg import Cfg
from appo.config.derive import Derived
from appo.models.registry import make_model
from appo.protocol.buffers import (
    allocate_control,
    first_slot,
    numpy_dtype_of,
    poison_value,
    trajectory_spec,
    worker_envs,
)
from appo.protocol.messages import SlotsReleased, TrajectoryReady
from appo.protocol.param_sync import ParamStore
from appo.utils.logging import log

IN_FLIGHT = 2  # collect calls queued per actor: one running, one waiting, so that an actor never idles
PARKED_SECONDS = 0.02  # a call that finds nothing to step returns after this long (its groups are all away)


class RayActorWorker:
    """Actor worker `worker_idx` inside a Ray actor. Ray constructs it again after a crash (max_restarts) from
    the same arguments; the driver then calls `start` again."""

    def __init__(
        self, cfg: Cfg, derived: Derived, worker_idx: int, spaces: tuple[Any, Any], replay_shards: list | None = None
    ) -> None:
        from appo.protocol.processes import limit_threads

        os.environ.setdefault("OMP_NUM_THREADS", "1")
        self._limits = limit_threads(1)  # one thread per actor, as in a local actor worker
        self.cfg, self.derived, self.worker_idx, self.spaces = cfg, derived, worker_idx, spaces
        self.replay_shards = replay_shards  # SAC's replay actors: full groups' transitions go there
        # One ParamStore per weight set: each policy's, then its self-play snapshots' (an episodic run has more:
        # appo/maml/ray_actors.py).
        self.num_weight_sets = cfg.num_policies * (1 + cfg.selfplay_pool)
        self.worker: Any = None

    def start(self, incarnation: int, group_at_learner: np.ndarray, weights: dict[int, tuple[int, Any]]) -> dict:
        """Build envs and acting components; `group_at_learner`: the run's table, whose rows of this worker's
        groups say which groups its learners still hold (a restarted worker must not refill them). Returns where
        it runs."""
        import ray

        from appo.sampling.actor_worker import ActorWorker, acting_stream
        from appo.sampling.policy_worker import make_policy_workers

        cfg, derived, w = self.cfg, self.derived, self.worker_idx
        buffers = private_trajectories(cfg, derived, self.spaces, w)
        self.control = control = allocate_control(cfg, derived)
        control["group_at_learner"].copy_(torch.from_numpy(group_at_learner))
        self.template = make_model(cfg, *self.spaces)
        self.params = [ParamStore(self.template) for _ in range(self.num_weight_sets)]
        self._load_weights(weights)
        acting = make_policy_workers(
            cfg, derived, buffers, self.params, self.spaces, "cpu", control, acting_stream(w, incarnation)
        )
        if self.worker is not None:
            self.worker.close()
        self.worker = ActorWorker(cfg, derived, w, buffers, control, incarnation, acting)
        self.buffers = {k: v.numpy() for k, v in buffers.items()}
        self.envs = worker_envs(cfg, derived, w)  # its rows of the control channel
        self.outbox = self.worker.keep_local(self.worker.init())
        if self.replay_shards:
            from appo.algorithms.registry import algorithm_class
            from appo.backends.ray.replay_shards import ShardPusher

            self.pusher = ShardPusher(self.replay_shards, w)
            self.replay_rows = algorithm_class(cfg.algo).replay_rows
        context = ray.get_runtime_context()
        return {"node_id": context.get_node_id(), "pid": os.getpid(), "incarnation": incarnation}

    def _load_weights(self, weights: dict[int, tuple[int, Any]]) -> None:
        """Publish each weight set sent (the driver sends one only when its store was published since it last sent
        it) into this actor's store of it, where the acting components pull it: by the publish, whatever its version
        (a PBT copy refills a self-play slot under the version it may already hold)."""
        import ray

        for weight_set, (version, ref) in weights.items():
            state = ray.get(ref[0])  # the reference, not the value, travelled with the call
            self.template.load_state_dict({k: torch.from_numpy(v) for k, v in state.items()})
            self.params[weight_set].publish(self.template, version)

    def collect(
        self,
        releases: list[SlotsReleased],
        weights: dict[int, tuple[int, Any]],
        assignments: np.ndarray,
        commands: np.ndarray,
        seconds: float,
        snapshot_versions: np.ndarray | None = None,
    ) -> dict:
        """Step until at least one slot group is full (or `seconds` pass, or every group is at the learner);
        returns the full groups' rows of every trajectory field, their TrajectoryReady messages and the
        episode reports due."""
        worker = self.worker
        if worker is None:  # Ray restarted this actor and ran a call queued for the dead one: the driver starts it
            return {"restarted": True}
        self.control["assignments"][self.envs] = torch.from_numpy(assignments)
        self.control["commands"][self.envs] = torch.from_numpy(commands)
        if snapshot_versions is not None:  # self-play: the filled snapshots, as the learners' table has them
            self.control["snapshot_versions"].copy_(torch.from_numpy(snapshot_versions))
        self._load_weights(weights)
        out = self.outbox
        for msg in releases:
            out += worker.handle(msg)
        ready = [m for m in worker.keep_local(out) if type(m) is TrajectoryReady]
        deadline = time.monotonic() + seconds
        while not ready and worker.pending and time.monotonic() < deadline:
            ready += [m for m in worker.act_locally() if type(m) is TrajectoryReady]
        self.outbox = []
        if not ready and not worker.pending:
            time.sleep(PARKED_SECONDS)  # parked: nothing to do until a release comes with a later call
        groups = {}  # first slot -> rows: several policies' messages may share one group
        n = self.derived.envs_per_split
        for msg in ready:
            if msg.first_slot not in groups:
                rows = slice(msg.first_slot, msg.first_slot + n)
                if self.replay_shards:  # transitions to a replay shard; to the driver, what the learner counts
                    self._push(msg)
                    groups[msg.first_slot] = {"policy_versions": self.buffers["policy_versions"][rows].copy()}
                else:
                    groups[msg.first_slot] = {k: v[rows].copy() for k, v in self.buffers.items()}
        return {
            "ready": ready,
            "groups": groups,
            "reports": worker.reports(),
            "parked": not worker.pending,
        }

    def close(self) -> None:
        """Close the envs before the driver kills this actor: games that run processes of their own (vizdoom's)
        then end as they should, their shared memory with them; a kill alone takes the envs' helpers down with the
        actor (Ray ends a killed worker's children) before they can clean up."""
        if self.worker is not None:
            self.worker.close()
            self.worker = None

    def final_reports(self) -> list:
        """The episodes finished since the last report, at the run's end (as a local actor's last report)."""
        return [] if self.worker is None else self.worker.reports(force=True)

    def _push(self, msg: TrajectoryReady) -> None:
        """The transitions of the trajectories `msg` hands over, to the next replay shard (one call)."""
        envs = range(msg.num_envs) if msg.envs is None else msg.envs
        slots = torch.tensor([msg.first_slot + e for e in envs], dtype=torch.int64)
        names = ("obs", "actions", "rewards", "dones", "truncated", "final_obs", "step_failed")
        trajectories = {k: torch.from_numpy(self.buffers[k])[slots] for k in names}
        rows = self.replay_rows(trajectories, self.template)
        self.pusher.push({k: v.numpy() for k, v in rows.items()})


def private_trajectories(
    cfg: Cfg, derived: Derived, spaces: tuple[Any, Any], worker_idx: int
) -> dict[str, torch.Tensor]:
    """The run's trajectory table in this process's own memory, zero pages until written (numpy's zeros map
    lazily): only worker `worker_idx`'s slots, poison-filled here, ever become resident."""
    first, last = first_slot(cfg, derived, worker_idx, 0, 0), first_slot(cfg, derived, worker_idx + 1, 0, 0)
    tensors = {}
    for name, spec in trajectory_spec(cfg, *spaces, derived.multi_agent).items():
        array = np.zeros((derived.num_slots, *spec.shape), dtype=numpy_dtype_of(spec.dtype))
        if name != "rnn_states":  # every trajectory's first state is the zero state
            array[first:last] = poison_value(spec.dtype)
        tensors[name] = torch.from_numpy(array)
    return tensors


@dataclass
class ActorState:
    """The driver's view of one Ray actor."""

    handle: Any
    incarnation: int = 0
    node_id: str = ""
    in_flight: dict[Any, float] = field(default_factory=dict)  # ref -> when submitted (collect and start calls)
    releases: list[SlotsReleased] = field(default_factory=list)  # to go with the next call
    versions: list[int] = field(default_factory=list)  # per weight set, the version sent (appo/maml/ray_actors.py)
    stamps: list[int] = field(default_factory=list)  # per weight set, the publish stamp of the weights sent
    is_parked: bool = False
    started: Any = None  # the ref of the pending `start` call
    start_at: float | None = None  # when to call `start` again (its actor was still restarting)


def remote_actor_class(cfg: Cfg, cls: type, started_ray: bool, what: str) -> Any:
    """Log the cluster the run got, and return `cls` (RayActorWorker or a subclass) as a Ray actor class with the
    run's CPUs and restarts, spread over the nodes. A lost call is not replayed (max_task_retries=0): the driver
    gives the actor's work again itself."""
    import ray

    nodes = [n for n in ray.nodes() if n["Alive"]]
    log.info(
        "ray: %s, %d node(s), %g CPUs; %s on any node (%g CPU each)",
        "private instance on 127.0.0.1" if started_ray else f"cluster at {cfg.ray_address}",
        len(nodes),
        sum(n["Resources"].get("CPU", 0) for n in nodes),
        what,
        cfg.ray_worker_cpus,
    )
    return ray.remote(cls).options(
        num_cpus=cfg.ray_worker_cpus,
        max_restarts=cfg.ray_max_restarts,
        max_task_retries=0,
        scheduling_strategy="SPREAD",
    )
