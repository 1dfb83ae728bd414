"""The driver's view of its children: start every process, watch them, replace the ones that can be
replaced, and stop them all.

- An actor worker killed by a signal (OOM killer, segfault, kill -9), silent for longer than
  `--worker_stuck_timeout` (its heartbeat stamp in shared memory), or hung while starting is killed if still
  there and started again with a new incarnation, reading the same inbox; the slot groups it was filling are
  reused, those with the learner come back by SlotsReleased, and replies and releases meant for the old
  incarnation are ignored. Lost: its unfinished rollouts.
- A slow start is not a hang. A starting worker stamps its heartbeat negative (-wall time) as it goes (its
  imports done, each env built, each decorrelation step): it is hung only when no progress came for the start
  allowance, `--worker_start_timeout` times the machine's load at the start (processes started per core, at
  least 1: 18 processes on 2 cores import torch nine at a time), counted from its last progress, or from its
  start before the first.
- A policy worker killed by a signal, or silent for longer than `--worker_stuck_timeout` (blocked for good
  inside its request queue when an actor worker was killed in that queue's critical section), is started
  again on a fresh request queue (the old one may block its writers: a reader killed while waiting on a
  process-shared condition variable can leave it so); the other policy workers of its policy move to the
  new queue, and actor workers re-send the requests that went unanswered.
- A child that raised (exit code > 0; it has sent an ErrorReport), a learner or an evaluator that died:
  the run stops with a non-zero status. Running the same command again resumes from the last checkpoint.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from appo.protocol.processes import start_process
from appo.protocol.wiring import POLICY_QUEUE_SPARES
from appo.utils.logging import log


class Child:
    """One supervised process and how to start it again."""

    def __init__(self, kind: str, name: str, start: Callable[[int], Any], restartable: bool) -> None:
        self.kind, self.name, self.start, self.restartable = kind, name, start, restartable
        self.incarnation = 0
        self.started = time.time()
        self.process = start(0)

    def restart(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join(5.0)
        self.incarnation += 1
        self.started = time.time()
        self.process = self.start(self.incarnation)


class Supervisor:
    def __init__(
        self,
        ctx: Any,
        heartbeats: dict[str, Any],
        queues: Any,
        stuck_timeout: float,
        workers_per_policy: int = 1,
        start_timeout: float = 120.0,
    ) -> None:
        self.ctx = ctx
        # kind -> shared float64 tensor: wall time of each actor worker's / policy worker's last loop
        self.heartbeats = heartbeats
        self.workers_per_policy = workers_per_policy
        # Each actor worker's current start, and which request queue each policy's workers read (see
        # appo/protocol/wiring.py); None: no limit (an actor worker's inbox cannot be wedged, its successor reads it).
        self.queue_tables = {
            "actors": (queues.incarnations, None),
            "policy_workers": (queues.policy_incarnations, POLICY_QUEUE_SPARES),
        }
        self.stuck_timeout, self.start_timeout = stuck_timeout, start_timeout
        self.children: list[Child] = []
        self.restarts = 0
        self.cores = max(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1, 1)

    @property
    def start_allowance(self) -> float:
        """Seconds a starting child may go without progress: --worker_start_timeout times processes per core."""
        return self.start_timeout * max(1.0, len(self.children) / self.cores)

    def add(
        self, kind: str, name: str, target: Callable[..., None], args: Callable[[int], tuple], restartable: bool = False
    ) -> None:
        """Start `target(*args(incarnation))` as process `name`."""
        self.children.append(
            Child(kind, name, lambda inc: start_process(self.ctx, target, args(inc), name), restartable)
        )

    def of_kind(self, kind: str) -> list[Any]:
        return [c.process for c in self.children if c.kind == kind]

    def check(self) -> list[str]:
        """Replace what can be replaced; returns the failures that must stop the run."""
        failures = []
        now = time.time()
        for child in self.children:
            code = child.process.exitcode
            # An exit code says more than a stale heartbeat: a child that raised is a failure, not a hang.
            stuck = code is None and child.kind in self.heartbeats and self._is_stuck(child, now)
            if code is None and not stuck:
                continue
            if child.restartable and (stuck or code < 0) and self._has_spare_queue(child):
                why = self._silence(child, now) if stuck else f"killed by signal {-code}"
                log.warning("%s %s: starting it again (restart %d)", child.name, why, self.restarts + 1)
                self.heartbeats[child.kind][self._beat_index(child)] = 0.0  # no verdict until the new one beats
                table, _ = self.queue_tables[child.kind]
                table[self._index(child)] += 1  # replies to the old start are dropped; siblings switch queues
                child.restart()
                self.restarts += 1
            elif stuck or code < 0:
                failures.append(
                    f"{child.name} died ({'stuck' if stuck else f'signal {-code}'}) and is not restarted "
                    f"(its queue was replaced too often already)"
                    if child.restartable
                    else f"{child.name} died (signal {-code})"
                )
            else:
                failures.append(f"{child.name} exited with code {code}")
        return failures

    @staticmethod
    def _index(child: Child) -> int:
        """actor_worker_<w> -> w; policy_worker_<p>_<i> -> p (its policy's queue)."""
        parts = child.name.split("_")
        return int(parts[2])

    def _has_spare_queue(self, child: Child) -> bool:
        table, spares = self.queue_tables[child.kind]
        return spares is None or int(table[self._index(child)]) + 1 < spares

    def _beat_index(self, child: Child) -> int:
        """actor_worker_<w> -> w; policy_worker_<p>_<i> -> p * workers_per_policy + i."""
        parts = child.name.split("_")
        return int(parts[2]) if child.kind == "actors" else int(parts[2]) * self.workers_per_policy + int(parts[3])

    def _is_stuck(self, child: Child, now: float) -> bool:
        beat = float(self.heartbeats[child.kind][self._beat_index(child)])
        if beat == 0:  # no sign yet: importing, or hung before its first progress
            return now - child.started > self.start_allowance
        if beat < 0:  # starting: -beat is the time of its last progress
            return now - max(-beat, child.started) > self.start_allowance
        return now - beat > self.stuck_timeout

    def _silence(self, child: Child, now: float) -> str:
        beat = float(self.heartbeats[child.kind][self._beat_index(child)])
        if beat <= 0:
            since = "its start" if beat == 0 else "its last start-up progress"
            return (
                f"starting, without progress {now - max(-beat, child.started):.0f} s after {since} (start allowance "
                f"{self.start_allowance:.0f} s: --worker_start_timeout x {len(self.children)} processes / "
                f"{self.cores} cores)"
            )
        return f"silent for over {self.stuck_timeout:g} s"

    def kill_all(self) -> None:
        for child in self.children:
            if child.process.is_alive():
                child.process.kill()
        for child in self.children:
            child.process.join(2.0)
