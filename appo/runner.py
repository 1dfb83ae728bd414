"""THE DRIVER: verify the cfg -> write cfg.json -> read the env's spaces -> allocate shared buffers and
weights -> wire queues -> spawn learners, policy workers and actor workers -> aggregate reports (status
line, tensorboard, stop criteria, dead children) -> stop everyone and exit with a status code.

--serial_mode drives the very same components in this process (appo/serial.py)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import threading
import time
from typing import Any

import torch

from appo.buffers import allocate_control, allocate_trajectories, shared_bytes
from appo.cfg import Cfg, cfg_to_dict, derive, experiment_dir, resolve_device, verify_or_exit
from appo.learning.param_sync import ParamStore
from appo.messages import ErrorReport, EvalReport, EvalRequest, HyperparamsReport, ReturnSummary, Stop
from appo.model import make_model
from appo.pbt_controller import PbtController
from appo.processes import process_title, set_process_title, spawn_context, stop_processes
from appo.stats import Stats, SummaryWriters, eval_line
from appo.supervision import Supervisor
from appo.wiring import Queues, actor_inbox, close_all, policy_queue, queue_bytes, send, wire
from envs import UnknownEnvError, make_run_env
from utils.logging import init_logging, log
from utils.paths import cfg_path, checkpoint_dir, log_path

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Driver:
    """Report aggregation and stop criteria, shared by the process and serial modes."""

    def __init__(self, cfg: Cfg, exp_dir: Any) -> None:
        self.cfg = cfg
        self.stats = Stats(cfg.num_policies)
        self.writers = SummaryWriters(exp_dir / "summaries", cfg.num_policies)
        self.start = time.monotonic()
        self.last_report = self.start
        self.last_status = self.start
        self.progress = (0, self.start)  # (env steps, when they last changed)
        self.errors: list[str] = []
        self.eval_interval = cfg.meta_test_interval if cfg.task_schedule != "none" else cfg.eval_interval
        self.next_eval = [self.eval_interval] * cfg.num_policies
        self.eval_pending = [False] * cfg.num_policies
        self.pbt = PbtController(cfg, exp_dir)

    def on_messages(self, msgs: list[Any]) -> None:
        for msg in msgs:
            if type(msg) is ErrorReport:
                self.errors.append(f"{msg.component}: {msg.error.strip().splitlines()[-1]}")
                continue
            if type(msg) is EvalReport:
                self.eval_pending[msg.policy_id] = False
                log.info(eval_line(msg))
            elif type(msg) is HyperparamsReport:
                self.pbt.on_hparams(msg.policy_id, msg.hparams)
            self.stats.on_report(msg)

    def eval_requests(self, force: bool = False) -> list[EvalRequest]:
        """Evaluations due (one outstanding per policy); `force` asks for one of every policy now."""
        if self.eval_interval <= 0:
            return []
        out = []
        for pid, p in enumerate(self.stats.policies):
            if self.eval_pending[pid] or not (force or p.env_steps >= self.next_eval[pid]):
                continue
            if force and p.last_eval is not None and p.last_eval.env_steps == p.env_steps:
                continue  # the newest weights were just evaluated
            while self.next_eval[pid] <= p.env_steps:
                self.next_eval[pid] += self.eval_interval
            self.eval_pending[pid] = True
            out.append(EvalRequest(pid, p.env_steps))
        return out

    def evals_done(self) -> bool:
        return not any(self.eval_pending)

    def _best_metric(self, pid: int) -> float | None:
        p = self.stats.policies[pid]
        if self.cfg.save_best_metric == "eval":
            return p.last_eval.return_mean if p.last_eval is not None else None
        return p.return_mean() if p.returns else None

    def tick(self) -> list[Any]:
        """Periodic work; returns the messages to send (return summaries for the learners)."""
        now = time.monotonic()
        self.stats.sample(now)
        out: list[Any] = self.eval_requests() + self.pbt.tick(self.stats.policies)
        if now - self.last_report < self.cfg.report_interval:
            return out
        self.last_report = now
        self.report()
        self.pbt.write_best(self.stats.policies)
        metrics = [(pid, self._best_metric(pid)) for pid in range(self.cfg.num_policies)]
        return out + [ReturnSummary(pid, value) for pid, value in metrics if value is not None]

    def report(self) -> None:
        # Progress and ETA only toward a budget a user set (the default is effectively unlimited).
        target = self.cfg.train_for_env_steps if self.cfg.train_for_env_steps < Cfg.train_for_env_steps else None
        now = time.monotonic()
        log.info(self.stats.status_line(now - self.start, target, now - self.last_status))
        self.last_status = now
        self.writers.write(self.stats)

    def should_stop(self) -> str | None:
        if self.errors:
            return "component failed"
        now = time.monotonic()
        if self.stats.env_steps != self.progress[0]:
            self.progress = (self.stats.env_steps, now)
        elif now - self.progress[1] > self.cfg.stall_timeout:
            self.errors.append(
                f"no training progress for {self.cfg.stall_timeout:g} s (--stall_timeout): a queue may "
                "be blocked by a worker killed while writing to it; run the command again to resume"
            )
            return "stalled"
        if self.stats.min_policy_env_steps >= self.cfg.train_for_env_steps:
            return f"reached {self.cfg.train_for_env_steps} env steps" + (
                " per policy" if self.cfg.num_policies > 1 else ""
            )
        if time.monotonic() - self.start >= self.cfg.train_for_seconds:
            return f"ran {self.cfg.train_for_seconds:g} s"
        return None

    def close(self) -> None:
        self.report()
        self.pbt.write_best(self.stats.policies)
        self.writers.close()


def prepare(cfg: Cfg) -> tuple[Any, Any, Any]:
    """Everything before any process exists: verify, folders, cfg.json, logging, spaces."""
    verify_or_exit(cfg)
    try:
        env = make_run_env(cfg)
    except UnknownEnvError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    spaces = (env.observation_space, env.action_space)
    env.close()
    check_shared_memory(cfg, spaces)
    check_checkpoints(cfg, spaces)
    exp_dir = experiment_dir(cfg)
    exp_dir.mkdir(parents=True, exist_ok=True)
    _write_json_atomic(cfg_path(exp_dir), cfg_to_dict(cfg))
    init_logging(cfg.log_level, log_path(exp_dir), "driver")
    set_process_title(process_title(cfg, "driver"))
    return exp_dir, spaces, derive(cfg)


def check_checkpoints(cfg: Cfg, spaces: tuple[Any, Any]) -> None:
    """On resume, the newest readable checkpoint of every policy must fit this cfg's model; otherwise exit 2
    before anything starts (a learner failing later would leave a half-started run)."""
    from appo.checkpoint import load_latest

    template = make_model(cfg, *spaces)
    for policy_id in range(cfg.num_policies):
        loaded = load_latest(checkpoint_dir(experiment_dir(cfg), policy_id))
        if loaded is None:
            continue
        state, path = loaded
        try:
            template.load_state_dict(state["model"])
        except (KeyError, RuntimeError) as exc:
            first = str(exc).strip().splitlines()
            detail = next((line.strip() for line in first if "size mismatch" in line or "Missing" in line), first[0])
            print(
                f"error: {path}: does not fit the model of this cfg ({detail}); use the run's own settings or "
                "another --experiment",
                file=sys.stderr,
            )
            raise SystemExit(2) from None


def check_shared_memory(cfg: Cfg, spaces: tuple[Any, Any], shm: str = "/dev/shm") -> None:
    """Refuse to start (exit 2) when /dev/shm cannot hold the run's shared tensors and queues: otherwise a
    worker would die with SIGBUS mid-run (Docker's default /dev/shm is 64 MB)."""
    if cfg.serial_mode or not os.path.isdir(shm):
        return
    need = shared_bytes(cfg, derive(cfg), *spaces) + queue_bytes(cfg.num_workers, cfg.num_policies)
    free = shutil.disk_usage(shm).free
    if need * 1.1 > free:
        print(
            f"error: {shm} has {free / 2**20:.0f} MB free, this run needs about {need * 1.1 / 2**20:.0f} MB: "
            "enlarge it (e.g. docker --shm-size) or lower --num_workers, --num_envs_per_worker or --rollout",
            file=sys.stderr,
        )
        raise SystemExit(2)


def _write_json_atomic(path: Any, data: dict) -> None:
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    os.replace(tmp, path)


def run(cfg: Cfg) -> int:
    """Train until a stop criterion; returns the process exit status."""
    exp_dir, spaces, derived = prepare(cfg)
    torch.manual_seed(cfg.seed)
    device = resolve_device(cfg)
    log.info(
        "experiment %s: env %s, %d workers x %d envs, device %s",
        cfg.experiment,
        cfg.env,
        cfg.num_workers,
        cfg.num_envs_per_worker,
        device,
    )
    buffers = allocate_trajectories(cfg, derived, *spaces)
    control = allocate_control(cfg, derived)
    if cfg.serial_mode:
        from appo.serial import run_serial

        return run_serial(cfg, derived, exp_dir, spaces, buffers, control, device, Driver(cfg, exp_dir))
    ctx = spawn_context()
    template = make_model(cfg, *spaces)
    params = [ParamStore(template) for _ in range(cfg.num_policies)]
    queues = wire(cfg.num_workers, cfg.num_policies)
    driver = Driver(cfg, exp_dir)
    # Signals are caught from before the first child starts: a SIGTERM during start-up stops cleanly too.
    received: list[int] = []
    previous = {s: signal.signal(s, lambda signum, _frame: received.append(signum)) for s in STOP_SIGNALS}
    try:
        sup = spawn_all(ctx, cfg, derived, exp_dir, spaces, buffers, control, params, device, queues)
        return supervise(cfg, driver, queues, sup, received)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def spawn_all(
    ctx: Any,
    cfg: Cfg,
    derived: Any,
    exp_dir: Any,
    spaces: Any,
    buffers: Any,
    control: Any,
    params: list,
    device: str,
    queues: Queues,
) -> Supervisor:
    """Start learners first (they publish weights), then policy workers, actor workers, the evaluator."""
    from appo.learning.learner_process import run_learner
    from appo.sampling.actor_worker import run_actor_worker
    from appo.sampling.policy_worker import actors_act, run_policy_worker

    heartbeats = {"actors": control["heartbeats"], "policy_workers": control["policy_heartbeats"]}
    sup = Supervisor(ctx, heartbeats, queues, cfg.worker_stuck_timeout, cfg.policy_workers_per_policy)
    for p in range(cfg.num_policies):
        ckpt = checkpoint_dir(exp_dir, p)
        args = (cfg, derived, p, buffers, params[p], spaces, ckpt, device, control, queues)
        sup.add("learners", f"learner_{p}", run_learner, lambda _inc, a=args: a)
    shared = cfg.shared_policy_workers and cfg.num_policies > 1
    local = actors_act(cfg)  # actor workers act for their own envs: no policy worker processes
    served = [] if local else [0] if shared else range(cfg.num_policies)
    for p in served:
        for i in range(cfg.policy_workers_per_policy):
            args = (cfg, derived, p, i, buffers, params if shared else params[p], spaces, device, control, queues)
            sup.add("policy_workers", f"policy_worker_{p}_{i}", run_policy_worker, lambda _inc, a=args: a, True)
    acting = (params, spaces) if local else ()
    log.info("inference: %s", "in the actor workers (numpy, cpu)" if local else f"policy workers on {device}")
    for w in range(cfg.num_workers):
        sup.add(
            "actors",
            f"actor_worker_{w}",
            run_actor_worker,
            lambda inc, w=w: (cfg, derived, w, buffers, control, inc, queues, *acting),
            True,
        )
    if cfg.eval_interval > 0 or (cfg.task_schedule != "none" and cfg.meta_test_interval > 0):
        from appo.evaluator import run_evaluator

        sup.add("evaluators", "evaluator", run_evaluator, lambda _inc: (cfg, spaces, params, queues))
    return sup


def supervise(cfg: Cfg, driver: Driver, queues: Queues, sup: Supervisor, received: list[int]) -> int:
    """The driver's loop: reports in, status out, until a stop criterion, a signal or a failure."""

    def on_signal(signum: int, _frame: Any) -> None:
        if received:  # a second Ctrl-C: no more waiting, but no orphans either
            log.warning("second signal: killing every process now")
            sup.kill_all()
            os._exit(130)
        received.append(signum)

    for s in STOP_SIGNALS:
        signal.signal(s, on_signal)
    # Longer than a legitimate shutdown (final evaluation, learners saving) can take.
    watchdog = Watchdog(sup, limit=max(cfg.stall_timeout, 240.0))
    reason = None
    try:
        while reason is None:
            watchdog.beat()
            try:
                msgs = queues.driver_queue.get_many(timeout=0.1)
            except Exception:  # queue.Empty on timeout
                msgs = []
            driver.on_messages(msgs)
            send(driver.tick(), queues)
            driver.errors += [] if driver.errors else sup.check()
            driver.stats.restarts = sup.restarts
            reason = driver.should_stop() or (f"signal {received[0]}" if received else None)
        log.info("stopping: %s", reason)
    finally:
        watchdog.beat()  # the shutdown has its own timeouts; the watchdog stays as the last resort
        shutdown(queues, sup, driver)
        watchdog.stop()
    for error in driver.errors:
        log.error("%s", error)
    if driver.errors:
        return 1
    return 143 if received and received[0] == signal.SIGTERM else 0


class Watchdog:
    """Last resort against a driver blocked inside a queue call (a worker killed while holding the queue's
    lock leaves it locked for good): when the driver's loop has not come round for `limit` seconds, kill
    every child and exit 1, so that a wrapper or a person can resume the run instead of it hanging."""

    def __init__(self, sup: Supervisor, limit: float) -> None:
        self.sup, self.limit = sup, limit
        self.last = time.monotonic()
        self.stopped = threading.Event()
        threading.Thread(target=self._watch, name="watchdog", daemon=True).start()

    def beat(self) -> None:
        self.last = time.monotonic()

    def stop(self) -> None:
        self.stopped.set()

    def _watch(self) -> None:
        while not self.stopped.wait(1.0):
            if time.monotonic() - self.last > self.limit:
                log.error(
                    "the driver has been blocked for over %.0f s; killing every process (resume by running "
                    "the same command again)",
                    self.limit,
                )
                self.sup.kill_all()
                os._exit(1)


def final_evaluation(driver: Driver, queues: Queues, timeout: float = 120.0) -> None:
    """One last evaluation of every policy's newest weights, so every run ends with eval summaries."""
    send(driver.eval_requests(force=True), queues)
    deadline = time.monotonic() + timeout
    while not driver.evals_done() and time.monotonic() < deadline:
        try:
            driver.on_messages(queues.driver_queue.get_many(timeout=0.5))
        except Exception:  # queue.Empty
            pass


def shutdown(queues: Queues, sup: Supervisor, driver: Driver) -> None:
    """Stop actors, then policy workers, then learners (which save a final checkpoint), then the evaluator."""
    stop = Stop("driver")
    for kind, targets in (
        ("actors", [actor_inbox(queues, w) for w in range(len(queues.actor_inboxes))]),
        ("policy_workers", [policy_queue(queues, p) for p in range(len(queues.policy_queues))]),
        ("learners", queues.learner_queues),
        ("evaluators", [queues.eval_queue]),
    ):
        processes = sup.of_kind(kind)
        if kind == "evaluators" and processes and not driver.errors:
            # The learners have saved and published their last weights: evaluate exactly those.
            final_evaluation(driver, queues)
        for target in targets:
            for _ in range(len(processes) if kind == "policy_workers" else 1):
                _put_quietly(target, stop)
        forced = stop_processes(processes, timeout=30.0 if kind == "learners" else 10.0)
        if forced:
            log.warning("had to terminate: %s", ", ".join(forced))
        try:
            driver.on_messages(queues.driver_queue.get_many(block=False))
        except Exception:  # queue.Empty
            pass
    driver.close()
    close_all(queues)


def _put_quietly(queue: Any, msg: Any, timeout: float = 2.0) -> None:
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
