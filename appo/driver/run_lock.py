"""One driver per run directory. A second `train_appo.py` on a run that is still going (the same --experiment and
--train_dir, typed twice, or two benchmark invocations naming their runs alike) would write the same checkpoints,
summaries and cfg.json as the first, and each run would be lost in the other. So the driver holds an exclusive lock
on `run.lock` in the run directory from its start-up (after the cfg is verified, before cfg.json is written) until
it returns, and a second driver on the same directory exits 2 naming the first, having written nothing.

The lock is the kernel's (flock on an open file): it goes with the process however the process ends, kill -9
included, so a crashed run leaves no stale lock and resuming it starts at once. The file is opened
non-inheritable (Python's default), so the workers the driver starts do not hold it."""

from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO

LOCK_NAME = "run.lock"
_held: dict[Path, IO[str]] = {}  # run directory -> its open lock file, for this process


def hold_run_dir(exp_dir: Path) -> None:
    """Take `exp_dir`'s lock for this process (already held by it: nothing to do), or print a one-line error naming
    the driver that holds it and exit 2."""
    exp_dir = Path(exp_dir).resolve()
    if exp_dir in _held:
        return
    lock = open(exp_dir / LOCK_NAME, "a+")  # noqa: SIM115 - open for as long as the run: closed by released_at_end
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.seek(0)
        holder = lock.read().strip() or "a driver starting"
        lock.close()
        print(
            f"error: {exp_dir}: in use by a run that is still going ({holder}); let it finish or stop it "
            "(Ctrl-C, or kill -INT its pid), or pass another --experiment",
            file=sys.stderr,
        )
        raise SystemExit(2) from None
    lock.seek(0)
    lock.truncate()
    lock.write(f"driver pid {os.getpid()} on {socket.gethostname()}\n")
    lock.flush()
    _held[exp_dir] = lock


@contextlib.contextmanager
def released_at_end() -> Iterator[None]:
    """The run directories this block's run takes (hold_run_dir) are free again when it ends, however it ends:
    for a process that goes on after its run (appo.train from Python, a test running several)."""
    before = set(_held)
    try:
        yield
    finally:
        for exp_dir in set(_held) - before:
            _held.pop(exp_dir).close()  # closing the file drops the lock
