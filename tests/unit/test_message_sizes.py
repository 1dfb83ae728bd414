"""Messages of any size arrive, and a datagram nobody can read is counted, not taken for an empty queue: the driver's
queue with the send buffer a stock host gives (net.core.wmem_max 212,992: 425,984 bytes once doubled), a message
several times that size from another process, a garbage datagram between good ones, a message whose writer died
between two fragments; and what a task env's report carries of a trial is its bucket label, a few bytes."""

from __future__ import annotations

import multiprocessing as mp
import pickle
import queue

import numpy as np
import pytest

from appo.config.cfg import parse_cfg
from appo.envs import make_run_env
from appo.protocol import datagram_queue as dq
from appo.protocol.datagram_queue import DatagramQueue
from appo.protocol.messages import EpisodeReport
from appo.sampling.actor_worker import trial_summary

STOCK = 212_992  # net.core.wmem_max on a host nobody tuned


def big_report(tag: int) -> EpisodeReport:
    """A report the size a 16-worker tabular MDP run once sent: 100 trials, each with its own 20-state task."""
    rng = np.random.default_rng(tag)
    keys = [f"r_{s}_{a}" for s in range(20) for a in range(5)]
    keys += [f"p_{s}_{a}_{t}" for s in range(20) for a in range(5) for t in range(20)]
    trials = [
        {"returns": [1.0, 2.0], "task": dict(zip(keys, rng.random(len(keys)).tolist(), strict=True))}
        for _ in range(100)
    ]
    return EpisodeReport(0, tag, [1.0] * 100, [10] * 100, trials)


def put_big(q: DatagramQueue) -> None:
    q.put(big_report(1))
    q.put_many([big_report(2), EpisodeReport(0, 3, [], [], [])])


def receive(q: DatagramQueue, n: int, timeout: float = 30.0) -> list:
    got: list = []
    while len(got) < n:
        got += q.get_many(timeout=timeout)
    return got


def test_messages_larger_than_a_stock_socket_buffer_arrive_whole() -> None:
    q = DatagramQueue(buffer_bytes=STOCK)
    assert len(pickle.dumps(big_report(1))) > 2 * STOCK * 4
    writer = mp.get_context("spawn").Process(target=put_big, args=(q,), daemon=True)
    writer.start()
    try:
        got = receive(q, 3)
        assert [m.worker_idx for m in got] == [1, 2, 3]
        assert got[0] == big_report(1) and got[1] == big_report(2)
        assert q.unreadable == 0
    finally:
        writer.join(10)
        writer.kill()
        q.close()


def test_an_unreadable_datagram_is_counted_and_the_rest_arrive() -> None:
    q = DatagramQueue(buffer_bytes=STOCK)
    try:
        q.put(EpisodeReport(0, 1, [], [], []))
        q.writer.send(dq.ONE + b"not a pickle")
        q.writer.send(b"?unknown kind")
        q.put(EpisodeReport(0, 2, [], [], []))
        assert [m.worker_idx for m in receive(q, 2)] == [1, 2]
        assert q.unreadable == 2
    finally:
        q.close()


def test_a_message_cut_off_between_fragments_is_dropped_and_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dq, "FRAGMENT_SECONDS", 0.0)
    q = DatagramQueue(buffer_bytes=STOCK)
    try:
        q.writer.send(dq.FRAGMENT + dq.FRAGMENT_HEADER.pack(b"x" * 16, 0, 3) + b"the first of three")
        with pytest.raises(queue.Empty):
            q.get_many(timeout=0.1)
        q.put(EpisodeReport(0, 7, [], [], []))
        assert [m.worker_idx for m in receive(q, 1)] == [7]
        assert q.unreadable == 1 and not q.partial
    finally:
        q.close()


def test_a_trial_reports_its_bucket_not_its_task() -> None:
    cfg = parse_cfg(["--env=tabular_mdp", "--mdp_states=20", "--task_schedule=per_trial", "--num_train_tasks=5"])
    env = make_run_env(cfg)
    try:
        env.reset(seed=0)
        info: dict = {}
        while "trial" not in info:
            info = env.step(env.action_space.sample())[4]
    finally:
        env.close()
    summary = trial_summary(info["trial"])
    assert summary["returns"] == [float(r) for r in info["trial"]["returns"]]
    assert summary["bucket"].startswith("mean_of_")
    size = len(pickle.dumps(summary))
    assert size < 200, size
    assert len(pickle.dumps(info["trial"])) > 20 * size  # what a report carried per trial before
    assert np.isfinite(sum(summary["returns"]))
