"""Every message crosses a process boundary by pickle: each must round-trip, and each must have a route to
exactly the queue its reader takes it from (Stop, which the driver puts on every queue itself, has none)."""

from __future__ import annotations

import inspect
import pickle
from collections.abc import Callable
from typing import Any

import pytest

from appo.protocol import messages as m
from appo.protocol.wiring import route, wire

# Ids differ from each other (worker 2, policies 1 and 0) so that a route reading the wrong field lands on
# the wrong queue, or on none, instead of passing by coincidence. The queues come from wire(3, 2, local=True).
ROUTES: list[tuple[Any, Callable[[Any], Any]]] = [
    (m.InferenceRequest(1, 2, 1, 8, 4, 3), lambda q: q.policy_queues[1][0]),
    (m.ActionsReady(2, 1, 8, 3, 0, 1), lambda q: q.actor_inboxes[2]),
    (m.TrajectoryReady(1, 2, 0, 1, 16, 4), lambda q: q.learner_queues[1]),
    (m.SlotsReleased(2, 0, 1, 1), lambda q: q.actor_inboxes[2]),
    (
        m.EpisodeReport(1, 2, [1.5, -2.0], [10, 20], [{"returns": [1.5], "bucket": "v=+1.0"}], 0.5),
        lambda q: q.driver_queue,
    ),
    (m.TrainReport(1, 1000, 3, {"policy_loss": 0.1}), lambda q: q.driver_queue),
    (m.EvalRequest(1, 5000), lambda q: q.eval_queue),
    (m.EvalReport(1, 5000, 4, -3.0, 0.5, 100.0, [-2.0, -1.0], [-3.0, -3.5]), lambda q: q.driver_queue),
    (m.ReturnSummary(1, 12.5), lambda q: q.learner_queues[1]),
    (m.SetHyperparams(1, {"learning_rate": 1e-4}), lambda q: q.learner_queues[1]),
    # PBT step 1 goes to the better policy's (the source's) learner, step 2 to the target's.
    (m.CopyPolicy(1, 0, {"learning_rate": 1e-4}), lambda q: q.learner_queues[1]),
    (m.LoadPolicy(0, 1, "/tmp/snapshot.pth", {"learning_rate": 1e-4}), lambda q: q.learner_queues[0]),
    (m.HyperparamsReport(1, {"learning_rate": 3e-4}), lambda q: q.driver_queue),
    (m.ErrorReport("actor_worker_2", "Traceback ..."), lambda q: q.driver_queue),
]
# Stop: runner.shutdown puts it on each inbox and queue directly. ShardReady: learner rank 0 puts it on the inbox
# of each other rank of its policy (appo/learning/distributed.py RankLink), outside the run's wiring.
# HvpRequest / HvpReady: the MAML driver's own queues to and from its Hessian-vector-product helpers
# (appo/maml/hvp_pool.py HvpPool).
UNROUTED = [
    m.Stop("driver"),
    m.ShardReady(1, 2, 7, (16, 17, 18), 4096),
    m.HvpRequest(4, 2, (1, 3)),
    m.HvpReady(1, 2),
]
SAMPLES = [msg for msg, _ in ROUTES] + UNROUTED


def message_classes() -> set[type]:
    """Every message type appo/protocol/messages.py defines (its records, not the names it imports)."""
    return {cls for _, cls in inspect.getmembers(m, inspect.isclass) if cls.__module__ == m.__name__}


def _queues() -> Any:
    return wire(num_workers=3, num_policies=2, local=True)


def test_every_message_class_has_a_sample() -> None:
    # A new message in appo/protocol/messages.py fails here until it gets a sample, and with it a route (or is
    # unrouted).
    sampled = [type(msg) for msg in SAMPLES]
    assert len(sampled) == len(set(sampled)), "one sample per message type"
    assert set(sampled) == message_classes()


@pytest.mark.parametrize("msg", SAMPLES, ids=lambda x: type(x).__name__)
def test_pickle_round_trip(msg: Any) -> None:
    back = pickle.loads(pickle.dumps(msg))
    assert back == msg and type(back) is type(msg)


@pytest.mark.parametrize(("msg", "expected"), ROUTES, ids=[type(msg).__name__ for msg, _ in ROUTES])
def test_route_is_the_readers_queue(msg: Any, expected: Callable[[Any], Any]) -> None:
    queues = _queues()
    assert route(msg, queues) is expected(queues)


@pytest.mark.parametrize("msg", UNROUTED, ids=lambda x: type(x).__name__)
def test_unrouted_messages_have_no_route(msg: Any) -> None:
    with pytest.raises(TypeError, match="no route"):
        route(msg, _queues())


def test_actions_for_a_replaced_actor_incarnation_are_dropped() -> None:
    queues = _queues()
    queues.incarnations[2] = 1  # actor worker 2 was restarted: the sample's reply (incarnation 0) is stale
    assert route(m.ActionsReady(2, 1, 8, 3, 0, 1), queues) is None
