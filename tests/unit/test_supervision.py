"""Supervisor restart decisions with real (tiny) spawned processes: an actor worker killed by a signal or silent
past the heartbeat timeout is started again with the next incarnation (on the same inbox, as often as it
dies), a policy worker on a fresh request queue, one that raised or a dead learner stops the run, and policy
workers' restarts end when the spare queues do."""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from appo.backends.supervision import Child, Supervisor
from appo.protocol.processes import spawn_context
from appo.protocol.wiring import POLICY_QUEUE_SPARES
from tests.conftest import live_children

# --- targets of the spawned children (module level: spawn pickles them by name) --------------------------------


def sleep_forever(incarnation: int, out_dir: str) -> None:
    """A healthy child that never beats (kinds without heartbeats, or one that has not looped yet)."""
    Path(out_dir, f"started_{incarnation}").write_text(str(os.getpid()))
    time.sleep(60)


def killed_first(incarnation: int, out_dir: str) -> None:
    """Killed by a signal (as by the OOM killer) in its first incarnation; healthy afterwards."""
    if incarnation == 0:
        os.kill(os.getpid(), signal.SIGKILL)
    sleep_forever(incarnation, out_dir)


def always_killed(incarnation: int, out_dir: str, *heartbeat: Any) -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def exits_one(incarnation: int, out_dir: str) -> None:
    """What component_main does after a raise: ErrorReport, then exit 1."""
    sys.exit(1)


def beat_once_then_hang(incarnation: int, out_dir: str, heartbeats: torch.Tensor, index: int) -> None:
    heartbeats[index] = time.time()
    sleep_forever(incarnation, out_dir)


def beat_forever(incarnation: int, out_dir: str, heartbeats: torch.Tensor, index: int) -> None:
    Path(out_dir, f"started_{incarnation}").write_text(str(os.getpid()))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        heartbeats[index] = time.time()
        time.sleep(0.05)


# --- helpers ---------------------------------------------------------------------------------------------------

Target = Callable[..., None]


