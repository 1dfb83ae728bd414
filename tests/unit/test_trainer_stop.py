"""The learner's trainer thread at the run's end (appo/learning/learner_process.py TrainerThread.stop): a single
learner finishes the iteration under way and does not start the batch waiting behind it, so its stop (and the final
save after it) fits the learner's stop budget after a signal even where an iteration takes seconds."""

from __future__ import annotations

import threading

import torch

from appo.learning.batcher import Batch
from appo.learning.learner_process import TrainerThread
from appo.protocol.messages import TrainReport
from appo.protocol.wiring import wire
from tests.unit.test_learner import fill, make_learner, small_cfg, take_batch, wait_for


def test_a_stop_finishes_the_iteration_under_way_and_drops_the_waiting_batch(tmp_path, monkeypatch):
    torch.manual_seed(0)
    learner = make_learner(small_cfg(num_epochs=1), tmp_path)
    fill(learner, 0, 16, seed=6)
    first = take_batch(learner)
    second = first._replace()
    queues = wire(1, 1, local=True)
    gate = threading.Event()
    trained: list[Batch] = []
    train = learner.train

    def gated_train(batch: Batch) -> TrainReport:
        trained.append(batch)
        gate.wait(timeout=30)
        return train(batch)

    monkeypatch.setattr(learner, "train", gated_train)
    trainer = TrainerThread(learner)
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
