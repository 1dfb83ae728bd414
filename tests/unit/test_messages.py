"""Every message crosses a process boundary by pickle: each must round-trip, and each must have a route."""

from __future__ import annotations

import pickle

import pytest

from appo import messages as m
from appo.wiring import route, wire

SAMPLES = [
    m.InferenceRequest(0, 1, 1, 8, 4, 3),
    m.ActionsReady(1, 0, 8, 3, 0),
    m.TrajectoryReady(0, 1, 0, 2, 16, 4),
    m.SlotsReleased(1, 0, 2),
    m.EpisodeReport(0, 1, [1.5, -2.0], [10, 20]),
    m.TrainReport(0, 1000, 3, {"policy_loss": 0.1}),
    m.ReturnSummary(0, 12.5),
    m.ErrorReport("actor_worker_0", "Traceback ..."),
]


@pytest.mark.parametrize("msg", SAMPLES + [m.Stop("driver")], ids=lambda x: type(x).__name__)
def test_pickle_round_trip(msg):
    back = pickle.loads(pickle.dumps(msg))
    assert back == msg and type(back) is type(msg)


def test_every_message_has_a_route():
    queues = wire(num_workers=2, num_policies=1, local=True)
    assert route(SAMPLES[0], queues) is queues.policy_queues[0][0]
    assert route(SAMPLES[1], queues) is queues.actor_inboxes[1][0]
    assert route(SAMPLES[2], queues) is queues.learner_queues[0]
    assert route(SAMPLES[3], queues) is queues.actor_inboxes[1][0]
    for msg in SAMPLES[4:6] + SAMPLES[7:]:
        assert route(msg, queues) is queues.driver_queue
    assert route(SAMPLES[6], queues) is queues.learner_queues[0]
