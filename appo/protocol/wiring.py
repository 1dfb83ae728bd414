"""Every queue of a run, who writes to it and who reads from it: the one place that connects components.

    queue                     readers                         writers
    actor_inboxes[w]          actor worker w (every start)    policy workers (ActionsReady), learners
                                                              (SlotsReleased), driver (Stop)
    policy_queues[p][k]       policy workers of policy p,     actor workers (InferenceRequest), driver (Stop)
                              its k-th restart (mod spares)
    learner_queues[p]         learner of policy p             actor workers (TrajectoryReady), driver
                                                              (ReturnSummary, SetHyperparams, CopyPolicy,
                                                              Stop), learners (LoadPolicy)
    eval_queue                evaluator                       driver (EvalRequest, Stop)
    driver_queue              driver                          everyone (reports, errors)

`route` maps each message type to its queue, so components return messages and never hold queues.
The learner and the driver cannot be replaced, so the queues where they meet actor and policy workers (which
can be killed at any moment) are kernel datagram sockets (appo/protocol/datagram_queue.py), which no process can wedge
by dying: the learner queues, the driver queue and the actor workers' inboxes. The learner writes
SlotsReleased into the inboxes, and with faster-fifo inboxes a policy worker killed inside a put, or the actor
worker killed waiting in a get, left a mutex or condition variable that blocked the learner's next put for
good (the run stalled). A restarted actor worker reads the same inbox; stale messages are recognised by the
incarnation they carry. The policy workers' request queues (the hot path between actor and policy workers;
the driver only puts Stop there at the end) and the evaluator's queue (driver to evaluator, neither of them
replaceable) are faster-fifo; a policy worker stuck on its queue is found by its heartbeat and replaced, with
a fresh queue.
In --serial_mode the same wiring is built from LocalQueue, an in-process stand-in with the same calls.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any, NamedTuple

from appo.protocol.messages import (
    ActionsReady,
    CopyPolicy,
    EpisodeReport,
    ErrorReport,
    EvalReport,
    EvalRequest,
    HyperparamsReport,
    InferenceRequest,
    LoadPolicy,
    ReturnSummary,
    SetHyperparams,
    SlotsReleased,
    TrainReport,
    TrajectoryReady,
)

QUEUE_BYTES = 4 * 1024 * 1024
INBOX_BYTES = 256 * 1024  # socket buffer of an actor worker's inbox: a few ActionsReady / SlotsReleased per split
POLICY_QUEUE_BYTES = 1024 * 1024  # at most one InferenceRequest per split waits
# Restarted policy workers get a fresh request queue: a process killed while waiting on a process-shared
# condition variable can leave it so that the next writer blocks forever (glibc), so the old queue is
# abandoned. They can therefore be restarted at most SPARES - 1 times (actor workers: without limit).
POLICY_QUEUE_SPARES = 16


class LocalQueue:
    """The subset of faster_fifo.Queue that components use, for one process."""

    def __init__(self) -> None:
        self.items: deque[Any] = deque()

    def put(self, item: Any, block: bool = True, timeout: float = 0.0) -> None:
        self.items.append(item)

    def put_many(self, items: list[Any], block: bool = True, timeout: float = 0.0) -> None:
        self.items.extend(items)

    def get_many(self, block: bool = True, timeout: float = 0.0, max_messages_to_get: int = 1 << 30) -> list[Any]:
        out = []
        while self.items and len(out) < max_messages_to_get:
            out.append(self.items.popleft())
        return out

    def close(self) -> None:
        self.items.clear()


class Queues(NamedTuple):
    actor_inboxes: list[Any]  # [worker]
    incarnations: Any  # shared int64 [num_workers]: the current start of each actor worker
    policy_queues: list[list[Any]]  # [policy][restarts of its policy workers % POLICY_QUEUE_SPARES]
    policy_incarnations: Any  # shared int64 [num_policies]: which of those queues is current
    learner_queues: list[Any]
    eval_queue: Any
    driver_queue: Any


def queue_bytes(num_workers: int, num_policies: int) -> int:
    """Shared memory taken by the queues of `wire` (faster-fifo buffers live in /dev/shm; datagram sockets'
    in the kernel)."""
    return num_policies * POLICY_QUEUE_SPARES * POLICY_QUEUE_BYTES + QUEUE_BYTES


def wire(num_workers: int, num_policies: int, local: bool = False) -> Queues:
    """Create every queue of a run (faster-fifo across processes, LocalQueue in serial mode)."""
    import torch

    if local:

        def make(max_size_bytes: int = 0) -> Any:
            return LocalQueue()

        make_robust = make
    else:
        import faster_fifo

        from appo.protocol.datagram_queue import DatagramQueue

        def make(max_size_bytes: int = QUEUE_BYTES) -> Any:
            return faster_fifo.Queue(max_size_bytes=max_size_bytes)

        make_robust = DatagramQueue

    return Queues(
        actor_inboxes=[make_robust(INBOX_BYTES) for _ in range(num_workers)],
        incarnations=torch.zeros(num_workers, dtype=torch.int64).share_memory_(),
        policy_queues=[
            [make(POLICY_QUEUE_BYTES) for _ in range(1 if local else POLICY_QUEUE_SPARES)] for _ in range(num_policies)
        ],
        policy_incarnations=torch.zeros(num_policies, dtype=torch.int64).share_memory_(),
        learner_queues=[make_robust() for _ in range(num_policies)],
        eval_queue=make(),
        driver_queue=make_robust(),
    )


def _reply_inbox(msg: ActionsReady, queues: Queues) -> Any:
    """The asking actor worker's inbox; None (dropped) if that incarnation is gone (its successor would only
    drop the reply)."""
    if msg.incarnation != int(queues.incarnations[msg.worker_idx]):
        return None
    return queues.actor_inboxes[msg.worker_idx]


def _to_learner(msg: Any, queues: Queues) -> Any:
    return queues.learner_queues[msg.policy_id]


def _to_driver(msg: Any, queues: Queues) -> Any:
    return queues.driver_queue


# Message type -> the queue it travels on. Stop has no route: the driver puts it on each queue directly.
ROUTES: dict[type, Callable[[Any, Queues], Any]] = {
    InferenceRequest: lambda msg, queues: policy_queue(queues, msg.policy_id),
    ActionsReady: _reply_inbox,
    SlotsReleased: lambda msg, queues: actor_inbox(queues, msg.worker_idx),
    EvalRequest: lambda msg, queues: queues.eval_queue,
    **dict.fromkeys((TrajectoryReady, ReturnSummary, SetHyperparams, CopyPolicy, LoadPolicy), _to_learner),
    **dict.fromkeys((EpisodeReport, TrainReport, ErrorReport, EvalReport, HyperparamsReport), _to_driver),
}


def route(msg: Any, queues: Queues) -> Any:
    """The queue a message travels on (None: drop it, its reader is gone)."""
    where = ROUTES.get(type(msg))
    if where is None:
        raise TypeError(f"no route for message {msg!r}")
    return where(msg, queues)


def send(msgs: list[Any], queues: Queues) -> None:
    """Deliver messages, one put_many per destination queue."""
    if not msgs:
        return
    if len(msgs) == 1:
        queue = route(msgs[0], queues)
        if queue is not None:
            queue.put(msgs[0])
        return
    by_queue: dict[int, tuple[Any, list[Any]]] = {}
    for msg in msgs:
        queue = route(msg, queues)
        if queue is not None:
            by_queue.setdefault(id(queue), (queue, []))[1].append(msg)
    for queue, batch in by_queue.values():
        queue.put_many(batch)


def actor_inbox(queues: Queues, worker_idx: int) -> Any:
    """The inbox of actor worker `worker_idx` (the same for all its incarnations)."""
    return queues.actor_inboxes[worker_idx]


def policy_queue(queues: Queues, policy_id: int) -> Any:
    """The request queue that the current policy workers of `policy_id` read."""
    spares = queues.policy_queues[policy_id]
    return spares[int(queues.policy_incarnations[policy_id]) % len(spares)]


def close_all(queues: Queues) -> None:
    for queue in [
        *queues.actor_inboxes,
        *[q for spares in queues.policy_queues for q in spares],
        *queues.learner_queues,
        queues.eval_queue,
        queues.driver_queue,
    ]:
        queue.close()
