"""Shared fixtures: a temporary train_dir, a helper that runs train_appo.py as a real subprocess, and an
autouse check that no test leaves child processes or shared-memory files behind.

The suite runs in two pytest-xdist workers (README's test command, `-n 2`): /dev/shm is the machine's, so a leak is
a new entry that no live process holds once the test's own processes are gone (the other worker's running test
holds its entries mapped or open). Tests that look at machine-wide state (Ray's processes) share the xdist group
"ray" (tests/support/ray_cluster.py's `needs_ray`) and so run one after another; tests marked `alone` run with the
other worker waiting (`turn` below)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

ROOT = Path(__file__).resolve().parent.parent

# A test run started in the background by a script (`bash .ci/run &`, nohup) has SIGINT ignored, and every process
# a test starts would inherit that: a Ctrl-C a test sends before the run's driver catches it would be lost. Tests
# start their processes as a terminal would.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def shm_entries() -> set[str]:
    try:
        return set(os.listdir("/dev/shm"))
    except FileNotFoundError:
        return set()


def _shm_held(names: set[str]) -> set[str]:
    """Those of the /dev/shm entries `names` that some live process maps (a named semaphore, an mmapped file) or
    holds open. Matched by inode: glibc's sem_open maps a temporary file that it then links under the name."""
    inodes = {}
    for name in names:
        try:
            inodes[os.stat(f"/dev/shm/{name}").st_ino] = name
        except OSError:
            continue
    held = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/maps") as maps:
                for line in maps:
                    fields = line.split(maxsplit=5)
                    if len(fields) == 6 and fields[5].startswith("/dev/shm/") and int(fields[4]) in inodes:
                        held.add(inodes[int(fields[4])])
            for fd in os.listdir(f"/proc/{pid}/fd"):
                ino = os.stat(f"/proc/{pid}/fd/{fd}").st_ino
                if ino in inodes:
                    held.add(inodes[ino])
        except OSError:  # gone meanwhile, or not ours to read
            continue
    return held


def shm_leaked(before: set[str]) -> set[str]:
    """New /dev/shm entries that no live process holds: left behind, not in use beside this test."""
    new = shm_entries() - before
    return new - _shm_held(new) if new else new


def live_children() -> list[psutil.Process]:
    """Children of this test runner, less Python's own resource tracker (it lives as long as pytest)."""
    out = []
    for child in psutil.Process().children(recursive=True):
        try:
            if child.status() != psutil.STATUS_ZOMBIE and "resource_tracker" not in " ".join(child.cmdline()):
                out.append(child)
        except psutil.Error:
            continue
    return out


def _turn_lock() -> Path | None:
    """The lock file `turn` shares between the workers of one xdist run (None outside xdist)."""
    uid = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    return None if uid is None else Path(tempfile.gettempdir()) / f"appo-tests-{uid}.lock"


def _group_lock(name: str) -> Path | None:
    """The lock file of xdist group `name` in this xdist run (None outside xdist)."""
    turn_lock = _turn_lock()
    return None if turn_lock is None else turn_lock.with_name(f"{turn_lock.stem}-{name}.lock")


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Each worker removes the run's lock files as it finishes: a worker still running opens a new one for its next
    test, which it then removes in turn, so none is left in the temporary folder."""
    lock_path = _turn_lock()
    if lock_path is not None:
        for path in lock_path.parent.glob(f"{lock_path.stem}*.lock"):
            path.unlink(missing_ok=True)


@pytest.fixture
def turn(request: pytest.FixtureRequest):
    """Under pytest-xdist, a test marked `alone` runs with the other worker idle: it holds an exclusive lock on a
    file shared by the run's workers, every other test a shared one. For tests whose timing is the behaviour under
    test (a worker declared stuck after N silent seconds, a start-up allowance): a second test beside them on a
    2-core machine would halve their processes' share of the CPU."""
    lock_path = _turn_lock()
    if lock_path is None:  # one process: every test runs alone already
        yield
        return
    with contextlib.ExitStack() as held:
        # Tests of one xdist group (machine-wide state: Ray's processes, Doom's games) run one at a time whichever
        # worker has them: pytest-xdist's loadgroup was seen to hand one group's tests to both workers. The group's
        # lock is taken before the turn's, in every test, so the two never wait on each other in a circle.
        for mark in request.node.iter_markers("xdist_group"):
            group = held.enter_context(open(_group_lock(str(mark.args[0] if mark.args else "default")), "a"))
            fcntl.flock(group, fcntl.LOCK_EX)
        lock = held.enter_context(open(lock_path, "a"))
        fcntl.flock(lock, fcntl.LOCK_EX if request.node.get_closest_marker("alone") else fcntl.LOCK_SH)
        yield


