"""A many-writer queue that no process can wedge by dying: one Unix datagram socket pair, held by the kernel.

faster-fifo keeps its queue state behind a process-shared pthread mutex and condition variables in shared
memory. A process SIGKILLed inside a put (mutex held) or while waiting (a condition variable's group
reference never returned, glibc) can leave that queue blocking everyone else for good; this was seen here
(benchmarks/soak.py). Queues whose reader cannot be replaced - the learner's and the driver's, written
by actor workers that may be killed at any moment - use this class instead: every put is one datagram,
which the kernel delivers whole or not at all, and there is no lock in user space to leave behind.

Same calls as the faster-fifo queue the components use (put, put_many, get_many, close; queue.Empty and
queue.Full). Flags are given per call (MSG_DONTWAIT), never set on the socket, because every process
shares the socket's file status flags. A socketpair's ends are each other's peer, so the kernel's limit on
queued datagrams (net.unix.max_dgram_qlen) does not apply; the send buffer does: about 8 MB where
net.core.wmem_max allows (4 MB requested, doubled by the kernel), else twice the system's limit (425,984 bytes
where net.core.wmem_max is the stock 212,992).

No datagram is larger than about MAX_DATAGRAM, whatever the message: a larger message goes as numbered fragments
that the reader joins again (a writer killed between two fragments leaves an incomplete message, dropped after
FRAGMENT_SECONDS and counted). A datagram the reader cannot read is logged and counted in `unreadable`, and the
rest of the read goes on: it is never taken for an empty queue.
"""

from __future__ import annotations

import collections
import os
import pickle
import queue
import select
import socket
import struct
import time
from typing import Any

from appo.utils.logging import log

# The socket buffer asked for (the kernel caps it at net.core.wmem_max and doubles it); APPO_QUEUE_BUFFER_BYTES
# sets another, e.g. a stock host's 212,992 to see a run work within it.
BUFFER_BYTES = int(os.environ.get("APPO_QUEUE_BUFFER_BYTES", 4 * 1024 * 1024))
MAX_DATAGRAM = 60 * 1024  # put_many packs messages into datagrams of at most about this size
RECV_BYTES = 1 << 20
# First byte of a datagram: one pickled message, a pickled list of pickled messages, or a fragment of one message
# (then a header: the message's random id, this fragment's index, the number of fragments).
ONE, MANY, FRAGMENT = b"1", b"N", b"F"
FRAGMENT_HEADER = struct.Struct("<16sII")
FRAGMENT_SECONDS = 60.0  # an incomplete message older than this (its writer died mid-message) is dropped


