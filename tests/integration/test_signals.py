"""Ctrl-C at any moment of a run's life: SIGINT 1, 5, 10 and 30 s after the start of a local and of a
`--backend=ray` run (start-up, Ray still starting, training), and while the run saves its final checkpoint. Each
must exit within 15 s of the signal, leave no process of the run and no Ray process behind, and nothing new in
/dev/shm (as seen: a Ray run interrupted while starting its actors left 7 processes and 4 Ray processes; a local
run SIGTERMed while its workers started took over 15 s)."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from tests.conftest import _kill_group, shm_entries, shm_leaked
from tests.integration.test_faults import start
from tests.support.ray_cluster import RayWatch, needs_ray

EXIT_WITHIN = 15.0
RUN = [
    "--env=CartPole-v1",
    "--num_workers=2",
    "--num_envs_per_worker=4",
    "--rollout=16",
    "--report_interval=1",
    "--train_for_seconds=600",
]


class Run:
    """train_appo.py in a session of its own, its output read line by line as it comes."""

    def __init__(self, args: list[str], preexec_fn: Any = None, env: dict[str, str] | None = None) -> None:
        self.proc = start(args, env=env, preexec_fn=preexec_fn)  # train_appo.py in a session of its own, output piped
        self.started = time.monotonic()
        self.lines: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)

    def wait_for(self, text: str, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.proc.poll() is None:
            if any(text in line for line in self.lines):
                return True
            time.sleep(0.02)
        return any(text in line for line in self.lines)

    def descendants(self) -> list[psutil.Process]:
        try:
            return psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.Error:
            return []

    def interrupt(self, group: bool = False) -> tuple[float, list[str]]:
        """SIGINT to the driver (or, `group`, to its whole process group, as a terminal's Ctrl-C); returns (seconds
        to its exit, processes of the run still alive after it)."""
        processes = self.descendants()
        if group:
            os.killpg(self.proc.pid, signal.SIGINT)
        else:
            self.proc.send_signal(signal.SIGINT)
        sent = time.monotonic()
        try:
            self.proc.wait(timeout=60)
        finally:
            took = time.monotonic() - sent
            if self.proc.poll() is None:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.reader.join(5)
        time.sleep(0.5)
        alive = []
        for p in processes:
            try:
                if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                    alive.append(f"{p.pid} {' '.join(p.cmdline())[:80]}")
                    p.kill()
            except psutil.Error:
                continue
        return took, alive + _kill_group(self.proc.pid)

    def output(self) -> str:
        return "".join(self.lines)[-3000:]


def interrupt_at(args: list[str], moment: float | str, timeout: float = 120.0, group: bool = False) -> int:
    """Start a run, SIGINT it `moment` seconds after its start (or once a line holding `moment` is printed), and
    check what a user would: a prompt exit, nothing left behind. Returns the run's exit status."""
    shm_before, ray = shm_entries(), RayWatch()  # the run's own Ray processes, not another test's
    run = Run(args, env=ray.env)
    try:
        if isinstance(moment, str):
            assert run.wait_for(moment, timeout), f"never printed {moment!r}:\n{run.output()}"
        else:
            time.sleep(max(0.0, moment - (time.monotonic() - run.started)))
        assert run.proc.poll() is None, f"the run ended before the signal:\n{run.output()}"
        if "ray: private instance" in run.output():
            assert ray.look(), f"the run's Ray is up, yet none of its processes was found:\n{run.output()}"
        took, left = run.interrupt(group)
    finally:
        if run.proc.poll() is None:
            os.killpg(run.proc.pid, signal.SIGKILL)
    assert took < EXIT_WITHIN, f"exit {took:.1f} s after SIGINT at {moment}:\n{run.output()}"
    assert not left, f"left behind after SIGINT at {moment}: {left}\n{run.output()}"
    # Ray's workers exit when they find their raylet gone: 30 s for that, and the stragglers named if they stay.
    deadline = time.monotonic() + 30
    while (shm_leaked(shm_before) or ray.alive()) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not (leaked := shm_leaked(shm_before)), f"/dev/shm after SIGINT at {moment}: {sorted(leaked)}"
    assert not (left := ray.alive()), f"Ray processes 30 s after SIGINT at {moment}: {left}\n{run.output()}"
    return run.proc.returncode


# Four workers whose 8 envs take 2 s each to build: until about 16 s after the start every worker is still
# building its envs (and ignores SIGTERM: the driver owns it), as on a slow machine.
SLOW_START = ["--env=tests.support.faulty_envs:SlowStartEnv", "--num_workers=4", "--num_envs_per_worker=8"]


