"""The learner's trainer thread (appo/learning/learner_process.py TrainerThread): it takes one batch at a time, in
order, and a stop ends it; a single learner's stop finishes the iteration under way and does not start the batch
waiting behind it, so its stop (and the final save after it) fits the learner's stop budget after a signal even where
an iteration takes seconds."""

from __future__ import annotations

import threading

import torch

from appo.learning.batcher import Batch
from appo.learning.learner import Learner
from appo.learning.learner_process import TrainerThread
from appo.protocol.messages import TrainReport
from appo.protocol.wiring import wire
from tests.unit.test_learner import fill, make_learner, small_cfg, take_batch, wait_for


def gated_trainer(learner: Learner, monkeypatch) -> tuple[TrainerThread, threading.Event, list[Batch]]:
    """A trainer thread whose every iteration waits for the returned gate; the batches it started, in order."""
    gate = threading.Event()
    trained: list[Batch] = []
    train = learner.train

    def gated_train(batch: Batch) -> TrainReport:
        trained.append(batch)
        gate.wait(timeout=30)
        return train(batch)

    monkeypatch.setattr(learner, "train", gated_train)
    return TrainerThread(learner), gate, trained


def first_batch(tmp_path) -> tuple[Learner, Batch]:
    torch.manual_seed(0)
    learner = make_learner(small_cfg(num_epochs=1), tmp_path)
    fill(learner, 0, 16, seed=6)
    return learner, take_batch(learner)


def test_the_trainer_thread_takes_one_batch_at_a_time_and_stops(tmp_path, monkeypatch):
    learner, first = first_batch(tmp_path)
    second, third = first._replace(), first._replace()  # distinct batches, same data
    queues = wire(1, 1, local=True)
    trainer, gate, trained = gated_trainer(learner, monkeypatch)
    trainer.hand_over(first, queues)
    wait_for(lambda: len(trained) == 1, "the trainer to start on the first batch")
    trainer.hand_over(second, queues)  # room: the trainer holds the first
    assert trainer.batches.qsize() == 1, f"{trainer.batches.qsize()} batches waiting"
    # The trainer is busy and one batch waits: the next hand-over has to wait until that one is taken.
    waiter = threading.Thread(target=trainer.hand_over, args=(third, queues), daemon=True)
    waiter.start()
    waiter.join(timeout=0.5)
    assert waiter.is_alive(), "hand_over returned while the queue of one batch was full"
    assert [id(b) for b in trained] == [id(first)], f"trained {len(trained)} batches while gated"
    gate.set()
    waiter.join(timeout=30)
    assert not waiter.is_alive(), "hand_over still waiting after the trainer took the second batch"

    trainer.stop(queues)
    assert not trainer.thread.is_alive(), "trainer thread alive after stop()"
    assert trainer.failure == [], f"failure {trainer.failure}"
    order = [{id(first): 1, id(second): 2, id(third): 3}.get(id(b)) for b in trained]
    assert order == [1, 2, 3], f"trained in order {order}"
    reports = queues.driver_queue.get_many()
    assert [type(r) for r in reports] == [TrainReport] * 3, f"driver got {reports}"
    assert [r.version for r in reports] == [1, 2, 3], f"versions {[r.version for r in reports]}"


def test_a_stop_finishes_the_iteration_under_way_and_drops_the_waiting_batch(tmp_path, monkeypatch):
    learner, first = first_batch(tmp_path)
    second = first._replace()
    queues = wire(1, 1, local=True)
    trainer, gate, trained = gated_trainer(learner, monkeypatch)
    trainer.hand_over(first, queues)
    wait_for(lambda: len(trained) == 1, "the trainer to start on the first batch")
    trainer.hand_over(second, queues)
    assert trainer.batches.qsize() == 1
    stopper = threading.Thread(target=trainer.stop, args=(queues, True), daemon=True)
    stopper.start()
    wait_for(lambda: list(trainer.batches.queue) == [None], "the stop to take the waiting batch's place")
    gate.set()
    stopper.join(timeout=30)
    assert not stopper.is_alive() and not trainer.thread.is_alive() and trainer.failure == []
    assert [id(b) for b in trained] == [id(first)], "the waiting batch was trained after the stop"
    assert [r.version for r in queues.driver_queue.get_many()] == [1]
