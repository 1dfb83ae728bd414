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
net.core.wmem_max allows (4 MB requested, doubled by the kernel), else the system default.
"""

from __future__ import annotations

import pickle
import queue
import select
import socket
import time
from typing import Any

BUFFER_BYTES = 4 * 1024 * 1024
MAX_DATAGRAM = 60 * 1024  # put_many packs messages into datagrams of at most about this size
RECV_BYTES = 1 << 20
ONE, MANY = b"1", b"N"  # first byte of a datagram: one pickled message, or a pickled list of pickled messages


class DatagramQueue:
    def __init__(self, buffer_bytes: int = BUFFER_BYTES) -> None:
        self.reader, self.writer = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.writer.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, buffer_bytes)
        self.reader.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, buffer_bytes)

    # --- writing ----------------------------------------------------------------------------------------
    def put(self, item: Any, block: bool = True, timeout: float | None = None) -> None:
        self._send(ONE + pickle.dumps(item, pickle.HIGHEST_PROTOCOL), block, timeout)

    def put_many(self, items: list[Any], block: bool = True, timeout: float | None = None) -> None:
        """Every message is delivered or, after `timeout`, queue.Full is raised for the rest."""
        deadline = None if timeout is None else time.monotonic() + timeout
        chunk: list[bytes] = []
        size = 0
        for item in items:
            data = pickle.dumps(item, pickle.HIGHEST_PROTOCOL)
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
        if block and not _wait(self.reader, select.POLLIN, timeout):
            raise queue.Empty
        while len(out) < max_messages_to_get:
            try:
                data = self.reader.recv(RECV_BYTES, socket.MSG_DONTWAIT)
            except BlockingIOError:
                break
            out.extend(_unpack(data))
        if not out:
            raise queue.Empty
        return out

    def get(self, block: bool = True, timeout: float | None = None) -> Any:
        return self.get_many(block, timeout, max_messages_to_get=1)[0]

    def close(self) -> None:
        self.reader.close()
        self.writer.close()


def _pack(chunk: list[bytes]) -> bytes:
    return MANY + pickle.dumps(chunk, pickle.HIGHEST_PROTOCOL) if len(chunk) > 1 else ONE + chunk[0]


def _unpack(data: bytes) -> list[Any]:
    if data[:1] == ONE:
        return [pickle.loads(data[1:])]
    return [pickle.loads(p) for p in pickle.loads(data[1:])]


def _left(deadline: float | None) -> float | None:
    return None if deadline is None else deadline - time.monotonic()


def _wait(sock: socket.socket, event: int, timeout: float | None) -> bool:
    """Wait until `sock` is ready for `event` or `timeout` seconds pass (None: no limit)."""
    poller = select.poll()
    poller.register(sock, event)
    ms = None if timeout is None else max(int(timeout * 1000), 0)
    return bool(poller.poll(ms))
