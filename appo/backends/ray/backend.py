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
  weights: each publish of a policy (or of one of its self-play snapshots) is put into the object store once;
  an actor gets the reference with its next call when it has not had that publish, and fetches the object itself
  (once per node, shared there). Publishes are told apart by their store's publish stamp, not by version: a PBT
  copy refills a self-play pool with its source's snapshots, under versions the slots may already hold.
  control channel: the rows of the driver's assignments and commands tables that name the actor's envs travel
  with every call (a few numbers per env), and the table of filled self-play snapshots with a pool, so learners'
  and the driver's choices reach the actors as locally.
  replay shards (SAC, --num_replay_shards): Ray actors the driver creates first; an actor sends each full group's
  transitions to one of them and only the group's policy versions to the driver; the learner samples them as a
  Ray client (appo/backends/ray/replay_shards.py).

Faults: actors are created with max_restarts=--ray_max_restarts; a call that fails because its actor died (killed,
or its node lost) makes the driver start the new incarnation (`start` again: envs rebuilt, the newest weights,
the groups its learners still hold), counted in stats/worker_restarts; so does a call that Ray, having queued it
before the death, runs on the new incarnation before its `start` (it answers "restarted"). Ray places the new
incarnation on any node with a free CPU. A call that does not return within --worker_stuck_timeout (a hung env)
gets its actor killed and restarted the same way. An exception inside an actor fails the run, as a local worker's does.
"""

from __future__ import annotations

import os
import socket
import time
from typing import Any

import numpy as np

from appo.backends.local import LocalBackend
from appo.backends.ray.actors import IN_FLIGHT, ActorState, RayActorWorker, remote_actor_class
from appo.backends.ray.connection import connect
from appo.models.registry import make_model
from appo.protocol.buffers import obs_dtype as stored_obs_dtype
from appo.protocol.buffers import torch_dtype, worker_envs
from appo.protocol.messages import SlotsReleased
from appo.protocol.wiring import actor_inbox, send
from appo.utils.logging import first_line, log


class RayBackend(LocalBackend):
    """LocalBackend's learners, evaluator and supervision on this machine; actor workers as Ray actors."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.started_ray = False
        self.actors: list[ActorState] = []
        # (publish stamp, version, [ref]) per weight set: the policies', then their self-play snapshots'
        self.weights: list[tuple[int, int, Any]] = [(-1, -1, None)] * len(self.weight_sets)
        self.ray_restarts = 0
        self.failures: list[str] = []
        self.np_buffers = {k: v.numpy() for k, v in self.buffers.items()}  # the run's shared trajectory table
        self.shards: list[Any] = []  # SAC's replay actors (appo/backends/ray/replay_shards.py)

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
            from appo.backends.ray.replay_shards import ReplayLocation, create_shards, shard_names

            obs_space, action_space = self.spaces
            obs_dtype = torch_dtype(stored_obs_dtype(obs_space))  # the replay keeps the trajectories' dtype
            self.shards = create_shards(self.cfg, tuple(obs_space.shape), int(np.prod(action_space.shape)), obs_dtype)
            context = ray.get_runtime_context()
            self.replay_factory = ReplayLocation(
                context.gcs_address, context.namespace, shard_names(self.cfg.num_replay_shards)
            )
            log.info("ray: the replay in %d shard(s) of %d transitions", len(self.shards), self.cfg.replay_size)
        super().start()

    def uses_replay_shards(self) -> bool:
        return self.cfg.traits.replay_shards and self.cfg.num_replay_shards > 0

    def start_actor_workers(self) -> None:
        remote = remote_actor_class(self.cfg, RayActorWorker, self.started_ray, "actor workers")
        for w in self.topology.actors:
            handle = remote.remote(self.cfg, self.derived, w, self.spaces, self.shards or None)
            state = ActorState(handle)
            self.actors.append(state)
            self._start(w, state)

    def _start(self, w: int, state: ActorState) -> None:
        held = self.control["group_at_learner"].numpy().copy()
        state.stamps = [-1] * len(self.weight_sets)  # a start builds every weight set afresh: all are sent
        state.started = state.handle.start.remote(state.incarnation, held, self._weights_for(state))
        state.in_flight = {state.started: time.monotonic()}
        state.is_parked, state.start_at = False, None

    def _weights_for(self, state: ActorState) -> dict[int, tuple[int, Any]]:
        """(version, reference) of the newest weights of each weight set this actor has not had yet."""
        self._put_weights()
        out = {}
        for p, (stamp, version, ref) in enumerate(self.weights):
            if ref is not None and stamp != state.stamps[p]:
                out[p] = (version, ref)
                state.stamps[p] = stamp
        return out

    def _put_weights(self) -> None:
        """Put each weight set's newest published weights into the object store, once per publish (the store's
        stamp, read before the pull: a publish during it is put again at the next call, never missed)."""
        import ray

        for p, store in enumerate(self.weight_sets):
            stamp = store.current_stamp()
            if stamp != self.weights[p][0]:
                version = store.pull(self.template)
                state = {k: v.numpy().copy() for k, v in self.template.state_dict().items()}
                self.weights[p] = (stamp, version, [ray.put(state)])  # in a list: actors get the reference

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
        snapshots = self.control["snapshot_versions"].numpy().copy() if "snapshot_versions" in self.control else None
        for w, state in enumerate(self.actors):
            if state.start_at is not None and time.monotonic() >= state.start_at:
                self._start(w, state)
            if state.started is not None or state.start_at is not None or state.is_parked:
                continue
            envs = worker_envs(self.cfg, self.derived, w)
            while len(state.in_flight) < IN_FLIGHT:
                ref = state.handle.collect.remote(
                    state.releases, self._weights_for(state), assignments[envs], commands[envs], 1.0, snapshots
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
                self._restart(w, state, f"died ({type(exc).__name__}: {first_line(exc, 160)})")
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
            if not driver.interrupted and not driver.errors:
                driver.on_messages(self.final_reports())
            self.kill_actors()
            super().stop(driver)  # the learners' final checkpoints (with --save_replay, the shards' rows)
            if self.shards:
                from appo.backends.ray.replay_shards import shard_report

                for line in shard_report(self.shards):
                    log.info("%s", line)
        finally:
            self.kill_shards()
            self.disconnect()

    def final_reports(self, timeout: float = 5.0) -> list[Any]:
        """Each running actor's last episode report (behind the collect calls it has queued, about a second each),
        as local actor workers send theirs at the stop; an actor that does not answer within `timeout` is skipped."""
        import ray

        collecting = [ref for s in self.actors for ref in s.in_flight]
        refs = [s.handle.final_reports.remote() for s in self.actors if s.started is None and s.start_at is None]
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=timeout) if refs else ([], [])
        # An actor answers in order: the collect calls queued before its last report are done by now (their
        # trajectories stay untrained, as at any stop; their episodes are reported).
        done = ray.wait(collecting, num_returns=len(collecting), timeout=0)[0] if collecting else []
        out: list[Any] = []
        for ref in [*done, *ready]:
            try:
                result = ray.get(ref)
            except ray.exceptions.RayError:  # died at the end: its last episodes are lost, not the run
                continue
            out += result.get("reports", []) if isinstance(result, dict) else result
        return out

    def kill_actors(self, close_timeout: float = 10.0) -> None:
        """Each actor asked to close its envs (behind the calls it has queued; up to `close_timeout` seconds for
        all), then killed."""
        import ray

        closing = []
        for state in self.actors:
            try:
                closing.append(state.handle.close.remote())
            except Exception:  # an actor class without envs to close, or one gone with its node
                continue
        if closing and close_timeout > 0:
            ray.wait(closing, num_returns=len(closing), timeout=close_timeout)
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
            self.kill_actors(close_timeout=3.0)
            self.kill_shards()
        finally:
            super().kill_all()
            self.disconnect()

    def disconnect(self) -> None:
        import ray

        if ray.is_initialized():
            ray.shutdown()  # with a private instance, this stops every Ray process it started
