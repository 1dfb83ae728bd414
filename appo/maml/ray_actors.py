"""--algo=maml_trpo --backend=ray: MAML's task rollouts on Ray actors, the meta-step on the driver as locally.

The same pieces as APPO's Ray backend (appo/backends/ray/backend.py), driven the way appo/maml/actors.py
drives local actor workers:

  Ray actor (`RayMamlWorker`): a `RayActorWorker` (the same ActorWorker / EnvRunner / acting components over a
  private trajectory table) with one weight set per row of the meta-batch, and the control channel's episode seeds
  written with every call, beside the assignments. A released split resets its envs from those rows (task,
  weight set, seeds) and runs their episodes to the end; `collect` returns the split's rows.
  driver (`RayActorPool`): an `ActorPool` whose `sample` gives each free split one task's row of the control
  channel and its SlotsReleased, which go to the split's actor with its next `collect` call (one call in flight
  per actor); the returned rows go into the driver's trajectory table and from there, as locally, into the
  task's row of the episode buffers. Each published weight set is put into the object store once; an actor gets
  the references of the sets whose version it lacks with its next call.

Episodes depend on their seeds, weights and the split's size alone, so iterations are bit-identical to the local
backend's with the same seed, on any number of actors and nodes. Faults: an actor that dies (kill -9, its node
lost) is restarted by Ray (--ray_max_restarts), started again by the driver (`start`: envs rebuilt, every weight
set sent again) and its unfinished splits are given again, from the same seeds: the same episodes. A call that
does not return within --worker_stuck_timeout gets its actor killed and restarted the same way; an exception
inside an actor fails the run. The pool joins the cluster at --ray_address, or starts a private Ray instance,
and `close` stops its actors and (with a private instance) Ray itself.
"""

from __future__ import annotations

import os
import socket
import time
from collections import deque
from typing import Any

import numpy as np
import torch

from appo.backends.ray.actors import ActorState, RayActorWorker, remote_actor_class
from appo.backends.ray.connection import connect
from appo.maml.actors import RESULT_TIMEOUT, ActorPool
from appo.protocol.buffers import worker_envs
from appo.protocol.messages import SlotsReleased
from appo.protocol.wiring import close_all
from appo.utils.logging import first_line, log

COLLECT_SECONDS = 1.0  # a call returns at the first finished split, or after this long


class RayMamlWorker(RayActorWorker):
    """An episodic actor worker inside a Ray actor: `num_weight_sets` weight sets, episode seeds per call."""

    def __init__(self, cfg: Any, derived: Any, worker_idx: int, spaces: tuple[Any, Any], num_weight_sets: int) -> None:
        super().__init__(cfg, derived, worker_idx, spaces)
        self.num_weight_sets = num_weight_sets

    def collect_episodes(
        self,
        releases: list[SlotsReleased],
        weights: dict[int, tuple[int, Any]],
        assignments: np.ndarray,
        seeds: np.ndarray,
        seconds: float,
    ) -> dict:
        """`collect` with this worker's rows of the episode seeds (read when a released split starts)."""
        if self.worker is not None:
            self.control["episode_seeds"][self.envs] = torch.from_numpy(seeds)
        commands = np.full((len(assignments), self.control["commands"].shape[1]), np.nan, dtype=np.float32)
        return self.collect(releases, weights, assignments, commands, seconds)