def wait_until(condition: Callable[[], bool], timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


@dataclass
class Harness:
    sup: Supervisor
    queues: SimpleNamespace  # incarnations [num_workers], policy_incarnations [num_policies]: what Supervisor reads
    beats: dict[str, torch.Tensor]
    out: Path

    def add_actor(self, w: int, target: Target, beats: bool = False) -> None:
        name = f"actor_worker_{w}"
        table = self.beats["actors"] if beats else None
        self.sup.add("actors", name, target, self._args(name, table, w), restartable=True)

    def add_policy_worker(self, p: int, i: int, target: Target) -> None:
        name = f"policy_worker_{p}_{i}"
        index = p * self.sup.workers_per_policy + i
        self.sup.add("policy_workers", name, target, self._args(name, self.beats["policy_workers"], index), True)

    def add_learner(self, p: int, target: Target) -> None:
        name = f"learner_{p}"
        self.sup.add("learners", name, target, self._args(name, None, p))  # not restartable, as in spawn_all

    def _args(self, name: str, table: torch.Tensor | None, index: int) -> Callable[[int], tuple]:
        out_dir = self.out / name
        out_dir.mkdir()
        if table is not None:
            return lambda inc: (inc, str(out_dir), table, index)
        return lambda inc: (inc, str(out_dir))

    def child(self, name: str) -> Child:
        return next(c for c in self.sup.children if c.name == name)

    def exited(self, name: str) -> bool:
        return self.child(name).process.exitcode is not None

    def pid_of(self, name: str, incarnation: int, timeout: float = 20.0) -> int:
        """The pid that incarnation `incarnation` of child `name` wrote once it ran."""
        path = self.out / name / f"started_{incarnation}"
        assert wait_until(lambda: path.exists() and path.read_text() != "", timeout), f"{name}/{path.name} never ran"
        return int(path.read_text())


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[Harness]:
    beats = {
        "actors": torch.zeros(2, dtype=torch.float64).share_memory_(),
        "policy_workers": torch.zeros(4, dtype=torch.float64).share_memory_(),
    }
    queues = SimpleNamespace(
        incarnations=torch.zeros(2, dtype=torch.int64), policy_incarnations=torch.zeros(2, dtype=torch.int64)
    )
    sup = Supervisor(spawn_context(), beats, queues, stuck_timeout=1.0, workers_per_policy=2)
    h = Harness(sup=sup, queues=queues, beats=beats, out=tmp_path)
    try:
        yield h
    finally:
        sup.kill_all()
        for child in sup.children:
            child.process.join(5.0)
        left = [f"{c.pid} {' '.join(c.cmdline())[:60]}" for c in live_children()]
        assert not left, f"children left after kill_all: {left}"


# --- tests -----------------------------------------------------------------------------------------------------


@pytest.mark.timeout(60)
def test_actor_killed_by_signal_restarts_with_next_incarnation(harness: Harness):
    h = harness
    h.add_actor(0, killed_first)
    h.add_actor(1, sleep_forever)
    first = h.child("actor_worker_0").process
    assert wait_until(lambda: h.exited("actor_worker_0")), "actor_worker_0 did not die"
    assert first.exitcode == -signal.SIGKILL, f"exit code {first.exitcode}"

    failures = h.sup.check()
    assert failures == [], f"a killed actor worker must be restarted, not fail the run: {failures}"
    assert h.sup.restarts == 1, f"restarts {h.sup.restarts}"
    child = h.child("actor_worker_0")
    assert child.incarnation == 1 and child.process is not first, (child.incarnation, child.process)
    assert h.queues.incarnations.tolist() == [1, 0], f"queue incarnations {h.queues.incarnations.tolist()}"
    new_pid = h.pid_of("actor_worker_0", 1)  # the new process got incarnation 1 in its arguments
    assert new_pid == child.process.pid and child.process.is_alive(), (new_pid, child.process.pid)
    failures = h.sup.check()
    assert failures == [] and h.sup.restarts == 1, f"a healthy restart is left alone: {failures}, {h.sup.restarts}"
    assert h.child("actor_worker_1").incarnation == 0, "the other actor worker was restarted"


@pytest.mark.timeout(60)
def test_silent_actor_is_replaced_and_beating_one_is_not(harness: Harness):
    h = harness
    h.add_actor(0, beat_once_then_hang, beats=True)
    h.add_actor(1, beat_forever, beats=True)
    hung = h.child("actor_worker_0").process
    beating = h.child("actor_worker_1").process
    assert wait_until(lambda: bool((h.beats["actors"] > 0).all()), 20.0), f"no first beats: {h.beats['actors']}"

    time.sleep(h.sup.stuck_timeout + 0.5)  # the silent one is now over the timeout, the other beat since
    assert hung.is_alive(), "the silent actor worker should hang, not be dead"
    beat_age = time.time() - float(h.beats["actors"][0])
    assert beat_age > h.sup.stuck_timeout, f"heartbeat age {beat_age:.2f} s"
    failures = h.sup.check()
    assert failures == [], f"a silent actor worker must be replaced, not fail the run: {failures}"
    assert h.sup.restarts == 1, f"restarts {h.sup.restarts}: only the silent one goes"
    assert wait_until(lambda: not hung.is_alive(), 5.0), "the silent actor worker was not killed"
    child = h.child("actor_worker_0")
    assert child.process is not hung and child.incarnation == 1, (child.process, child.incarnation)
    assert h.queues.incarnations.tolist() == [1, 0], f"queue incarnations {h.queues.incarnations.tolist()}"
    assert h.pid_of("actor_worker_0", 1) == child.process.pid, "incarnation 1 did not run"
    assert h.child("actor_worker_1").process is beating and beating.is_alive(), "the beating actor was replaced"


@pytest.mark.timeout(60)
def test_silent_policy_worker_moves_its_policy_to_a_fresh_queue(harness: Harness):
    h = harness
    h.add_policy_worker(1, 1, beat_once_then_hang)  # heartbeat index 1 * workers_per_policy + 1 = 3
    first = h.child("policy_worker_1_1").process
    assert wait_until(lambda: float(h.beats["policy_workers"][3]) > 0, 20.0), h.beats["policy_workers"].tolist()
    assert h.beats["policy_workers"][:3].tolist() == [0.0, 0.0, 0.0], h.beats["policy_workers"].tolist()
    time.sleep(h.sup.stuck_timeout + 0.3)
    failures = h.sup.check()
    assert failures == [] and h.sup.restarts == 1, f"failures {failures}, restarts {h.sup.restarts}"
    assert h.queues.policy_incarnations.tolist() == [0, 1], f"{h.queues.policy_incarnations.tolist()}"
    assert h.queues.incarnations.tolist() == [0, 0], f"actor queues touched: {h.queues.incarnations.tolist()}"
    child = h.child("policy_worker_1_1")
    assert child.process is not first and child.incarnation == 1, (child.process, child.incarnation)


@pytest.mark.timeout(60)
def test_dead_learner_is_reported_not_restarted(harness: Harness):
    h = harness
    h.add_learner(0, always_killed)
    h.add_learner(1, exits_one)
    learners = [c.process for c in h.sup.children]
    assert wait_until(lambda: all(p.exitcode is not None for p in learners)), [p.exitcode for p in learners]
    for _ in range(2):  # and again on the next check: still reported, still not restarted
        failures = h.sup.check()
        assert failures == ["learner_0 died (signal 9)", "learner_1 exited with code 1"], failures
    assert h.sup.restarts == 0, f"restarts {h.sup.restarts}"
    assert [c.process for c in h.sup.children] == learners, "a learner was started again"
    assert [c.incarnation for c in h.sup.children] == [0, 0], [c.incarnation for c in h.sup.children]
    assert h.queues.incarnations.tolist() == [0, 0] and h.queues.policy_incarnations.tolist() == [0, 0]


@pytest.mark.timeout(60)
def test_actor_that_raised_stops_the_run(harness: Harness):
    h = harness
    h.add_actor(0, exits_one)
    proc = h.child("actor_worker_0").process
    assert wait_until(lambda: proc.exitcode is not None), "actor_worker_0 did not exit"
    failures = h.sup.check()
    assert failures == ["actor_worker_0 exited with code 1"], failures
    assert h.sup.restarts == 0 and h.child("actor_worker_0").process is proc, f"restarts {h.sup.restarts}"
    assert h.queues.incarnations.tolist() == [0, 0], h.queues.incarnations.tolist()


@pytest.mark.timeout(60)
def test_policy_worker_restarts_end_with_the_spare_queues_actor_restarts_do_not(harness: Harness):
    h = harness
    h.queues.policy_incarnations[0] = POLICY_QUEUE_SPARES - 2  # room for one more restart of policy 0's workers
    h.queues.incarnations[0] = 1000  # an actor worker's inbox cannot be wedged: no limit
    h.add_policy_worker(0, 0, always_killed)
    h.add_actor(0, always_killed)
    h.add_actor(1, killed_first)
    dead = ("policy_worker_0_0", "actor_worker_0", "actor_worker_1")
    assert wait_until(lambda: all(h.exited(name) for name in dead)), "children did not die"
    failures = h.sup.check()
    assert failures == [] and h.sup.restarts == 3, f"failures {failures}, restarts {h.sup.restarts}"
    assert h.queues.incarnations.tolist() == [1001, 1], h.queues.incarnations.tolist()
    assert h.queues.policy_incarnations.tolist() == [POLICY_QUEUE_SPARES - 1, 0], h.queues.policy_incarnations

    assert wait_until(lambda: h.exited("policy_worker_0_0") and h.exited("actor_worker_0")), "second starts live"
    failures = h.sup.check()
    assert failures == [
        "policy_worker_0_0 died (signal 9) and is not restarted (its queue was replaced too often already)"
    ], failures
    assert h.sup.restarts == 4, f"restarts {h.sup.restarts}: the actor again, the policy worker no more"
    assert h.queues.incarnations.tolist() == [1002, 1], h.queues.incarnations.tolist()
    assert h.queues.policy_incarnations.tolist() == [POLICY_QUEUE_SPARES - 1, 0], h.queues.policy_incarnations
    assert h.pid_of("actor_worker_1", 1) == h.child("actor_worker_1").process.pid, "actor_worker_1's restart"
    assert h.child("actor_worker_1").process.is_alive(), "actor_worker_1's restart should still run"
