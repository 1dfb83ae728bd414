"""Process lifecycle: the spawn context, what every child does first (name, signals, thread limits,
affinity, logging), how a child's failure reaches the driver, and how the driver stops them all.

On a 2-core machine oversubscription is the enemy: every child runs torch and BLAS with one thread. Actor workers
acting in numpy never import torch (appo/protocol/shared_views.py), so nothing here imports it at module level."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

from appo.config.cfg import Cfg, experiment_dir
from appo.protocol.messages import ErrorReport
from appo.utils.logging import init_logging, log
from appo.utils.paths import log_path


@contextlib.contextmanager
def stop_signals_unblocked() -> Any:
    """SIGINT and SIGTERM unblocked and not ignored while a run or a sweep lasts: a process started by a Ray worker
    (a sweep's run on Ray) inherits SIGINT blocked (Ray's workers block it), one started in the background by a
    script (`cmd &`, nohup) inherits it ignored, and so would every process it starts (a sweep's Ray workers,
    which ray.cancel interrupts through SIGINT): a Ctrl-C would be missed until a driver catches the signals."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if signal.getsignal(signal.SIGTERM) == signal.SIG_IGN:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    before = signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


def spawn_context() -> Any:
    # spawn, not fork: a forked child would inherit the driver's threads and CUDA state. torch's pickling of shared
    # tensors for the children that take them is registered when torch is imported (the driver imports it).
    return multiprocessing.get_context("spawn")


def limit_threads(num_threads: int = 1) -> Any:
    """Limit torch (where this process imported it), OpenMP and BLAS threads of this process; returns the
    threadpoolctl handle to keep."""
    from threadpoolctl import threadpool_limits

    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(num_threads)
    return threadpool_limits(limits=num_threads)


def process_title(cfg: Cfg, name: str) -> str:
    return f"appo:{cfg.experiment}:{name}"


def set_process_title(title: str) -> None:
    try:
        import setproctitle

        setproctitle.setproctitle(title)
    except ImportError:  # setproctitle is optional for correctness, only helps `ps` and `top`
        pass


def die_with_parent() -> None:
    """Ask Linux to SIGKILL this process when the driver dies (even by kill -9), so no worker is orphaned."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    pr_set_pdeathsig = 1
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(pr_set_pdeathsig, signal.SIGKILL)
    if os.getppid() == 1:  # the driver died before the call above: do not outlive it
        os._exit(1)


def pin_to_cpu(index: int) -> None:
    if hasattr(os, "sched_getaffinity"):
        cpus = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cpus[index % len(cpus)]})


def component_main(cfg: Cfg, name: str, queues: Any, body: Callable[[], None], cpu: int | None = None) -> None:
    """Common start-up and failure handling of every child process; runs `body`."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    die_with_parent()
    set_process_title(process_title(cfg, name))
    # The driver owns Ctrl-C and SIGTERM: it sends Stop to everyone and waits for a clean exit (learners save,
    # the evaluator runs its last evaluation). A signal to the whole process group (`timeout`, `kill -- -PGID`,
    # a batch scheduler stopping the job) must not kill the children under it; a child that does not stop is
    # killed by the driver (stop_processes), and every child dies with the driver (die_with_parent).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})  # blocked by start_process
    init_logging(cfg.log_level, log_path(experiment_dir(cfg)), name)
    _limits = limit_threads(1)
    if cpu is not None:
        pin_to_cpu(cpu)
    try:
        body()
    except Exception:
        error = traceback.format_exc()
        log.error("%s failed:\n%s", name, error)
        try:
            queues.driver_queue.put(ErrorReport(name, error), timeout=1.0)
        except Exception:  # the driver may already be gone; the exit code still tells it
            pass
        sys.exit(1)


def start_process(ctx: Any, target: Callable[..., None], args: tuple, name: str) -> Any:
    """Start a child whose SIGINT and SIGTERM are blocked from its first instruction until component_main ignores
    them: the spawning thread blocks both while it forks, and the child inherits the mask across exec, so a
    Ctrl-C to the whole process group while the child still imports cannot kill it. The driver itself loses
    nothing: the signal goes to another of its threads or waits, pending, until the mask is restored.

    multiprocessing's resource tracker starts first: a spawn context launches it on its first Process.start() if it
    is not running, and unblocks SIGINT and SIGTERM in the calling thread once it has, so the run's first child was
    forked with both unblocked and a Ctrl-C while its interpreter started killed it (a CI run on a loaded machine:
    "Fatal Python error: init_import_site ... KeyboardInterrupt", the run's exit 1)."""
    from multiprocessing import resource_tracker

    resource_tracker.ensure_running()  # a no-op once it runs
    process = ctx.Process(target=target, args=args, name=name, daemon=False)
    stop_signals = {signal.SIGINT, signal.SIGTERM}
    before = signal.pthread_sigmask(signal.SIG_BLOCK, stop_signals)
    try:
        process.start()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)
    return process


def stop_processes(
    processes: list[Any], timeout: float = 10.0, grace: float = 1.0, deadline: Callable[[], float] | None = None
) -> list[str]:
    """Join every process within `timeout` seconds in total (or until `deadline()`, a time.monotonic() value asked
    again every 0.1 s: a signal can bring it forward); then SIGTERM every one left at once (a child still starting,
    before component_main, dies of it), and `grace` seconds later SIGKILL every one still there (a child in its
    loop ignores SIGTERM: the driver owns it). At most timeout + grace + a little, whatever the number of
    processes. Returns the names of processes that had to be forced."""
    began = time.monotonic()
    until = deadline if deadline is not None else (lambda: began + timeout)
    while time.monotonic() < until():
        alive = [p for p in processes if p.is_alive()]  # once: a child may exit between two is_alive() calls
        if not alive:
            break
        alive[0].join(0.1)
    left = [p for p in processes if p.is_alive()]
    for process in left:
        process.terminate()
    deadline = time.monotonic() + grace
    for process in left:
        process.join(max(deadline - time.monotonic(), 0.01))
    for process in left:
        if process.is_alive():
            process.kill()
    for process in left:
        process.join(2.0)
    return [p.name for p in left]


def child_pids() -> set[int]:
    import psutil

    return {child.pid for child in psutil.Process().children(recursive=True)}


def kill_children(before: set[int] | None = None) -> list[str]:
    """SIGKILL every process this driver started that is still alive, less those in `before` (there before the
    run: a test's Ray cluster) and Python's resource tracker (it frees what the dead ones leaked); returns their
    names. The last sweep of every run's end: a process a backend lost track of (a Ray node process of a start
    cut short) does not outlive the run."""
    import psutil

    left = []
    for child in psutil.Process().children(recursive=True):
        try:
            if child.pid in (before or set()) or child.status() == psutil.STATUS_ZOMBIE:
                continue
            if "resource_tracker" in " ".join(child.cmdline()):
                continue
            left.append(f"{child.pid} {child.name()}")
            child.kill()
        except psutil.Error:
            continue
    return left