class RayActorPool(ActorPool):
    """ActorPool's interface (start, publish, sample, close; `params[0]` the meta-parameters' store, for the
    Hessian-vector product helpers) over Ray actors."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.ray_actors: list[ActorState] = []
        self.refs: list[tuple[int, Any]] = [(-1, None)] * len(self.params)  # (version, [object ref]) per weight set
        self.restarts = 0

    def start(self) -> None:
        started = connect(self.cfg, namespace=f"appo_maml_{socket.gethostname()}_{os.getpid()}")
        remote = remote_actor_class(self.cfg, RayMamlWorker, started, "MAML's actor workers")
        for w in range(self.cfg.num_workers):
            handle = remote.remote(self.actor_cfg, self.derived, w, self.spaces, len(self.params))
            state = ActorState(handle, versions=[-1] * len(self.params))
            self.ray_actors.append(state)
            self._start(state)

    def _start(self, state: ActorState) -> None:
        held = self.control["group_at_learner"].numpy().copy()  # unused by episodic runs: every group starts held
        state.versions = [-1] * len(self.params)
        state.started = state.handle.start.remote(state.incarnation, held, self._weights_for(state))
        state.in_flight = {state.started: time.monotonic()}
        state.start_at = None  # a start again after ActorUnavailableError keeps the releases: same incarnation

    def publish(self, weight_set: int, params: Any) -> None:
        """The local store (the helpers read set 0) and the object store: once per version."""
        import ray

        super().publish(weight_set, params)
        state = {k: v.detach().numpy().copy() for k, v in self.scratch.state_dict().items()}
        self.refs[weight_set] = (self.version, [ray.put(state)])  # in a list: actors get the reference

    def _weights_for(self, state: ActorState) -> dict[int, tuple[int, Any]]:
        out = {}
        for s, (version, ref) in enumerate(self.refs):
            if ref is not None and version != state.versions[s]:
                out[s] = (version, ref)
                state.versions[s] = version
        return out

    # --- one batch of episodes ---------------------------------------------------------------------------
    def sample(self, buffer: int, stream: int, iteration: int, tasks: list[int], weight_sets: list[int]) -> None:
        """As ActorPool.sample: every task's --fast_batch_size episodes into its row of episode buffer `buffer`."""
        todo = deque(range(len(tasks)))
        free = deque(self.splits)
        running: dict[tuple[int, int], int] = {}  # split -> the row it runs

        def dispatch(split: tuple[int, int], k: int) -> None:
            self.assign(split, tasks[k], weight_sets[k], (stream, iteration, k))
            running[split] = k
            state = self.ray_actors[split[0]]
            state.releases.append(SlotsReleased(split[0], split[1], 0, 0, state.incarnation))

        while todo or running:
            while todo and free:
                dispatch(free.popleft(), todo.popleft())
            self._submit(running)
            for w, result in self._results():
                state = self.ray_actors[w]
                if result is None:  # restarted: its unfinished splits run again, from the same seeds
                    for split in [split for split in running if split[0] == w]:
                        log.warning("actor worker %d restarted: task row %d sampled again", w, running[split])
                        dispatch(split, running[split])
                    continue
                n = self.derived.envs_per_split
                for first, rows in result["groups"].items():
                    for name, array in rows.items():
                        self.np_buf[name][first : first + n] = array
                for msg in result["ready"]:
                    split = (msg.worker_idx, msg.split_idx)
                    if split in running and msg.incarnation == state.incarnation:
                        self._copy_out(buffer, running.pop(split), msg.first_slot)
                        free.append(split)

    def _submit(self, running: dict[tuple[int, int], int]) -> None:
        """A collect call to every started actor that has none in flight and splits to run or releases to send."""
        busy = {w for w, _ in running}
        assignments, seeds = self.control["assignments"].numpy(), self.control["episode_seeds"].numpy()
        for w, state in enumerate(self.ray_actors):
            if state.start_at is not None and time.monotonic() >= state.start_at:
                self._start(state)
            if state.started is not None or state.start_at is not None or state.in_flight:
                continue
            if not state.releases and w not in busy:
                continue
            envs = worker_envs(self.actor_cfg, self.derived, w)
            ref = state.handle.collect_episodes.remote(
                state.releases, self._weights_for(state), assignments[envs], seeds[envs], COLLECT_SECONDS
            )
            state.releases = []
            state.in_flight[ref] = time.monotonic()

    def _results(self) -> list[tuple[int, dict | None]]:
        """(actor, result) of the calls that returned within RESULT_TIMEOUT; None for an actor started again.
        Raises when an actor failed (an exception inside it, or more than --ray_max_restarts restarts)."""
        import ray

        owners = {ref: w for w, state in enumerate(self.ray_actors) for ref in state.in_flight}
        self._check_stuck()
        if not owners:
            time.sleep(0.01)  # actors waiting to be started again
            return []
        ready, rest = ray.wait(list(owners), num_returns=1, timeout=RESULT_TIMEOUT)
        if ready and rest:
            ready += ray.wait(rest, num_returns=len(rest), timeout=0)[0]
        out: list[tuple[int, dict | None]] = []
        for ref in ready:
            w = owners[ref]
            state = self.ray_actors[w]
            if ref not in state.in_flight:
                continue  # a call to an incarnation already given up
            del state.in_flight[ref]
            try:
                result = ray.get(ref)
            except ray.exceptions.RayActorError as exc:
                if ref == state.started and isinstance(exc, ray.exceptions.ActorUnavailableError):
                    state.started, state.start_at = None, time.monotonic() + 0.5  # Ray is still bringing it back
                else:
                    out.append((w, self._restart(w, state, f"died ({type(exc).__name__}: {first_line(exc, 160)})")))
                continue
            except ray.exceptions.RayError as exc:  # an exception inside the actor: the run fails, as locally
                raise RuntimeError(f"actor_worker_{w}: {str(exc).strip().splitlines()[-1]}") from None
            if ref == state.started:
                state.started = None
                log.info(
                    "actor worker %d (incarnation %d) on node %s, pid %d",
                    w,
                    result["incarnation"],
                    result["node_id"],
                    result["pid"],
                )
            elif result.get("restarted"):  # Ray brought it back and ran a call queued for the dead one
                out.append((w, self._restart(w, state, "died (Ray brought it back first)")))
            else:
                out.append((w, result))
        return out

    def _restart(self, w: int, state: ActorState, why: str) -> None:
        if state.incarnation >= self.cfg.ray_max_restarts >= 0:
            raise RuntimeError(f"actor_worker_{w}: {why}, after {state.incarnation} restarts (--ray_max_restarts)")
        self.restarts += 1
        state.incarnation += 1
        state.releases = []  # the predecessor's: `sample` gives its splits again, to this incarnation
        log.warning("actor_worker_%d %s: starting it again (restart %d)", w, why, self.restarts)
        self._start(state)

    def _check_stuck(self) -> None:
        """Kill an actor whose call hung past --worker_stuck_timeout (its calls then fail, and it is restarted)."""
        import ray

        now = time.monotonic()
        for w, state in enumerate(self.ray_actors):
            limit = self.cfg.worker_start_timeout if state.started is not None else self.cfg.worker_stuck_timeout
            oldest = min(state.in_flight.values(), default=now)
            if now - oldest > limit + 1.0:
                log.warning("actor_worker_%d: no answer for %.0f s; killing it", w, now - oldest)
                ray.kill(state.handle, no_restart=False)
                for ref in state.in_flight:
                    state.in_flight[ref] = now

    def close(self) -> None:
        """Kill the actors (what they hold is at most one rollout), then leave Ray (stopping a private instance)."""
        import ray

        try:
            for state in self.ray_actors:
                try:
                    ray.kill(state.handle, no_restart=True)
                except Exception as exc:  # already gone with its node
                    log.warning("could not kill an actor: %s", exc)
            self.ray_actors = []
        finally:
            if ray.is_initialized():
                ray.shutdown()  # with a private instance, this stops every Ray process it started
            close_all(self.queues)
