"""The sweep's runs as Ray tasks (`python -m appo.tools.sweep --backend=ray`): each configuration is one task that runs
an ordinary `train_appo.py` (local backend) on whichever node of the cluster Ray gives it `--cpus_per_run` CPUs.

The task reads the run's curve where the run wrote it and returns it, so the sweep's table and PNG are made on the
machine that started the sweep even when the nodes share no filesystem (then each run's folder, checkpoints and
log stay on its node, and a run cut short starts again from scratch wherever it lands next; with `--train_dir`
on a shared filesystem it resumes from its checkpoints). Stopping the sweep cancels every task: the task sends
SIGTERM to its run, which saves and exits; a task whose Ray worker dies takes its run with it (the run gets
SIGTERM from the kernel when its parent goes)."""

from __future__ import annotations

import ctypes
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

PR_SET_PDEATHSIG = 1  # linux/prctl.h
try:  # resolved here, not in the forked child: a dlopen there could wait on a lock another thread held
    _prctl = ctypes.CDLL(None, use_errno=True).prctl
except (OSError, AttributeError):  # not Linux
    _prctl = None


def _die_with_parent() -> None:
    """In the run's process before exec: SIGTERM when the Ray worker that started it dies (Linux only)."""
    if _prctl is not None:
        _prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def run_config(args: list[str], run_dir: str, log_path: str) -> dict[str, Any]:
    """The Ray task: one train_appo.py run (this node's install of the project) to its end, then its status,
    final return and curve."""
    import ray

    from appo.tools.sweep_runs import final_return, start_run
    from appo.utils.paths import budget_reached

    Path(log_path).parent.mkdir(parents=True, exist_ok=True)
    proc = start_run(args, Path(log_path), preexec_fn=_die_with_parent)
    try:
        while (status := proc.poll()) is None:
            time.sleep(0.5)  # ray.cancel's KeyboardInterrupt lands here
    except BaseException:
        proc.send_signal(signal.SIGTERM)  # the run saves a checkpoint and exits
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        raise
    final, steps, values = final_return(Path(run_dir))
    tail = Path(log_path).read_text(errors="replace")[-2000:] if status else ""
    node = ray.get_runtime_context().get_node_id()
    curve = {"steps": steps.tolist(), "values": values.tolist()}
    finished = budget_reached(Path(run_dir))  # read where the run wrote its checkpoints: this node
    return {"status": status, "final_return": final, **curve, "node": node, "log_tail": tail, "finished": finished}


class RayRuns:
    """Runs in flight as Ray tasks: start, collect the finished ones, cancel all, and stop Ray if started here."""

    def __init__(self, address: str, cpus_per_run: float) -> None:
        import ray

        from appo.backends.ray.connection import connect_ray

        self.started_ray = connect_ray(address)
        self.remote = ray.remote(num_cpus=cpus_per_run, max_retries=2)(run_config)
        self.refs: dict[Any, str] = {}

    def __len__(self) -> int:
        return len(self.refs)

    def start(self, name: str, args: list[str], run_dir: Path, log: Path) -> None:
        ref = self.remote.remote(args, str(run_dir.resolve()), str(log.resolve()))
        self.refs[ref] = name

    def finished(self) -> list[tuple[str, int, dict[str, Any] | None]]:
        """(name, exit status, what the task returned) of each run that ended; status -1 if its task failed."""
        import ray
        from ray.exceptions import RayError

        from appo.utils.logging import first_line

        if not self.refs:
            return []
        ready, _ = ray.wait(list(self.refs), num_returns=len(self.refs), timeout=0)
        out = []
        for ref in ready:
            name = self.refs.pop(ref)
            try:
                result = ray.get(ref)
                out.append((name, int(result["status"]), result))
            except RayError as exc:
                out.append((name, -1, {"error": first_line(exc, 160)}))
        return out

    def stop(self) -> None:
        import ray

        for ref in self.refs:
            ray.cancel(ref)  # the task sends SIGTERM to its run and waits for it

    def close(self) -> None:
        import ray

        if ray.is_initialized():
            ray.shutdown()  # a private instance: every Ray process it started stops
