"""--serial_mode: the same ActorWorker, PolicyWorker and Learner objects as the multi-process run, driven
round-robin in the driver process over in-process queues. Deterministic for a given seed, and every
component can be stepped through in a debugger."""

from __future__ import annotations

import signal
from typing import Any

from appo.cfg import Cfg, Derived
from appo.evaluator import Evaluator
from appo.learning.learner import Learner
from appo.learning.param_sync import ParamStore
from appo.messages import Stop
from appo.model import make_model
from appo.processes import limit_threads
from appo.sampling.actor_worker import ActorWorker
from appo.sampling.policy_worker import make_policy_workers
from appo.wiring import actor_inbox, policy_queue, send, wire
from utils.logging import log
from utils.paths import checkpoint_dir


def run_serial(
    cfg: Cfg, derived: Derived, exp_dir: Any, spaces: Any, buffers: Any, control: Any, device: str, driver: Any
) -> int:
    _limits = limit_threads(1)
    queues = wire(cfg.num_workers, cfg.num_policies, local=True)
    params = [ParamStore(make_model(cfg, *spaces)) for _ in range(cfg.num_policies)]
    learners = [
        Learner(cfg, derived, p, buffers, params[p], spaces, checkpoint_dir(exp_dir, p), device, control)
        for p in range(cfg.num_policies)
    ]
    for learner in learners:
        learner.init()
        driver.on_messages([learner.hparams_report()])
    policy_workers = make_policy_workers(cfg, derived, buffers, params, spaces, device, control)
    actors = [ActorWorker(cfg, derived, w, buffers, control) for w in range(cfg.num_workers)]
    evaluator = Evaluator(cfg, spaces, params) if driver.eval_interval > 0 else None
    received: list[int] = []
    previous = {
        s: signal.signal(s, lambda signum, _f: received.append(signum)) for s in (signal.SIGINT, signal.SIGTERM)
    }
    try:
        for actor in actors:
            send(actor.init(), queues)
        reason = None
        while reason is None:
            step_all(actors, policy_workers, learners, queues, driver)
            serve_evaluations(evaluator, queues, driver)
            reason = driver.should_stop() or (f"signal {received[0]}" if received else None)
        log.info("stopping: %s", reason)
        for learner in learners:
            learner.save()
        if evaluator is not None and not driver.errors:
            send(driver.eval_requests(force=True), queues)
            serve_evaluations(evaluator, queues, driver)
    finally:
        for actor in actors:
            actor.close()
        if evaluator is not None:
            evaluator.close()
        driver.close()
        for s, handler in previous.items():
            signal.signal(s, handler)
    return 1 if driver.errors else (143 if received and received[0] == signal.SIGTERM else 0)


def serve_evaluations(evaluator: Evaluator | None, queues: Any, driver: Any) -> None:
    if evaluator is None:
        return
    reports = [evaluator.evaluate(msg) for msg in queues.eval_queue.get_many() if type(msg) is not Stop]
    driver.on_messages(reports)


def step_all(actors: list, policy_workers: list, learners: list, queues: Any, driver: Any) -> None:
    """One round: inference for every pending request, env steps for every reply, training when a batch
    is complete, then the driver's bookkeeping."""
    for worker in policy_workers:
        send(worker.infer(policy_queue(queues, worker.policy_id).get_many()), queues)
    for actor in actors:
        out: list[Any] = []
        for msg in actor_inbox(queues, actor.worker_idx).get_many():
            out += actor.handle(msg)
        send(out + actor.reports(), queues)
    for learner in learners:
        for msg in queues.learner_queues[learner.policy_id].get_many():
            if type(msg) is not Stop:
                learner.handle(msg)
        send(learner.apply_pbt(), queues)
        while (batch := learner.next_batch()) is not None:
            report = learner.train(batch)
            learner.maybe_save()
            learner.batcher.mark_released(batch.releases)
            send([report, *batch.releases], queues)
    driver.on_messages(queues.driver_queue.get_many())
    send(driver.tick(), queues)
