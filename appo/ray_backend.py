"""--backend=ray: actor workers as Ray actors, on this machine (a private Ray instance on 127.0.0.1, no dashboard)
or spread over a Ray cluster (--ray_address=auto). Everything else stays where LocalBackend puts it, on the
driver's machine: the learners (and their ranks), the evaluator, and the driver with PBT.

The transport of docs/architecture.md's seams, with arrays instead of slot indices:

  Ray actor (`RayActorWorker`): the same ActorWorker / EnvRunner / PolicyWorker objects as a local actor worker
  acting for its own envs, over a private trajectory table of the run's layout (only this worker's slots are ever
  written, so only their pages are ever resident). `collect` steps until a slot group is full and returns its
  rows as numpy arrays, through the object store.
  driver (`RayBackend.poll`): writes the rows into the same slots of the run's shared trajectory table, marks the
  group as the learner's and sends the very TrajectoryReady the actor produced. From there the learner cannot
  tell the backends apart (batcher, lag check, V-trace, PBT, checkpoints, every algorithm). Its SlotsReleased go
  back to the actor with the next `collect` call: slot ownership moves as in a local run, so backpressure does
  too (an actor whose groups are all at the learner parks and is not called until one comes back), and at most
  IN_FLIGHT calls wait per actor.
  weights: each new version of a policy is put into the object store once; an actor gets the reference with its
  next call when its version is behind, and fetches the object itself (once per node, shared there).
  control channel: the rows of the driver's assignments and commands tables that name the actor's envs travel
  with every call (a few numbers per env), so learners' and the driver's choices reach the actors as locally.
  replay shards (SAC, --num_replay_shards): Ray actors the driver creates first; an actor sends each full group's
  transitions to one of them and only the group's policy versions to the driver; the learner samples them as a
  Ray client (appo/learning/replay_service.py).

Faults: actors are created with max_restarts=--ray_max_restarts; a call that fails because its actor died (killed,
or its node lost) makes the driver start the new incarnation (`start` again: envs rebuilt, the newest weights,
the groups its learners still hold), counted in stats/worker_restarts; so does a call that Ray, having queued it
before the death, runs on the new incarnation before its `start` (it answers "restarted"). Ray places the new
incarnation on any node with a free CPU. A call that does not return within --worker_stuck_timeout (a hung env)
gets its actor killed and restarted the same way. An exception inside an actor fails the run, as a local worker's does.
"""

from __future__ import annotations

import os
import signal
import socket
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from appo.backend import LocalBackend
from appo.buffers import POISON, allocate_control, first_slot, trajectory_spec
from appo.cfg import Cfg, Derived
from appo.learning.param_sync import ParamStore
from appo.messages import SlotsReleased, TrajectoryReady
from appo.model import make_model
from appo.wiring import actor_inbox, send
from utils.logging import log

IN_FLIGHT = 2  # collect calls queued per actor: one running, one waiting, so that an actor never idles
PARKED_SECONDS = 0.02  # a call that finds nothing to step returns after this long (its groups are all away)


