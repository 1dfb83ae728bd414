"""An env whose module takes a lock at import and keeps it, as a simulator that allows one instance per machine
might: the process that imports it first (the driver of a run, or `python -m appo.check_env`) builds it, any other
process (a run's actor workers) cannot import it. The lock is on the file $APPO_TEST_LOCK (tests give each run a
file of its own); used as --env=tests.support.locked_env:LockedEnv."""

from __future__ import annotations

import fcntl
import os
import tempfile

from tests.support.odd_envs import GoodEnv

LOCK_PATH = os.environ.get("APPO_TEST_LOCK") or os.path.join(tempfile.gettempdir(), "appo-locked-env.lock")
_held = open(LOCK_PATH, "a")  # held for the life of the process
try:
    fcntl.flock(_held, fcntl.LOCK_EX | fcntl.LOCK_NB)
except BlockingIOError:
    _held.close()
    raise RuntimeError(f"{LOCK_PATH} is held by another process: one simulator per machine") from None


class LockedEnv(GoodEnv):
    """GoodEnv (tests/support/odd_envs.py), in this module."""
