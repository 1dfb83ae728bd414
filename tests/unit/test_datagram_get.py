"""DatagramQueue.get hands out one message at a time: the other messages of a datagram that put_many packed are
kept for the next get or get_many, in order, never dropped (appo/protocol/datagram_queue.py)."""

from __future__ import annotations

import queue

import pytest

from appo.protocol.datagram_queue import DatagramQueue


def test_get_keeps_the_rest_of_a_packed_datagram():
    q = DatagramQueue()
    try:
        q.put_many(list(range(10)))  # small messages: one datagram
        q.put("last")
        got = [q.get(timeout=1.0) for _ in range(3)]
        got += q.get_many(timeout=1.0)  # the rest of the first datagram, handed out before reading more
        while len(got) < 11:
            got += q.get_many(timeout=1.0)
        assert got == [*range(10), "last"]
        with pytest.raises(queue.Empty):
            q.get(timeout=0.05)
    finally:
        q.close()


def test_get_many_respects_its_limit_over_kept_messages():
    q = DatagramQueue()
    try:
        q.put_many(["a", "b", "c", "d"])
        assert q.get(timeout=1.0) == "a"
        assert q.get_many(timeout=1.0, max_messages_to_get=2) == ["b", "c"]
        assert q.get(block=False) == "d"
    finally:
        q.close()