class RayActorWorker:
    """Actor worker `worker_idx` inside a Ray actor. Ray constructs it again after a crash (max_restarts) from
    the same arguments; the driver then calls `start` again."""

    def __init__(
        self, cfg: Cfg, derived: Derived, worker_idx: int, spaces: tuple[Any, Any], replay_shards: list | None = None
    ) -> None:
        from appo.processes import limit_threads

        os.environ.setdefault("OMP_NUM_THREADS", "1")
        self._limits = limit_threads(1)  # one thread per actor, as in a local actor worker
        self.cfg, self.derived, self.worker_idx, self.spaces = cfg, derived, worker_idx, spaces
        self.replay_shards = replay_shards  # SAC's replay actors: full groups' transitions go there
        self.worker: Any = None

    def start(self, incarnation: int, group_at_learner: np.ndarray, weights: dict[int, tuple[int, Any]]) -> dict:
        """Build envs and acting components; `group_at_learner`: the run's table, whose rows of this worker's
        groups say which groups its learners still hold (a restarted worker must not refill them). Returns where
        it runs."""
        import ray

        from appo.sampling.actor_worker import ActorWorker
        from appo.sampling.policy_worker import make_policy_workers

        cfg, derived, w = self.cfg, self.derived, self.worker_idx
        buffers = private_trajectories(cfg, derived, self.spaces, w)
        self.control = control = allocate_control(cfg, derived)
        control["group_at_learner"].copy_(torch.from_numpy(group_at_learner))
        self.template = make_model(cfg, *self.spaces)
        self.params = [ParamStore(self.template) for _ in range(cfg.num_policies)]
        self.versions = [-1] * cfg.num_policies
        self._load_weights(weights)
        acting = make_policy_workers(cfg, derived, buffers, self.params, self.spaces, "cpu", control, 1000 + w)
        if self.worker is not None:
            self.worker.close()
        self.worker = ActorWorker(cfg, derived, w, buffers, control, incarnation, acting)
        self.buffers = {k: v.numpy() for k, v in buffers.items()}
        self.envs = slice(w * cfg.num_envs_per_worker, (w + 1) * cfg.num_envs_per_worker)  # its rows of the channel
        self.outbox = self.worker.keep_local(self.worker.init())
        if self.replay_shards:
            from appo.algorithms import algorithm_class
            from appo.learning.replay_service import ShardPusher

            self.pusher = ShardPusher(self.replay_shards, w)
            self.replay_rows = algorithm_class(cfg.algo).replay_rows
        context = ray.get_runtime_context()
        return {"node_id": context.get_node_id(), "pid": os.getpid(), "incarnation": incarnation}

    def _load_weights(self, weights: dict[int, tuple[int, Any]]) -> None:
        import ray

        for policy_id, (version, ref) in weights.items():
            if version == self.versions[policy_id]:
                continue
            state = ray.get(ref[0])  # the reference, not the value, travelled with the call
            self.template.load_state_dict({k: torch.from_numpy(v) for k, v in state.items()})
            self.params[policy_id].publish(self.template, version)
            self.versions[policy_id] = version

    def collect(
        self,
        releases: list[SlotsReleased],
        weights: dict[int, tuple[int, Any]],
        assignments: np.ndarray,
        commands: np.ndarray,
        seconds: float,
    ) -> dict:
        """Step until at least one slot group is full (or `seconds` pass, or every group is at the learner);
        returns the full groups' rows of every trajectory field, their TrajectoryReady messages and the
        episode reports due."""
        worker = self.worker
        if worker is None:  # Ray restarted this actor and ran a call queued for the dead one: the driver starts it
            return {"restarted": True}
        self.control["assignments"][self.envs] = torch.from_numpy(assignments)
        self.control["commands"][self.envs] = torch.from_numpy(commands)
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

    def _push(self, msg: TrajectoryReady) -> None:
        """The transitions of the trajectories `msg` hands over, to the next replay shard (one call)."""
        envs = range(msg.num_envs) if msg.envs is None else msg.envs
        slots = torch.tensor([msg.first_slot + e for e in envs], dtype=torch.int64)
        names = ("obs", "actions", "rewards", "dones", "truncated", "final_obs")
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
    for name, spec in trajectory_spec(cfg, *spaces).items():
        array = np.zeros((derived.num_slots, *spec.shape), dtype=torch.empty(0, dtype=spec.dtype).numpy().dtype)
        if name != "rnn_states":  # every trajectory's first state is the zero state
            array[first:last] = POISON if spec.dtype.is_floating_point else -1
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
    versions: list[int] = field(default_factory=list)  # weights versions sent, per policy
    is_parked: bool = False
    started: Any = None  # the ref of the pending `start` call
    start_at: float | None = None  # when to call `start` again (its actor was still restarting)