@pytest.mark.parametrize("moment", [1.0, 5.0, 10.0, 30.0])
@pytest.mark.slow
def test_sigint_at_any_moment_of_a_local_run(train_dir: Path, moment: float, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("APPO_TEST_SLOW_ENV", "2")
    interrupt_at([*RUN, *SLOW_START, f"--train_dir={train_dir}", "--experiment=sigint"], moment)


def components(run: Run) -> list[psutil.Process]:
    """The run's own component processes (spawned by start_process): `spawn_main` while they start, their
    `appo:<experiment>:<role>` title once set. Not multiprocessing's resource tracker (which starts with the first
    shared memory or in start_process before the first child), nor the short-lived forks the driver makes while
    it imports (a subprocess between fork and exec, titled as the driver: CI has seen one, gone again
    before the check after the wait)."""
    found = []
    for p in run.descendants():
        try:
            cmdline = " ".join(p.cmdline())
        except psutil.Error:
            continue
        title = cmdline.strip()
        if "spawn_main" in cmdline or (title.startswith("appo:") and not title.endswith(":driver")):
            found.append(p)
    return found


MAML = ["--algo=maml_trpo", "--env=navigation2d", "--num_workers=2", "--train_for_seconds=600"]


@pytest.mark.timeout(300)
@pytest.mark.parametrize("algo", ["appo", "maml_trpo"])
def test_ctrl_c_to_the_whole_group_as_the_children_start(train_dir: Path, algo: str) -> None:
    """A terminal's Ctrl-C goes to every process of the group, children still importing included (before their
    component_main ignores SIGINT): sent the moment the driver's first component process exists. The driver alone must
    decide: an orderly stop, exit 0, nothing left behind (a MAML run's Hessian-vector helpers died of it while
    importing torch, and the run exited 1). (Earlier, while the driver itself still imports, Ctrl-C ends it as
    any Python program.)"""
    args = [*(RUN if algo == "appo" else MAML), f"--train_dir={train_dir}", "--experiment=group"]
    shm_before = shm_entries()
    run = Run(args)
    try:
        # On a loaded 2-core machine the first child can be slow to appear (in CI on a slow day the MAML run
        # had no child and had printed nothing when a 60 s wait ended). The wait only finds the moment to send the
        # signal, so it is generous; the test's assertions are unchanged.
        deadline = time.monotonic() + 150
        while not (found := components(run)) and run.proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert found, f"no child started:\n{run.output()}"
        took, left = run.interrupt(group=True)
    finally:
        if run.proc.poll() is None:
            os.killpg(run.proc.pid, signal.SIGKILL)
    assert run.proc.returncode == 0, f"exit {run.proc.returncode}:\n{run.output()}"
    assert took < EXIT_WITHIN and not left, (took, left, run.output())
    deadline = time.monotonic() + 10
    while shm_leaked(shm_before) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not (leaked := shm_leaked(shm_before)), sorted(leaked)


def test_sigint_while_the_final_checkpoint_is_saved(train_dir: Path) -> None:
    """The run ends by its budget; the signal comes as the driver starts stopping (learners saving)."""
    args = [*RUN[:-1], "--train_for_env_steps=3000", f"--train_dir={train_dir}", "--experiment=final"]
    interrupt_at(args, "stopping: ")
    assert list((train_dir / "final" / "checkpoint_p0").glob("*.pth")), "no checkpoint after a stop by Ctrl-C"


# Alone (tests/conftest.py, `turn`): in a fresh-clone CI run with a test beside it in the other xdist worker, the Ray
# processes of the run interrupted at 10 s were still there 10 s after it exited (not seen alone, nor beside three
# busy CPU burners).
@needs_ray
@pytest.mark.alone
@pytest.mark.parametrize("moment", [1.0, 5.0, 10.0, 30.0])
@pytest.mark.slow
def test_sigint_at_any_moment_of_a_ray_run(train_dir: Path, moment: float) -> None:
    interrupt_at([*RUN, "--backend=ray", f"--train_dir={train_dir}", "--experiment=sigint_ray"], moment)


@pytest.mark.slow
def test_a_run_started_with_sigint_blocked_still_stops_on_it(train_dir: Path) -> None:
    """As a sweep's run on Ray starts: Ray's worker processes block SIGINT and the runs they start inherit the mask
    across exec. The run unblocks it: a Ctrl-C stops it as any other (before, it trained on)."""
    run = Run([*RUN, f"--train_dir={train_dir}", "--experiment=blocked"], preexec_fn=_block_sigint)
    try:
        assert run.wait_for("FPS", 120), f"never trained:\n{run.output()}"
        took, left = run.interrupt()
    finally:
        if run.proc.poll() is None:
            os.killpg(run.proc.pid, signal.SIGKILL)
    assert run.proc.returncode == 0, f"exit {run.proc.returncode}:\n{run.output()}"
    assert took < EXIT_WITHIN and not left, (took, left, run.output())


def _block_sigint() -> None:
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
