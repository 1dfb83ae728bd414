"""--serial_mode: `SerialBackend` drives the same ActorWorker, PolicyWorker, Learner and Evaluator objects as
the multi-process run, round-robin in the driver process over in-process queues (appo/protocol/wiring.py LocalQueue).
Deterministic for a given seed, and every component can be stepped through in a debugger."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from appo.backends.plan import plan
from appo.config.cfg import Cfg
from appo.config.derive import Derived
from appo.learning.learner import Learner
from appo.learning.snapshot_pool import attach_snapshots
from appo.models.registry import make_model
from appo.protocol.messages import Stop
from appo.protocol.param_sync import ParamStore
from appo.protocol.processes import limit_threads
from appo.protocol.wiring import actor_inbox, policy_queue, send, wire
from appo.sampling.actor_worker import ActorWorker
from appo.sampling.evaluator import Evaluator
from appo.sampling.policy_worker import make_policy_workers
from appo.utils.paths import checkpoint_dir


class SerialBackend:
    """Every component as a plain object in this process; `poll` runs one round of all of them."""

    uses_watchdog = False  # a person stepping through a debugger must not be killed
    restarts = 0

    def __init__(
        self,
        cfg: Cfg,
        derived: Derived,
        exp_dir: Path,
        spaces: tuple[Any, Any],
        device: str,
        buffers: dict[str, torch.Tensor],
        control: dict[str, torch.Tensor],
    ) -> None:
        if cfg.learner_world_size > 1:  # appo.config.verify refuses it before a run starts; this is for direct callers
            raise ValueError(f"--learner_world_size={cfg.learner_world_size}: --serial_mode runs one learner; use 1")
        self._limits = limit_threads(1)
        self.topology = plan(cfg)
        self.queues = wire(cfg.num_workers, cfg.num_policies, local=True)
        self.params = [ParamStore(make_model(cfg, *spaces)) for _ in range(cfg.num_policies)]
        weight_sets = self.params + attach_snapshots(cfg, self.params, make_model(cfg, *spaces))
        self.learners = [
            Learner(cfg, derived, p, buffers, self.params[p], spaces, checkpoint_dir(exp_dir, p), device, control)
            for p in self.topology.learners
        ]
        self.policy_workers = make_policy_workers(cfg, derived, buffers, weight_sets, spaces, device, control)
        self.actors = [ActorWorker(cfg, derived, w, buffers, control) for w in self.topology.actors]
        self.evaluator = Evaluator(cfg, spaces, self.params) if self.topology.evaluation_interval > 0 else None

    def start(self) -> None:
        for learner in self.learners:
            learner.init()
            self.send([learner.hparams_report()])
        for actor in self.actors:
            self.send(actor.init())

    def send(self, msgs: list[Any]) -> None:
        send(msgs, self.queues)

    def poll(self, timeout: float = 0.0) -> list[Any]:
        """One round: inference for every pending request, env steps for every reply, training when a batch
        is complete, evaluations asked for; returns the driver's messages."""
        queues = self.queues
        for worker in self.policy_workers:
            self.send(worker.infer(policy_queue(queues, worker.policy_id).get_many()))
        for actor in self.actors:
            out: list[Any] = []
            for msg in actor_inbox(queues, actor.worker_idx).get_many():
                out += actor.handle(msg)
            self.send(out + actor.reports())
        for learner in self.learners:
            for msg in queues.learner_queues[learner.policy_id].get_many():
                if type(msg) is not Stop:
                    learner.handle(msg)
            self.send(learner.apply_pbt())
            while (batch := learner.next_batch()) is not None:
                report = learner.train(batch)
                learner.maybe_save()
                learner.batcher.mark_released(batch.releases)
                self.send([report, *batch.releases])
        self._serve_evaluations()
        return queues.driver_queue.get_many()

    def _serve_evaluations(self) -> None:
        if self.evaluator is not None:
            requests = [msg for msg in self.queues.eval_queue.get_many() if type(msg) is not Stop]
            self.send([self.evaluator.evaluate(msg) for msg in requests])

    def check(self) -> list[str]:
        return []  # nothing here can die on its own: an exception ends the run where it is raised

    def kill_all(self) -> None:
        pass

    def stop(self, driver: Any) -> None:
        """The episodes finished since the actors' last report reach the driver (as the actor processes' last
        report does); learners save; then one last evaluation of the saved weights; then envs close."""
        try:
            self.send([report for actor in self.actors for report in actor.reports(force=True)])
            driver.on_messages(self.queues.driver_queue.get_many())
            for learner in self.learners:
                learner.save()
            if self.evaluator is not None and not driver.errors:
                self.send(driver.eval_requests(force=True))
                self._serve_evaluations()
                driver.on_messages(self.queues.driver_queue.get_many())
        finally:
            for actor in self.actors:
                actor.close()
            if self.evaluator is not None:
                self.evaluator.close()