class RayBackend(LocalBackend):
    """LocalBackend's learners, evaluator and supervision on this machine; actor workers as Ray actors."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.started_ray = False
        self.actors: list[ActorState] = []
        self.weights: list[tuple[int, Any]] = [(-1, None)] * self.cfg.num_policies  # (version, [ref]) per policy
        self.ray_restarts = 0
        self.failures: list[str] = []
        self.np_buffers = {k: v.numpy() for k, v in self.buffers.items()}  # the run's shared trajectory table
        self.shards: list[Any] = []  # SAC's replay actors (appo/learning/replay_service.py)

    @property
    def restarts(self) -> int:
        return super().restarts + self.ray_restarts

    # --- start ----------------------------------------------------------------------------------------
    def start(self) -> None:
        """Join (or start) Ray before anything else: an off-policy learner's replay shards must exist before the
        learner that samples them starts."""
        import ray

        self.started_ray = connect(self.cfg, namespace=f"appo_{socket.gethostname()}_{os.getpid()}")
        if self.uses_replay_shards():
            from appo.learning.replay_service import ReplayLocation, create_shards, shard_names

            obs_space, action_space = self.spaces
            self.shards = create_shards(self.cfg, tuple(obs_space.shape), int(np.prod(action_space.shape)))
            context = ray.get_runtime_context()
            self.replay_location = ReplayLocation(
                context.gcs_address, context.namespace, shard_names(self.cfg.num_replay_shards)
            )
            log.info("ray: the replay in %d shard(s) of %d transitions", len(self.shards), self.cfg.replay_size)
        super().start()

    def uses_replay_shards(self) -> bool:
        from appo.algorithms import algorithm_class

        return algorithm_class(self.cfg.algo).replay_shards and self.cfg.num_replay_shards > 0

    def start_actor_workers(self) -> None:
        import ray

        nodes = [n for n in ray.nodes() if n["Alive"]]
        log.info(
            "ray: %s, %d node(s), %g CPUs; actor workers on any node (%g CPU each)",
            "private instance on 127.0.0.1" if self.started_ray else f"cluster at {self.cfg.ray_address}",
            len(nodes),
            sum(n["Resources"].get("CPU", 0) for n in nodes),
            self.cfg.ray_worker_cpus,
        )
        remote = ray.remote(RayActorWorker).options(
            num_cpus=self.cfg.ray_worker_cpus,
            max_restarts=self.cfg.ray_max_restarts,
            max_task_retries=0,  # a lost call is not replayed: the driver restarts the actor's work itself
            scheduling_strategy="SPREAD",
        )
        for w in self.topology.actors:
            handle = remote.remote(self.cfg, self.derived, w, self.spaces, self.shards or None)
            state = ActorState(handle, versions=[-1] * self.cfg.num_policies)
            self.actors.append(state)
            self._start(w, state)

    def _start(self, w: int, state: ActorState) -> None:
        held = self.control["group_at_learner"].numpy().copy()
        state.started = state.handle.start.remote(state.incarnation, held, self._weights_for(state))
        state.in_flight = {state.started: time.monotonic()}
        state.is_parked, state.start_at = False, None

    def _weights_for(self, state: ActorState) -> dict[int, tuple[int, Any]]:
        """References to the newest weights of each policy this actor has not had yet."""
        self._put_weights()
        out = {}
        for p, (version, ref) in enumerate(self.weights):
            if ref is not None and version != state.versions[p]:
                out[p] = (version, ref)
                state.versions[p] = version
        return out

    def _put_weights(self) -> None:
        """Put each policy's newest published weights into the object store, once per version."""
        import ray

        for p, store in enumerate(self.params):
            version = store.current_version()
            if version != self.weights[p][0]:
                version = store.pull(self.template)
                state = {k: v.numpy().copy() for k, v in self.template.state_dict().items()}
                self.weights[p] = (version, [ray.put(state)])  # in a list: actors get the reference

    @property
    def template(self) -> Any:
        if not hasattr(self, "_template"):
            self._template = make_model(self.cfg, *self.spaces)
        return self._template

    # --- the driver's loop ----------------------------------------------------------------------------
    def poll(self, timeout: float) -> list[Any]:
        """Releases out to the actors, full groups in to the learners; the driver's messages."""
        import ray

        out: list[Any] = []
        self._take_releases()
        self._submit()
        refs = [ref for state in self.actors for ref in state.in_flight]
        if refs:
            ready, rest = ray.wait(refs, num_returns=1, timeout=timeout)
            if ready and rest:
                ready += ray.wait(rest, num_returns=len(rest), timeout=0)[0]
            for ref in ready:
                out += self._on_result(ref)
        else:
            time.sleep(timeout)
        self._take_releases()
        self._submit()
        return out + super().poll(0.0)

    def _take_releases(self) -> None:
        """The learners' SlotsReleased, from each actor worker's inbox, to go with its next call."""
        for w, state in enumerate(self.actors):
            try:
                msgs = actor_inbox(self.queues, w).get_many(block=False)
            except Exception:  # queue.Empty
                continue
            state.releases += [m for m in msgs if type(m) is SlotsReleased]
            state.is_parked = state.is_parked and not state.releases

    def _submit(self) -> None:
        """Keep IN_FLIGHT collect calls queued on every started actor that is not parked."""
        assignments, commands = self.control["assignments"].numpy(), self.control["commands"].numpy()
        per_worker = self.cfg.num_envs_per_worker
        for w, state in enumerate(self.actors):
            if state.start_at is not None and time.monotonic() >= state.start_at:
                self._start(w, state)
            if state.started is not None or state.start_at is not None or state.is_parked:
                continue
            envs = slice(w * per_worker, (w + 1) * per_worker)
            while len(state.in_flight) < IN_FLIGHT:
                ref = state.handle.collect.remote(
                    state.releases, self._weights_for(state), assignments[envs], commands[envs], 1.0
                )
                state.releases = []
                state.in_flight[ref] = time.monotonic()

    def _on_result(self, ref: Any) -> list[Any]:
        import ray

        owner = next(((w, s) for w, s in enumerate(self.actors) if ref in s.in_flight), None)
        if owner is None:
            return []  # a call to an incarnation already given up (its actor died; the rest of its calls fail too)
        w, state = owner
        del state.in_flight[ref]
        try:
            result = ray.get(ref)
        except ray.exceptions.RayActorError as exc:
            if ref == state.started and isinstance(exc, ray.exceptions.ActorUnavailableError):
                state.started, state.start_at = None, time.monotonic() + 0.5  # Ray is still bringing it back
            else:
                self._restart(w, state, f"died ({type(exc).__name__}: {first_line(exc)})")
            return []
        except ray.exceptions.RayError as exc:  # an exception inside the actor: the run fails, as locally
            self.failures.append(f"actor_worker_{w}: {str(exc).strip().splitlines()[-1]}")
            log.error("actor worker %d failed:\n%s", w, exc)
            return []
        if ref == state.started:
            state.started, state.node_id = None, result["node_id"]
            log.info(
                "actor worker %d (incarnation %d) on node %s, pid %d",
                w,
                result["incarnation"],
                result["node_id"],
                result["pid"],
            )
            return []
        if result.get("restarted"):  # it died and Ray brought it back before its calls' failures reached us
            self._restart(w, state, "died (Ray brought it back first)")
            return []
        state.is_parked = result["parked"] and not state.releases
        self._deliver(result)
        return result["reports"]

    def _deliver(self, result: dict) -> None:
        """Write the full groups into the run's slots, hand them to the learners, as a local actor would."""
        at_learner = self.control["group_at_learner"]
        n = self.derived.envs_per_split
        for first, rows in result["groups"].items():
            for name, array in rows.items():
                self.np_buffers[name][first : first + n] = array
        for msg in result["ready"]:
            at_learner[msg.first_slot // n, msg.policy_id] = 1  # ownership moves with the message below
        send(result["ready"], self.queues)

    def _restart(self, w: int, state: ActorState, why: str) -> None:
        if state.incarnation >= self.cfg.ray_max_restarts >= 0:
            self.failures.append(f"actor_worker_{w}: {why}, after {state.incarnation} restarts (--ray_max_restarts)")
            state.in_flight, state.started = {}, None
            state.is_parked = True
            return
        self.ray_restarts += 1
        state.incarnation += 1
        state.versions = [-1] * self.cfg.num_policies
        log.warning("actor_worker_%d %s: starting it again (restart %d)", w, why, self.ray_restarts)
        self._start(w, state)

    def check(self) -> list[str]:
        """Dead local children, failed actors; actors whose call hung past --worker_stuck_timeout are killed
        (Ray restarts them, `_on_result` starts them again)."""
        import ray

        now = time.monotonic()
        for w, state in enumerate(self.actors):
            limit = self.cfg.worker_stuck_timeout
            if state.started is not None:
                limit = self.cfg.worker_start_timeout + self.cfg.decorrelate_experience_max_seconds
            oldest = min(state.in_flight.values(), default=now)
            if now - oldest > limit + 1.0:
                log.warning("actor_worker_%d: no answer for %.0f s; killing it", w, now - oldest)
                ray.kill(state.handle, no_restart=False)
                for ref in state.in_flight:
                    state.in_flight[ref] = now  # once: its calls now fail and restart it
        failures, self.failures = self.failures, []
        return super().check() + failures

    # --- stop -----------------------------------------------------------------------------------------
    def stop(self, driver: Any) -> None:
        """Actors first (killed: what they hold is at most one rollout), then LocalBackend's order; then Ray
        itself, when this run started it."""
        try:
            self.kill_actors()
            super().stop(driver)  # the learners' final checkpoints (with --save_replay, the shards' rows)
            if self.shards:
                from appo.learning.replay_service import shard_report

                for line in shard_report(self.shards):
                    log.info("%s", line)
        finally:
            self.kill_shards()
            self.disconnect()

    def kill_actors(self) -> None:
        import ray

        for state in self.actors:
            try:
                ray.kill(state.handle, no_restart=True)
            except Exception as exc:  # already gone with its node
                log.warning("could not kill an actor: %s", exc)
        self.actors = []

    def kill_shards(self) -> None:
        import ray

        for shard in self.shards:
            try:
                ray.kill(shard, no_restart=True)
            except Exception as exc:  # already gone with its node
                log.warning("could not kill a replay shard: %s", exc)
        self.shards = []

    def kill_all(self) -> None:
        try:
            self.kill_actors()
            self.kill_shards()
        finally:
            super().kill_all()
            self.disconnect()

    def disconnect(self) -> None:
        import ray

        if ray.is_initialized():
            ray.shutdown()  # with a private instance, this stops every Ray process it started


def first_line(exc: BaseException, limit: int = 160) -> str:
    """The first non-empty line of an exception's message, cut to `limit` characters (Ray's run to pages)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return (lines[0] if lines else "")[:limit]


def connect(cfg: Cfg, namespace: str | None = None) -> bool:
    """Join the cluster at --ray_address, or start a private instance on loopback; returns whether Ray was
    started here (and so is to be stopped at exit)."""
    return connect_ray(cfg.ray_address, cfg.ray_object_store_mb, cfg.log_level == "debug", namespace)


def connect_ray(
    address: str, object_store_mb: int = 0, log_to_driver: bool = False, namespace: str | None = None
) -> bool:
    """Join the cluster at `address` (auto, HEAD:6379), or with an empty one start a private instance on
    loopback with every CPU of this machine; returns whether Ray was started here (stop it at exit). Named
    actors are found within `namespace` (None: Ray's anonymous namespace of this job)."""
    if not address:
        # Before Ray is imported: its processes then listen on (and advertise) 127.0.0.1 only, not every
        # interface (ray._private.services.get_node_ip_address; Ray's cluster services trust their network).
        os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    import ray

    # ray.init installs its own SIGTERM handler (it aborts the process); the caller's must stay: the driver
    # stops every component in order and saves (appo/runner.py), a sweep stops its runs.
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    quiet = {"logging_level": "warning", "log_to_driver": log_to_driver, "namespace": namespace}
    try:
        if address:
            ray.init(address=address, **quiet)
            return False
        extra = {"object_store_memory": object_store_mb * 2**20} if object_store_mb > 0 else {}
        ray.init(num_cpus=os.cpu_count(), include_dashboard=False, **quiet, **extra)
        return True
    finally:
        for s, handler in handlers.items():
            if handler is not None:
                signal.signal(s, handler)
