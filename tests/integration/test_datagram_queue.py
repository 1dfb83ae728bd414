"""The learner's and the driver's queues and the actor workers' inboxes must survive writers and readers killed
at any moment: real processes putting (or waiting to read) as fast as they can, SIGKILLed at random points,
again and again; afterwards every delivered message is whole and a new writer still gets through."""

from __future__ import annotations

import multiprocessing as mp
import queue
import random
import signal
import time

import pytest

from appo.protocol.datagram_queue import DatagramQueue
from appo.protocol.messages import SlotsReleased, TrajectoryReady


def writer(q: DatagramQueue, tag: int) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    i = 0
    while True:
        q.put(TrajectoryReady(tag, i, 0, 0, i, 8))
        q.put_many([TrajectoryReady(tag, i, 1, k, k, 8, (1, 3)) for k in range(50)])
        i += 1


def drain(q: DatagramQueue, into: list) -> None:
    while True:
        try:
            into.extend(q.get_many(timeout=0.01))
        except queue.Empty:
            return


def close(q: DatagramQueue, procs: list) -> None:
    """Kill what is still running (a failed assertion leaves no process behind), then close the queue."""
    for p in procs:
        if p.is_alive():
            p.kill()
            p.join(5)
    q.close()


# Each writer is killed a random 0.3-0.6 s after its first message arrives (not after its start: a spawned
# process takes from 0.3 s to several seconds to import on a loaded machine, and one killed before it writes
# tests nothing). 15 writers: about 12 s here; the 25 of before, timed from their start, took 17 s here and
# 77-166 s in fresh-clone CI runs.
ROUNDS = 15


@pytest.mark.timeout(480)
@pytest.mark.slow
def test_writers_killed_mid_put_never_wedge_the_queue():
    ctx = mp.get_context("spawn")
    q = DatagramQueue()
    rng = random.Random(0)
    got: list = []
    procs = []
    try:
        for round_ in range(ROUNDS):
            p = ctx.Process(target=writer, args=(q, round_), daemon=True)
            p.start()
            procs.append(p)
            started = time.monotonic()
            while not any(m.policy_id == round_ for m in got):
                assert time.monotonic() - started < 120, f"writer {round_} sent nothing in 120 s"
                try:
                    got.extend(q.get_many(timeout=0.01))
                except queue.Empty:
                    pass
            deadline = time.monotonic() + rng.uniform(0.3, 0.6)
            while time.monotonic() < deadline:  # read while it writes, so it is mid-put most of the time
                try:
                    got.extend(q.get_many(timeout=0.01))
                except queue.Empty:
                    pass
            p.kill()
            p.join(5)
            assert p.exitcode == -signal.SIGKILL
        drain(q, got)
        # A writer started after all those deaths gets through at once.
        p = ctx.Process(target=writer, args=(q, 999), daemon=True)
        p.start()
        procs.append(p)
        first = q.get_many(timeout=30)
        p.kill()
        p.join(5)
        drain(q, got)
    finally:
        close(q, procs)
    assert any(m.policy_id == 999 for m in first)
    assert {m.policy_id for m in got} >= set(range(ROUNDS)), "a killed writer got nothing through"
    assert all(type(m) is TrajectoryReady and m.num_envs == 8 for m in got)
    # Per writer, messages arrive in order and whole: a put_many's datagram is all there or not at all.
    by_writer: dict[int, list] = {}
    for m in got:
        by_writer.setdefault(m.policy_id, []).append(m)
    for msgs in by_writer.values():
        puts = [m.worker_idx for m in msgs if m.split_idx == 0]
        assert puts == sorted(puts)


def reader(q: DatagramQueue) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    while True:
        try:
            q.get_many(timeout=0.05)
        except queue.Empty:
            pass


def test_readers_killed_while_waiting_never_block_the_writer():
    """An actor worker's inbox: its reader is killed and replaced (a new incarnation reads the same queue) while
    the learner, which cannot be replaced, keeps putting. Every put must go through at once. (The same loop on a
    faster-fifo queue, the inboxes' kind before: the first put after the first reader's kill blocked for good.)"""
    ctx = mp.get_context("spawn")
    q = DatagramQueue()
    rng = random.Random(1)
    procs = []
    slowest = 0.0
    try:
        for round_ in range(15):
            p = ctx.Process(target=reader, args=(q,), daemon=True)
            p.start()
            procs.append(p)
            deadline = time.monotonic() + rng.uniform(0.05, 0.2)
            i = 0
            while time.monotonic() < deadline:  # the reader waits in get_many most of the time
                t0 = time.monotonic()
                q.put(SlotsReleased(round_, 0, i % 4, 0, round_), timeout=5.0)
                slowest = max(slowest, time.monotonic() - t0)
                i += 1
                time.sleep(0.002)
            p.kill()
            p.join(5)
            assert p.exitcode == -signal.SIGKILL
        # Whatever the dead readers left is there, whole, for the next one.
        q.put(SlotsReleased(99, 0, 0, 0, 99), timeout=5.0)
        left: list = []
        drain(q, left)
    finally:
        close(q, procs)
    assert slowest < 1.0, f"a put took {slowest:.2f} s"
    assert left and left[-1] == SlotsReleased(99, 0, 0, 0, 99) and all(type(m) is SlotsReleased for m in left)
