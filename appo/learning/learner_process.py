"""The learner's process shell: the main thread receives messages and copies the next batch out of shared
memory while a background thread trains on the previous one (appo/learning/learner.py does the work)."""

from __future__ import annotations

import queue
import threading
from pathlib import Path
from typing import Any

import gymnasium as gym
import torch

from appo.cfg import Cfg, Derived
from appo.learning.batcher import Batch
from appo.learning.learner import Learner
from appo.learning.param_sync import ParamStore
from appo.messages import Stop
from appo.processes import component_main
from appo.wiring import Queues, send
from utils.logging import log


class TrainerThread:
    """Trains on the batches the receiving thread hands over (one waits at most), carries out PBT requests
    between iterations, and leaves every message to send in `outbox`; a failure is kept for the main thread."""

    def __init__(self, learner: Learner) -> None:
        self.learner = learner
        self.batches: queue.Queue[Batch | None] = queue.Queue(maxsize=1)
        self.outbox: queue.Queue[list[Any]] = queue.Queue()
        self.failure: list[BaseException] = []
        self.thread = threading.Thread(target=self._run, name="trainer", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        learner = self.learner
        try:
            while True:
                try:
                    batch = self.batches.get(timeout=0.1)
                except queue.Empty:
                    batch = False  # no batch yet: still carry out PBT requests
                if batch is None:
                    return
                if learner.pbt_ops:
                    self.outbox.put(learner.apply_pbt())
                if batch is False:
                    continue
                report = learner.train(batch)
                learner.maybe_save()
                # Sync mode: slots go back only now, so that every new sample is taken with new weights.
                if not learner.cfg.async_rl:
                    learner.batcher.mark_released(batch.releases)
                self.outbox.put([report] + ([] if learner.cfg.async_rl else batch.releases))
        except BaseException as exc:  # surfaced in the main thread, which reports and exits
            self.failure.append(exc)
            self.outbox.put([])

    def hand_over(self, batch: Batch, queues: Queues) -> None:
        """Give the trainer `batch`, sending its messages while waiting for room."""
        while self.thread.is_alive():
            try:
                self.batches.put(batch, timeout=0.05)
                return
            except queue.Full:
                self.drain(queues)

    def drain(self, queues: Queues) -> None:
        while True:
            try:
                send(self.outbox.get_nowait(), queues)
            except queue.Empty:
                return

    def stop(self, queues: Queues) -> None:
        while self.thread.is_alive():  # a dead trainer would never make room for the None
            try:
                self.batches.put(None, timeout=0.1)
                break
            except queue.Full:
                continue
        self.thread.join(timeout=60)
        self.drain(queues)


def learner_loop(learner: Learner, queues: Queues) -> None:
    """Main thread: receive messages, copy batches; trainer thread: train on them."""
    inbox = queues.learner_queues[learner.policy_id]
    send([learner.hparams_report()], queues)
    trainer = TrainerThread(learner)
    stopping = False
    try:
        while not stopping:
            try:
                msgs = inbox.get_many(timeout=0.1)
            except Exception:  # queue.Empty on timeout
                msgs = []
            for msg in msgs:
                if type(msg) is Stop:
                    stopping = True
                else:
                    learner.handle(msg)
            while not stopping and trainer.thread.is_alive() and (batch := learner.next_batch()) is not None:
                if learner.cfg.async_rl:
                    learner.batcher.mark_released(batch.releases)
                    send(batch.releases, queues)
                trainer.hand_over(batch, queues)
            trainer.drain(queues)
            if trainer.failure:
                raise trainer.failure[0]
    finally:
        trainer.stop(queues)
    if trainer.failure:
        raise trainer.failure[0]
    learner.save()


def run_learner(
    cfg: Cfg,
    derived: Derived,
    policy_id: int,
    buffers: dict[str, torch.Tensor],
    params: ParamStore,
    spaces: tuple[gym.Space, gym.Space],
    ckpt_dir: Path,
    device: str,
    control: dict[str, torch.Tensor],
    queues: Queues,
) -> None:
    """Process entry point of the learner of policy `policy_id`."""

    def body() -> None:
        torch.manual_seed(cfg.seed + policy_id)
        learner = Learner(cfg, derived, policy_id, buffers, params, spaces, ckpt_dir, device, control)
        learner.init()
        try:
            learner_loop(learner, queues)
        finally:
            log.info("learner %d profile: %s", policy_id, learner.timing.profile())

    component_main(cfg, f"learner_{policy_id}", queues, body)
