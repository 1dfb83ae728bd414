"""THE DRIVER: verify the cfg -> write cfg.json -> read the env's spaces -> allocate shared buffers and
weights -> wire queues -> spawn learners, policy workers and actor workers -> aggregate reports (status
line, tensorboard, stop criteria, dead children) -> stop everyone and exit with a status code.

Which components run, and where, is the backend's (appo/backends/local.py: processes on this machine;
appo/backends/serial.py: the very same components in this process for --serial_mode); this loop is the same for both."""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Any

import torch

from appo.backends.base import backend_class
from appo.backends.plan import evaluation_interval
from appo.config.cfg import Cfg
from appo.config.derive import resolve_device
from appo.driver.episode_window import restore_windows, save_windows
from appo.driver.pbt_controller import PbtController
from appo.driver.preflight import STOP_SIGNALS, budget_spent, prepare
from appo.driver.run_lock import released_at_end
from appo.driver.stats import Stats, SummaryWriters, eval_line
from appo.protocol.buffers import allocate_control, allocate_trajectories
from appo.protocol.control import ControlChannel, control_channel
from appo.protocol.messages import ErrorReport, EvalReport, EvalRequest, HyperparamsReport, ReturnSummary
from appo.protocol.processes import child_pids, kill_children
from appo.utils.logging import log


