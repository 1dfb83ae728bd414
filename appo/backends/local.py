"""`LocalBackend`: one process per component on this machine, shared-memory tensors, queues from
appo/protocol/wiring.py, a Supervisor that restarts what can be restarted (appo/backends/base.py: the calls
every backend answers)."""

from __future__ import annotations

import dataclasses
import queue
import threading
import time
from pathlib import Path
from typing import Any

import torch

from appo.backends.plan import plan
from appo.backends.supervision import Supervisor
from appo.config.cfg import Cfg
from appo.config.derive import Derived
from appo.learning.checkpoint import load_latest
from appo.learning.snapshot_pool import attach_snapshots
from appo.models.numpy_twins import numpy_description
from appo.models.registry import make_model
from appo.protocol.messages import Stop
from appo.protocol.param_sync import ParamStore
from appo.protocol.processes import spawn_context, stop_processes
from appo.protocol.shared_views import for_actor_process
from appo.protocol.wiring import Queues, actor_inbox, close_all, policy_queue, send, wire
from appo.utils.logging import log
from appo.utils.paths import checkpoint_dir

# Seconds each kind of process is given to exit after its Stop, before SIGTERM and then SIGKILL (1 s later): at the
# end of a run, and after a signal (in all 2 + 2 + 6 + 1 s and four 1-s graces: within 15 s of the signal).
STOP_BUDGETS = {
    "end": {"actors": 10.0, "policy_workers": 10.0, "learners": 30.0, "evaluators": 10.0},
    "signal": {"actors": 2.0, "policy_workers": 2.0, "learners": 6.0, "evaluators": 1.0},
}


def stop_deadline(driver: Any, kind: str, began: float) -> Any:
    """When the processes of `kind`, told to stop at `began`, are forced: after their budget at the end of a run,
    or, once a signal has come (before the stop or during it), after their signal budget from then on. After a
    signal the whole stop fits in STOP_BUDGETS["signal"] (a person pressed Ctrl-C, a scheduler sent SIGTERM and
    kills the job soon after): the learners still save, no final evaluation runs."""

    def deadline() -> float:
        at_end = began + STOP_BUDGETS["end"][kind]
        if driver.interrupted_at is None:
            return at_end
        return min(at_end, max(began, driver.interrupted_at) + STOP_BUDGETS["signal"][kind])

    return deadline


def publish_checkpoints(stores: list[ParamStore], template: Any, exp_dir: Path) -> None:
    """A resumed run's weights in its stores before any process starts: each policy's newest readable checkpoint
    (the one its learner resumes from), at its version. Otherwise actor and policy workers act with fresh weights
    until the learner has loaded and published (Walker2d-v5 with three runs on 2 cores: 12 s, some 200 episodes
    falling at once, their trajectories then dropped as hundreds of versions stale)."""
    for policy_id, store in enumerate(stores):
        loaded = load_latest(checkpoint_dir(exp_dir, policy_id))
        if loaded is not None:
            template.load_state_dict(loaded[0]["model"])
            store.publish(template, int(loaded[0]["version"]))


