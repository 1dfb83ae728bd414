"""Every process of a run is titled `appo:<experiment>:<role>` (what `ps` and `top` show, and what the fault tests
find processes by), whatever order its environment's variables come in. setproctitle finds the process's argv memory
through the first environment variable; gymnasium rewrites PYGAME_HIDE_SUPPORT_PROMPT on import, and a run whose
environment began with it (a Ray sweep's runs, some of the time, in CI) ran with no title at
all, the driver and every process it started, until importing appo set setproctitle up first."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.conftest import ROOT, _kill_group

ROLES = ["driver", "learner_0", "actor_worker_0", "actor_worker_1"]


def titles(pid: int) -> set[str]:
    """The command lines of process `pid` and its descendants."""
    found = set()
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return found
    for p in procs:
        try:
            found.add(" ".join(p.cmdline()).strip())
        except psutil.Error:
            continue
    return found


@pytest.mark.timeout(150)
def test_every_process_is_titled_when_the_environment_begins_with_a_variable_an_import_rewrites(train_dir: Path):
    env = {"PYGAME_HIDE_SUPPORT_PROMPT": "hide", **os.environ}  # first, whatever value the test's environment has
    assert next(iter(env)) == "PYGAME_HIDE_SUPPORT_PROMPT"
    args = ["--env=CartPole-v1", "--num_workers=2", "--train_for_env_steps=100000000", "--save_every_sec=1000"]
    args += [f"--train_dir={train_dir}", "--experiment=titles"]
    log = train_dir.parent / "titles.log"
    train_dir.mkdir(parents=True)
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [sys.executable, str(ROOT / "train_appo.py"), *args],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    expected = {f"appo:titles:{role}" for role in ROLES}
    try:
        deadline = time.monotonic() + 90
        while not expected <= (seen := titles(proc.pid)) and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.5)
        assert expected <= seen, f"titles seen: {sorted(seen)}\n{log.read_text()[-2000:]}"
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=60) == 143, log.read_text()[-3000:]  # stopped cleanly by SIGTERM
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    orphans = _kill_group(proc.pid)
    assert not orphans, f"left behind: {orphans}"
