"""The driver's view of its children: start every process, watch them, replace the ones that can be
replaced, and stop them all.

- An actor worker killed by a signal (OOM killer, segfault, kill -9) or silent for longer than
  `--worker_stuck_timeout` (its heartbeat stamp in shared memory) is killed if still there and started
  again with a new incarnation; the slot groups it was filling are reused, those with the learner come back
  by SlotsReleased, and replies meant for the old incarnation are ignored. Lost: its unfinished rollouts.
- A policy worker that dies stops the run (its queue is shared by every actor worker, and a reader killed
  while waiting can leave it blocking its writers); actors re-send requests left unanswered, which covers a
  policy worker that is merely slow.
- A child that raised (exit code > 0; it has sent an ErrorReport), a learner or an evaluator that died:
  the run stops with a non-zero status. Running the same command again resumes from the last checkpoint.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from appo.processes import start_process
from appo.wiring import INBOX_SPARES
from utils.logging import log


class Child:
    """One supervised process and how to start it again."""

    def __init__(self, kind: str, name: str, start: Callable[[int], Any], restartable: bool) -> None:
        self.kind, self.name, self.start, self.restartable = kind, name, start, restartable
        self.incarnation = 0
        self.process = start(0)

    def restart(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join(5.0)
        self.incarnation += 1
        self.process = self.start(self.incarnation)


class Supervisor:
    def __init__(self, ctx: Any, heartbeats: Any, incarnations: Any, stuck_timeout: float) -> None:
        self.ctx = ctx
        self.heartbeats = heartbeats  # shared float64 [num_workers] tensor, wall time of the last actor loop
        self.incarnations = incarnations  # shared int64 [num_workers]: which inbox each actor worker reads
        self.stuck_timeout = stuck_timeout
        self.children: list[Child] = []
        self.restarts = 0

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
        for index, child in enumerate(self.children):
            code = child.process.exitcode
            stuck = child.kind == "actors" and self._is_stuck(index, child, now)
            if code is None and not stuck:
                continue
            if child.restartable and (stuck or code < 0) and child.incarnation + 1 < INBOX_SPARES:
                why = f"silent for over {self.stuck_timeout:g} s" if stuck else f"killed by signal {-code}"
                log.warning("%s %s: starting it again (restart %d)", child.name, why, self.restarts + 1)
                worker_idx = self._worker_idx(child)
                self.heartbeats[worker_idx] = 0.0  # no verdict until the new one beats
                self.incarnations[worker_idx] = child.incarnation + 1  # writers switch to its fresh inbox
                child.restart()
                self.restarts += 1
            elif stuck or code < 0:
                failures.append(
                    f"{child.name} died ({'stuck' if stuck else f'signal {-code}'}) and is not restarted "
                    f"(restarted {child.incarnation} times already, at most {INBOX_SPARES - 1})"
                    if child.restartable
                    else f"{child.name} died (signal {-code})"
                )
            else:
                failures.append(f"{child.name} exited with code {code}")
        return failures

    def _worker_idx(self, child: Child) -> int:
        return int(child.name.rsplit("_", 1)[1])

    def _is_stuck(self, index: int, child: Child, now: float) -> bool:
        beat = float(self.heartbeats[self._worker_idx(child)])
        return beat > 0 and now - beat > self.stuck_timeout

    def kill_all(self) -> None:
        for child in self.children:
            if child.process.is_alive():
                child.process.kill()
        for child in self.children:
            child.process.join(2.0)