class LocalBackend:
    """Every component in its own process on this machine."""

    uses_watchdog = True  # a driver blocked inside a queue call is killed with its children (appo/driver/runner.py)

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
        self.cfg, self.derived, self.exp_dir, self.spaces, self.device = cfg, derived, exp_dir, spaces, device
        self.buffers, self.control = buffers, control
        template = make_model(cfg, *spaces)
        self.topology = plan(cfg)
        # What acting actor workers build their numpy passes from (appo/numpy_policy/); a model that no numpy pass
        # computes (a model class of one's own, say) is served by policy workers instead.
        self.description = numpy_description(template) if self.topology.actors_act else None
        if self.topology.actors_act and self.description is None:
            self.topology = plan(dataclasses.replace(cfg, actor_inference=False))
        self.params = [ParamStore(template) for _ in range(cfg.num_policies)]
        publish_checkpoints(self.params, template, exp_dir)
        # Every weight set inference serves: the policies', then their self-play snapshots (none without a pool).
        self.weight_sets = self.params + attach_snapshots(cfg, self.params, template)
        self.queues: Queues = wire(cfg.num_workers, cfg.num_policies)
        self.sup: Supervisor | None = None
        self.links: list[Any] = []  # per policy, with several learner ranks: what its ranks share
        # Where an off-policy learner's replay lives when not in the learner (Ray replay shards:
        # appo/backends/ray/backend.py)
        self.replay_factory: Any = None

    @property
    def restarts(self) -> int:
        return self.sup.restarts if self.sup is not None else 0

    def start(self) -> None:
        """Start learners first (they publish weights), then policy workers, actor workers, the evaluator."""
        from appo.sampling.policy_worker import run_policy_worker

        cfg, topo, q = self.cfg, self.topology, self.queues
        common = (cfg, self.derived)
        heartbeats = {"actors": self.control["heartbeats"], "policy_workers": self.control["policy_heartbeats"]}
        self.sup = sup = Supervisor(
            spawn_context(),
            heartbeats,
            q,
            cfg.worker_stuck_timeout,
            cfg.policy_workers_per_policy,
            start_timeout=cfg.worker_start_timeout + cfg.decorrelate_experience_max_seconds,
        )
        for p in topo.learners:
            self.start_learner_ranks(p)
        for p, i in topo.policy_workers:
            params = self.weight_sets if topo.shared_policy_workers else self.params[p]
            args = (*common, p, i, self.buffers, params, self.spaces, self.device, self.control, q)
            sup.add("policy_workers", f"policy_worker_{p}_{i}", run_policy_worker, lambda _inc, a=args: a, True)
        log.info(
            "inference: %s",
            "in the actor workers (numpy, cpu)" if topo.actors_act else f"policy workers on {self.device}",
        )
        self.start_actor_workers()
        if topo.evaluation_interval > 0:
            from appo.sampling.evaluator import run_evaluator

            sup.add("evaluators", "evaluator", run_evaluator, lambda _inc: (cfg, self.spaces, self.params, q))

    def start_actor_workers(self) -> None:
        """One process per actor worker (appo/backends/ray/backend.py: Ray actors instead)."""
        from appo.sampling.actor_worker import run_actor_worker

        cfg, q = self.cfg, self.queues
        acting = (self.weight_sets, self.description) if self.topology.actors_act else ()
        assert self.sup is not None
        for w in self.topology.actors:
            # Shared tensors as numpy arrays and the stores as ParamViews: the worker never imports torch (unless
            # torch shares memory by file name here: then the tensors travel as they are).
            def args_of(inc: int, w: int = w) -> tuple:
                return for_actor_process((cfg, self.derived, w, self.buffers, self.control, inc, q, *acting))

            self.sup.add("actors", f"actor_worker_{w}", run_actor_worker, args_of, True)

    def start_learner_ranks(self, p: int) -> None:
        """The learner of policy `p`: one process, or rank 0 (which takes the batches, publishes, saves and reports)
        and ranks 1..G-1, none of them restartable: a dead rank stops the run, which resumes from rank 0's
        checkpoint when started again."""
        from appo.learning.distributed import RankLink, backend_for
        from appo.learning.learner_process import rank_name, run_learner, run_learner_rank

        devices, ckpt_dir = list(self.topology.learner_devices), checkpoint_dir(self.exp_dir, p)
        link = RankLink(len(devices), backend_for(devices)) if len(devices) > 1 else None
        if link is not None:
            self.links.append(link)
            log.info("learner %d: %d ranks on %s (%s)", p, len(devices), ", ".join(devices), link.backend)
        common = (self.cfg, self.derived, p)
        args = (*common, self.buffers, self.params[p], self.spaces, ckpt_dir, devices[0], self.control, self.queues)
        assert self.sup is not None
        self.sup.add("learners", rank_name(p, 0), run_learner, lambda _inc, a=(*args, link, self.replay_factory): a)
        for rank in range(1, len(devices)):
            args = (*common, rank, self.buffers, self.spaces, ckpt_dir, devices[rank], self.control, self.queues, link)
            self.sup.add("learners", rank_name(p, rank), run_learner_rank, lambda _inc, a=args: a)

    def poll(self, timeout: float) -> list[Any]:
        """Messages for the driver that arrived within `timeout` seconds."""
        try:
            return self.queues.driver_queue.get_many(timeout=timeout)
        except queue.Empty:  # nothing came within `timeout`
            return []

    def send(self, msgs: list[Any]) -> None:
        send(msgs, self.queues)

    def check(self) -> list[str]:
        return self.sup.check() if self.sup is not None else []

    def kill_all(self) -> None:
        if self.sup is not None:
            self.sup.kill_all()

    def stop(self, driver: Any) -> None:
        """Stop actors, then policy workers, then learners (which save a final checkpoint), then the evaluator,
        after one last evaluation of the weights the learners saved."""
        if self.sup is None:
            self.close_queues()
            return
        queues, stop = self.queues, Stop("driver")
        for kind, targets in (
            ("actors", [actor_inbox(queues, w) for w in range(len(queues.actor_inboxes))]),
            ("policy_workers", [policy_queue(queues, p) for p in range(len(queues.policy_queues))]),
            ("learners", queues.learner_queues),
            ("evaluators", [queues.eval_queue]),
        ):
            processes = self.sup.of_kind(kind)
            if kind == "evaluators" and processes and not driver.errors and not driver.interrupted:
                self.final_evaluation(driver, processes)
            for target in targets:
                for _ in range(len(processes) if kind == "policy_workers" else 1):
                    put_quietly(target, stop)
            forced = stop_processes(processes, deadline=stop_deadline(driver, kind, time.monotonic()))
            if forced:
                log.warning("had to terminate: %s", ", ".join(forced))
            driver.on_messages(self.poll(0.0))
        self.close_queues()

    def close_queues(self) -> None:
        close_all(self.queues)
        for link in self.links:
            link.close()

    def final_evaluation(self, driver: Any, evaluators: list[Any], timeout: float = 120.0) -> None:
        """One last evaluation of every policy's newest weights, so every run ends with eval summaries; not
        waited for once no evaluator process is alive to answer. An evaluation asked for before the stop may still
        be running (of older weights): its answer comes first, then the saved weights are asked for."""
        deadline = time.monotonic() + timeout

        def answered() -> bool:
            """Until every outstanding evaluation is answered; False when no evaluator is left to answer."""
            while not driver.evals_done() and time.monotonic() < deadline and not driver.interrupted:
                if not any(p.is_alive() for p in evaluators):
                    log.warning("no final evaluation: the evaluator is gone")
                    return False
                driver.on_messages(self.poll(0.5))
            return True

        if answered():
            self.send(driver.eval_requests(force=True))
            answered()


def put_quietly(queue: Any, msg: Any, timeout: float = 2.0) -> None:
    """Deliver `msg` if that works within `timeout`. In a thread: a queue whose reader was killed can block
    its writers for good, and the shutdown of everything else must not wait on it."""

    def put() -> None:
        try:
            queue.put(msg, timeout=timeout)
        except Exception as exc:  # a full or broken queue: the process is terminated after its join timeout
            log.warning("could not deliver %r: %s", msg, exc)

    thread = threading.Thread(target=put, daemon=True)
    thread.start()
    thread.join(timeout)