class DatagramQueue:
    def __init__(self, buffer_bytes: int = BUFFER_BYTES) -> None:
        self.reader, self.writer = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.writer.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, buffer_bytes)
        self.reader.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, buffer_bytes)
        self.unreadable = 0  # datagrams (or incomplete messages) the reader dropped
        self.partial: dict[bytes, tuple[float, dict[int, bytes], int]] = {}  # id -> (first seen, parts, count)
        # Messages read but not yet handed out: `get` takes one message from a datagram that may pack several.
        self.pending: collections.deque[Any] = collections.deque()

    # --- writing ----------------------------------------------------------------------------------------
    def put(self, item: Any, block: bool = True, timeout: float | None = None) -> None:
        self._send_message(pickle.dumps(item, pickle.HIGHEST_PROTOCOL), block, timeout)

    def _send_message(self, data: bytes, block: bool, timeout: float | None) -> None:
        """One pickled message: one datagram, or numbered fragments when it is larger than MAX_DATAGRAM."""
        if len(data) < MAX_DATAGRAM:
            self._send(ONE + data, block, timeout)
            return
        deadline = None if timeout is None else time.monotonic() + timeout
        message_id, count = os.urandom(16), -(-len(data) // MAX_DATAGRAM)
        for i in range(count):
            part = data[i * MAX_DATAGRAM : (i + 1) * MAX_DATAGRAM]
            self._send(FRAGMENT + FRAGMENT_HEADER.pack(message_id, i, count) + part, block, _left(deadline))

    def put_many(self, items: list[Any], block: bool = True, timeout: float | None = None) -> None:
        """Every message is delivered or, after `timeout`, queue.Full is raised for the rest."""
        deadline = None if timeout is None else time.monotonic() + timeout
        chunk: list[bytes] = []
        size = 0
        for item in items:
            data = pickle.dumps(item, pickle.HIGHEST_PROTOCOL)
            if len(data) >= MAX_DATAGRAM:  # alone, in fragments, after what came before it
                if chunk:
                    self._send(_pack(chunk), block, _left(deadline))
                    chunk, size = [], 0
                self._send_message(data, block, _left(deadline))
                continue
            if chunk and size + len(data) > MAX_DATAGRAM:
                self._send(_pack(chunk), block, _left(deadline))
                chunk, size = [], 0
            chunk.append(data)
            size += len(data)
        if chunk:
            self._send(_pack(chunk), block, _left(deadline))

    def _send(self, data: bytes, block: bool, timeout: float | None) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            try:
                self.writer.send(data, socket.MSG_DONTWAIT)
                return
            except BlockingIOError:
                left = _left(deadline)
                if not block or (left is not None and left <= 0):
                    raise queue.Full from None
                _wait(self.writer, select.POLLOUT, left)

    # --- reading ----------------------------------------------------------------------------------------
    def get_many(
        self, block: bool = True, timeout: float | None = None, max_messages_to_get: int = 1 << 30
    ) -> list[Any]:
        """Whatever is queued (at least one message, waiting up to `timeout` when `block`); queue.Empty if none.
        A datagram's messages are never split, so up to one datagram more than `max_messages_to_get` may come."""
        out: list[Any] = []
        while self.pending and len(out) < max_messages_to_get:
            out.append(self.pending.popleft())
        if out:
            return out
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if block and not _wait(self.reader, select.POLLIN, _left(deadline)):
                raise queue.Empty
            self._read(out, max_messages_to_get)
            if self.partial:
                self._drop_stale(time.monotonic())
            if out:
                return out
            left = _left(deadline)
            if not block or (left is not None and left <= 0):  # only fragments (or unreadable datagrams) came
                raise queue.Empty

    def _read(self, out: list[Any], max_messages: int) -> None:
        """Every datagram queued now (up to `max_messages` messages), unpacked into `out`."""
        while len(out) < max_messages:
            try:
                data = self.reader.recv(RECV_BYTES, socket.MSG_DONTWAIT)
            except BlockingIOError:
                return
            try:
                out.extend(self._unpack(data))
            except Exception as exc:  # a datagram nobody can read: counted and logged, the rest still read
                self.unreadable += 1
                log.warning(
                    "queue: dropped an unreadable datagram of %d bytes (%s: %s)", len(data), type(exc).__name__, exc
                )

    def _unpack(self, data: bytes) -> list[Any]:
        kind = data[:1]
        if kind == ONE:
            return [pickle.loads(data[1:])]
        if kind == MANY:
            return [pickle.loads(p) for p in pickle.loads(data[1:])]
        if kind != FRAGMENT:
            raise ValueError(f"unknown datagram kind {kind!r}")
        message_id, index, count = FRAGMENT_HEADER.unpack_from(data, 1)
        now = time.monotonic()
        _, parts, _ = self.partial.setdefault(message_id, (now, {}, count))
        parts[index] = data[1 + FRAGMENT_HEADER.size :]
        if len(parts) < count:
            return []
        del self.partial[message_id]
        return [pickle.loads(b"".join(parts[i] for i in range(count)))]

    def _drop_stale(self, now: float) -> None:
        for message_id in [m for m, (first, _, _) in self.partial.items() if now - first > FRAGMENT_SECONDS]:
            del self.partial[message_id]
            self.unreadable += 1
            log.warning("queue: dropped a message whose fragments stopped coming (its writer died?)")

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        """One message; the others of its datagram wait in `pending` for the next get or get_many."""
        first, *rest = self.get_many(block, timeout, max_messages_to_get=1)
        self.pending.extend(rest)
        return first

    def close(self) -> None:
        self.reader.close()
        self.writer.close()


def _pack(chunk: list[bytes]) -> bytes:
    return MANY + pickle.dumps(chunk, pickle.HIGHEST_PROTOCOL) if len(chunk) > 1 else ONE + chunk[0]


def _left(deadline: float | None) -> float | None:
    return None if deadline is None else deadline - time.monotonic()


def _wait(sock: socket.socket, event: int, timeout: float | None) -> bool:
    """Wait until `sock` is ready for `event` or `timeout` seconds pass (None: no limit)."""
    poller = select.poll()
    poller.register(sock, event)
    ms = None if timeout is None else max(int(timeout * 1000), 0)
    return bool(poller.poll(ms))