class Driver:
    """Report aggregation and stop criteria, shared by the process and serial modes."""

    def __init__(self, cfg: Cfg, exp_dir: Any, channel: ControlChannel | None = None) -> None:
        self.cfg, self.exp_dir = cfg, exp_dir
        # The writing end of the control channel (appo/protocol/control.py): which policy, task and weight set each env
        # runs from its next episode; assigners of the driver's (an algorithm's schedule of tasks) write here.
        self.channel = channel
        self.stats = Stats(cfg.num_policies)
        restore_windows(self.stats, exp_dir)  # a resumed run's last episodes (appo/driver/episode_window.py)
        self.writers = SummaryWriters(exp_dir / "summaries", cfg.num_policies, cfg)
        self.start = time.monotonic()
        self.last_report = self.start
        self.last_status = self.start
        self.progress = (0, self.start)  # (env steps, when they last changed)
        self.errors: list[str] = []
        # When a stop signal came (time.monotonic()); from then on backends stop within their signal budgets.
        self.interrupted_at: float | None = None
        self.eval_interval = evaluation_interval(cfg)
        self.next_eval = [self.eval_interval] * cfg.num_policies
        self.eval_rescheduled = [False] * cfg.num_policies  # a resumed policy's next_eval moved past its checkpoint
        self.eval_pending = [False] * cfg.num_policies
        self.pbt = PbtController(cfg, exp_dir)
        # Message type -> what the driver does with it besides statistics (Stats.on_report takes every report).
        self.handlers = {ErrorReport: self._on_error, EvalReport: self._on_eval, HyperparamsReport: self._on_hparams}

    @property
    def interrupted(self) -> bool:
        return self.interrupted_at is not None

    def on_messages(self, msgs: list[Any]) -> None:
        for msg in msgs:
            handler = self.handlers.get(type(msg))
            if handler is None or handler(msg):
                self.stats.on_report(msg)

    def _on_error(self, msg: ErrorReport) -> bool:
        self.errors.append(f"{msg.component}: {msg.error.strip().splitlines()[-1]}")
        return False  # not a statistic

    def _on_eval(self, msg: EvalReport) -> bool:
        self.eval_pending[msg.policy_id] = False
        log.info(eval_line(msg))
        return True

    def _on_hparams(self, msg: HyperparamsReport) -> bool:
        self.pbt.on_hparams(msg.policy_id, msg.hparams)
        return True

    def eval_requests(self, force: bool = False) -> list[EvalRequest]:
        """Evaluations due (one outstanding per policy); `force` asks for one of every policy now."""
        if self.eval_interval <= 0:
            return []
        out = []
        for pid, p in enumerate(self.stats.policies):
            if p.resumed and not p.reported:
                continue  # the checkpoint's env steps are not known yet (and its weights were evaluated before)
            if p.resumed and not self.eval_rescheduled[pid]:  # the first due one after the checkpoint's steps
                self.next_eval[pid] = (p.env_steps // self.eval_interval + 1) * self.eval_interval
                self.eval_rescheduled[pid] = True
            if self.eval_pending[pid] or not (force or p.env_steps >= self.next_eval[pid]):
                continue
            last = p.last_eval
            if force and last is not None and (last.env_steps, last.version) == (p.env_steps, p.version):
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
        save_windows(self.stats, self.exp_dir)

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
        versions = min(p.version for p in self.stats.policies)
        return budget_spent(self.cfg, self.stats.min_policy_env_steps, versions, time.monotonic() - self.start)

    def close(self) -> None:
        self.report()
        self.pbt.write_best(self.stats.policies)
        self.pbt.close()  # the population's schedule and random state, for a resumed run to continue
        self.writers.close()


def run(cfg: Cfg) -> int:
    """Train until a stop criterion; returns the process exit status. The run directory is this run's alone until
    then (a second driver on it exits 2). Every algorithm but the meta-gradient ones (appo/launch.py chooses)."""
    with released_at_end():
        return train(cfg)


def train(cfg: Cfg) -> int:
    """`run`'s body, for a caller that holds the run directory's lock already (appo/launch.py)."""
    if cfg.traits.consumes == "meta_batches":
        raise ValueError(f"--algo={cfg.algo} trains by meta-iterations: start it with appo.launch.run")
    exp_dir, spaces, derived, num_tasks, spent = prepare(cfg)
    if spent:  # a finished run: no process started, its checkpoints unchanged
        return 0
    torch.manual_seed(cfg.seed)
    device = resolve_device(cfg)
    what = (cfg.experiment, cfg.env, cfg.algo, cfg.num_workers, cfg.num_envs_per_worker, device)
    log.info("experiment %s: env %s, algo %s, %d workers x %d envs, device %s", *what)
    buffers = allocate_trajectories(cfg, derived, *spaces)
    control = allocate_control(cfg, derived)
    backend = backend_class(cfg)(cfg, derived, exp_dir, spaces, device, buffers, control)
    driver = Driver(cfg, exp_dir, control_channel(cfg, control, num_tasks))
    # The learners' clock for --train_for_seconds (their schedules): the driver's, which stops the run.
    control["session_start"][0] = time.time() - (time.monotonic() - driver.start)
    # Signals are caught from before the first child starts: a SIGTERM during start-up stops cleanly too.
    received: list[int] = []
    previous = {s: signal.signal(s, lambda signum, _frame: received.append(signum)) for s in STOP_SIGNALS}
    try:
        return drive(cfg, driver, backend, received)
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


def drive(cfg: Cfg, driver: Driver, backend: Any, received: list[int]) -> int:
    """The driver's loop, the same for every backend: reports in, status and requests out, until a stop
    criterion, a signal or a failure; then the backend stops every component."""

    starting, before = [True], child_pids()
    if received:  # a signal before the driver's loop (run's own handler caught it)
        driver.interrupted_at = time.monotonic()

    def on_signal(signum: int, _frame: Any) -> None:
        if received:  # a second Ctrl-C: no more waiting, but no orphans either
            log.warning("second signal: killing every process now")
            backend.kill_all()
            kill_children(before)
            os._exit(130)
        received.append(signum)
        driver.interrupted_at = time.monotonic()
        if starting[0]:  # a start can take long (Ray's on a slow machine): abandon it, stop what it started
            raise StartInterrupted(signum)

    for s in STOP_SIGNALS:
        signal.signal(s, on_signal)
    # Longer than a legitimate shutdown (final evaluation, learners saving) can take.
    watchdog = Watchdog(backend, limit=max(cfg.stall_timeout, 240.0)) if backend.uses_watchdog else None
    reason = None
    try:
        try:
            if not received:  # a signal before this point: stop what there is
                backend.start()
            starting[0] = False
        except (StartInterrupted, SystemExit) as exc:  # SystemExit: Ray's own SIGTERM handler, inside ray.init
            starting[0] = False
            received += [] if received else [signal.SIGTERM]
            log.info("start-up interrupted (%s)", type(exc).__name__)
        while reason is None and not received:
            if watchdog is not None:
                watchdog.beat()
            driver.on_messages(backend.poll(0.1))
            backend.send(driver.tick())
            driver.errors += [] if driver.errors else backend.check()
            driver.stats.restarts = backend.restarts
            reason = driver.should_stop() or (f"signal {received[0]}" if received else None)
        log.info("stopping: %s", reason or f"signal {received[0]}")
    finally:
        if watchdog is not None:
            watchdog.beat()  # the shutdown has its own timeouts; the watchdog stays as the last resort
        try:
            backend.stop(driver)
        finally:
            driver.close()
            if watchdog is not None:
                watchdog.stop()
            left = kill_children(before)
            if left:
                log.warning("killed %d process(es) still there after the stop: %s", len(left), ", ".join(left))
    for error in driver.errors:
        log.error("%s", error)
    if driver.errors:
        return 1
    return 143 if received and received[0] == signal.SIGTERM else 0


class StartInterrupted(BaseException):
    """Raised by the driver's signal handler while the backend is starting: the start is abandoned and the backend
    stops what it had started (BaseException: library code that catches Exception must not swallow it)."""


class Watchdog:
    """Last resort against a driver blocked inside a queue call (a worker killed while holding the queue's
    lock leaves it locked for good): when the driver's loop has not come round for `limit` seconds, kill
    every child and exit 1, so that a wrapper or a person can resume the run instead of it hanging."""

    def __init__(self, backend: Any, limit: float) -> None:
        self.backend, self.limit = backend, limit
        self.last = time.monotonic()
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._watch, name="watchdog", daemon=True)
        self.thread.start()

    def beat(self) -> None:
        self.last = time.monotonic()

    def stop(self) -> None:
        self.stopped.set()
        # Joined, so that its end (which drops the last reference to the backend and its tensors) is not left to
        # interpreter shutdown: a thread freeing tensors then is ended by pthread_exit, which Ray turns into abort.
        self.thread.join(timeout=5.0)

    def _watch(self) -> None:
        while not self.stopped.wait(1.0):
            if time.monotonic() - self.last > self.limit:
                log.error(
                    "the driver has been blocked for over %.0f s; killing every process (resume by running "
                    "the same command again)",
                    self.limit,
                )
                self.backend.kill_all()
                os._exit(1)