@pytest.fixture(autouse=True)
def no_leftovers(turn):
    """After each test: no child processes of this test runner, no new /dev/shm entries."""
    before = shm_entries()
    yield
    deadline = time.monotonic() + 10
    children = live_children()
    while children and time.monotonic() < deadline:
        time.sleep(0.1)
        children = live_children()
    leftover = [f"{c.pid} {c.name()}" for c in children]
    for child in children:
        child.kill()
    assert not leftover, f"test left child processes behind: {leftover}"
    # Python's resource tracker unlinks a dead driver's semaphores a moment after it exits: give it time.
    leaked = shm_leaked(before)
    while leaked and time.monotonic() < deadline + 5:
        time.sleep(0.2)
        leaked = shm_leaked(before)
    assert not leaked, f"test left shared memory behind: {sorted(leaked)}"


@pytest.fixture
def one_torch_thread():
    """Torch on one thread for the test, then as it was: for tests of small networks, where more threads only
    add synchronisation (several-fold on a busy 2-core machine)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def train_dir(tmp_path: Path) -> Path:
    return tmp_path / "train_dir"


def _kill_group(pgid: int) -> list[str]:
    """Whatever still runs in process group `pgid` 5 s after its leader ended (orphans); kills them."""
    deadline = time.monotonic() + 5
    while True:
        found = []
        for p in psutil.process_iter(["pid", "cmdline"]):
            try:
                if p.pid != os.getpid() and os.getpgid(p.pid) == pgid and p.status() != psutil.STATUS_ZOMBIE:
                    found.append(p)
            except (psutil.Error, ProcessLookupError):
                continue
        if not found or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    names = []
    for p in found:
        try:
            names.append(f"{p.pid} {' '.join(p.cmdline())[:80]}")
            p.kill()
        except psutil.Error:
            continue
    return names


def ignore_sigint() -> None:
    """A `spawn` preexec_fn: the command starts with SIGINT ignored, as `cmd &` or nohup start it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def spawn(argv: list[str], preexec_fn: Any = None) -> subprocess.Popen:
    """A command in the project's root, in its own session (killable as a group), stdout and stderr as one text pipe."""
    return subprocess.Popen(
        argv,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        preexec_fn=preexec_fn,
    )


def run_script(script: str, args: list[str], timeout: float = 150, check: bool = False) -> subprocess.CompletedProcess:
    """Run one of the project's entry points as users do; kills the whole process group on timeout."""
    proc = spawn([sys.executable, str(ROOT / script), *args])
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        out, _ = proc.communicate()
        raise AssertionError(f"{script} {' '.join(args)} timed out; output:\n{out[-4000:]}") from None
    orphans = _kill_group(proc.pid)
    assert not orphans, f"{script} left processes behind: {orphans}\n{out[-4000:]}"
    result = subprocess.CompletedProcess(proc.args, proc.returncode, out, "")
    if check:
        assert proc.returncode == 0, f"{script} exited {proc.returncode}:\n{out[-4000:]}"
    return result


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Longest first, so that neither xdist worker is left with a long test at the end while the other idles: the
    learning tests (marked slow, minutes each), then the integration tests (real runs), then the unit tests."""

    def rank(item: pytest.Item) -> int:
        if item.get_closest_marker("slow"):
            return 0
        return 1 if "/integration/" in str(item.path) else 2

    items.sort(key=rank)
