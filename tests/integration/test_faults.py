"""Fault tolerance with real processes: workers killed with SIGKILL, envs that raise or hang, SIGTERM,
a learner killed mid-run and a torn newest checkpoint, each followed by what a user would see."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from appo.learning.checkpoint import list_checkpoints
from tests.conftest import ROOT, _kill_group, run_script

FAST = [
    "--env=CartPole-v1",
    "--num_workers=2",
    "--num_envs_per_worker=4",
    "--rollout=16",
    "--batch_size=256",
    "--report_interval=1",
    "--save_every_sec=2",
]


def start(args: list[str], env: dict | None = None, preexec_fn: Any = None) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "train_appo.py", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
        env={**os.environ, **(env or {})},
        preexec_fn=preexec_fn,
    )


def find(proc: subprocess.Popen, title: str, timeout: float = 60, exact: bool = False) -> psutil.Process:
    """The process titled `title` (the whole title where `exact`: learner_0 is a prefix of learner_0_rank1) among
    `proc`'s descendants (not another run's of the same name: test sessions may share the machine)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            descendants = psutil.Process(proc.pid).children(recursive=True)
        except psutil.Error:
            descendants = []
        for p in descendants:
            try:
                name = " ".join(p.cmdline()).strip()
                if name == title or (not exact and title in name):
                    return p
            except psutil.Error:
                continue
        time.sleep(0.2)
    raise AssertionError(f"no process {title}")


def steps_in(log: Path) -> int:
    """Env steps on the run's last status line; 0 before the first (or before the log exists)."""
    found = re.findall(r"INFO steps (\d+)", log.read_text() if log.exists() else "")
    return int(found[-1]) if found else 0


def wait_for_steps_above(log: Path, steps: int, timeout: float = 40) -> bool:
    """Whether the run's status line shows more than `steps` env steps within `timeout` seconds (start-up and a
    restarted worker's own start take seconds, more on a loaded machine)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if steps_in(log) > steps:
            return True
        time.sleep(0.3)
    return steps_in(log) > steps


def finish(proc: subprocess.Popen, timeout: float = 90) -> str:
    try:
        out, _ = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        orphans = _kill_group(proc.pid)
    assert not orphans, f"orphans: {orphans}"
    return out


def wait_for_checkpoints(ckpt_dir: Path, count: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while len(list_checkpoints(ckpt_dir)) < count:
        assert time.monotonic() < deadline, f"fewer than {count} checkpoints written in {ckpt_dir}"
        time.sleep(0.3)


def _wait_for(log: Path, text: str, timeout: float = 40) -> None:
    deadline = time.monotonic() + timeout
    while text not in (log.read_text() if log.exists() else ""):
        assert time.monotonic() < deadline, f"never saw {text!r}"
        time.sleep(0.3)


@pytest.mark.slow
def test_killed_actor_then_policy_worker_are_replaced_and_the_run_reaches_its_target(train_dir):
    # Both kills come early (at 4k and 8k env steps in a run here): 100k leaves the run ten times that to go on.
    target = 100_000
    args = [*FAST, f"--train_dir={train_dir}", "--experiment=k", f"--train_for_env_steps={target}"]
    proc = start([*args, "--actor_inference=False"])  # policy worker processes
    log = train_dir / "k" / "log.txt"
    assert wait_for_steps_above(log, 0), "training never began"
    find(proc, "appo:k:actor_worker_0").kill()
    _wait_for(log, "actor_worker_0 killed by signal 9: starting it again")
    before = steps_in(log)
    assert wait_for_steps_above(log, before), "training did not go on after the actor worker's restart"
    find(proc, "appo:k:policy_worker_0_0").kill()
    _wait_for(log, "policy_worker_0_0 killed by signal 9: starting it again")
    out = finish(proc, timeout=150)
    assert proc.returncode == 0, out[-3000:]
    assert f"stopping: reached {target} env steps" in log.read_text()
    acc = EventAccumulator(str(train_dir / "k" / "summaries" / "0"), size_guidance={"scalars": 0})
    acc.Reload()
    # Two kills, two restarts; a third is allowed: an actor worker blocked writing to the dead policy worker's
    # old queue is caught by its heartbeat and replaced as well.
    assert acc.Scalars("stats/worker_restarts")[-1].value in (2, 3)


@pytest.mark.slow
def test_a_frozen_policy_worker_is_found_by_its_heartbeat_and_replaced(train_dir):
    """SIGSTOP: alive but silent, as a policy worker blocked for good inside its request queue would be."""
    args = [*FAST, f"--train_dir={train_dir}", "--experiment=frozen", "--train_for_env_steps=150000"]
    proc = start([*args, "--worker_stuck_timeout=5", "--actor_inference=False"])
    log = train_dir / "frozen" / "log.txt"
    # Frozen once it has served (and so stamped its heartbeat): one frozen before its first beat is the start
    # timeout's case (--worker_start_timeout), not this one's.
    assert wait_for_steps_above(log, 2000, timeout=60), "training never began"
    frozen = find(proc, "appo:frozen:policy_worker_0_0")
    frozen.suspend()
    _wait_for(log, "policy_worker_0_0 silent for over 5 s: starting it again", timeout=60)
    out = finish(proc, timeout=150)
    assert proc.returncode == 0, out[-3000:]
    assert "stopping: reached 150000 env steps" in log.read_text()
    assert not frozen.is_running() or frozen.status() == psutil.STATUS_ZOMBIE


def test_env_errors_are_survived_and_logged_once(train_dir):
    run_script(
        "train_appo.py",
        [
            "--env=tests.support.faulty_envs:FlakyEnv",
            *FAST[1:],
            f"--train_dir={train_dir}",
            "--experiment=flaky",
            "--train_for_env_steps=30000",
        ],
        check=True,
    )
    text = (train_dir / "flaky" / "log.txt").read_text()
    assert text.count("flaky env: simulated physics blow-up (env rebuilt, episode dropped)") == 2  # one per worker
    assert "stopping: reached 30000 env steps" in text


def test_env_failing_every_step_fails_the_run_clearly(train_dir):
    result = run_script(
        "train_appo.py",
        [
            "--env=tests.support.faulty_envs:BrokenEnv",
            *FAST[1:],
            f"--train_dir={train_dir}",
            "--experiment=broken",
            "--max_env_errors=3",
        ],
    )
    assert result.returncode == 1
    assert "failed 4 times in a row (--max_env_errors=3); last error: ValueError: broken env" in result.stdout


# Alone (tests/conftest.py, `turn`): the engine sizes its start allowances by its own processes over the machine's
# cores; a test beside it in the other xdist worker would take a share of the cores it does not know about.
@pytest.mark.alone
@pytest.mark.parametrize(
    ("env", "timeout_flag", "replaced", "seconds"),
    [
        # Hangs in step after 200 steps: the heartbeat goes stale.
        ("HangOnceEnv", "--worker_stuck_timeout=4", r"silent for over 4 s", 22),
        # Hangs while an actor builds it: no start-up progress after its imports (the start allowance is
        # --worker_start_timeout x 3 processes / 2 cores here: 15 s).
        ("HangAtStartOnceEnv", "--worker_start_timeout=10", r"starting, without progress \d+ s after its .+", 28),
    ],
    ids=["in_step", "at_start"],
)
@pytest.mark.slow
def test_hanging_env_worker_is_replaced(train_dir, tmp_path, env, timeout_flag, replaced, seconds):
    flag = tmp_path / "hung"
    args = [f"--env=tests.support.faulty_envs:{env}", *FAST[1:], f"--train_dir={train_dir}", "--experiment=hang"]
    proc = start([*args, timeout_flag, f"--train_for_seconds={seconds}"], env={"APPO_TEST_HANG_FLAG": str(flag)})
    out = finish(proc, timeout=150)
    assert proc.returncode == 0, out[-3000:]
    assert flag.exists()
    text = (train_dir / "hang" / "log.txt").read_text()
    assert re.search(rf"actor_worker_\d {replaced}: starting it again", text), text[-2000:]


@pytest.mark.alone  # as above
@pytest.mark.slow
def test_a_slow_start_is_not_a_hang(train_dir):
    """Regression: on a slow machine no actor worker of the design card's command sent a first heartbeat within
    --worker_start_timeout, so all were restarted, again and again, and the run trained nothing. Workers whose envs
    take 4 s each to build (16 s for 4) against --worker_start_timeout=8 (an allowance of 12 s between signs of
    progress here: 3 processes on 2 cores): progress during the start keeps them; the run trains, nothing is
    restarted."""
    args = ["--env=tests.support.faulty_envs:SlowStartEnv", *FAST[1:], f"--train_dir={train_dir}", "--experiment=slow"]
    proc = start([*args, "--worker_start_timeout=8", "--train_for_env_steps=3000"], env={"APPO_TEST_SLOW_ENV": "4"})
    out = finish(proc, timeout=150)
    assert proc.returncode == 0, out[-3000:]
    text = (train_dir / "slow" / "log.txt").read_text()
    assert "starting it again" not in text, text[-3000:]
    assert list((train_dir / "slow" / "checkpoint_p0").glob("*.pth")), text[-3000:]


@pytest.mark.slow
def test_sigterm_saves_and_exits_143(train_dir):
    proc = start([*FAST, f"--train_dir={train_dir}", "--experiment=term", "--train_for_seconds=120"])
    log = train_dir / "term" / "log.txt"
    deadline = time.monotonic() + 60
    while (steps_in(log) if log.exists() else 0) < 2000:
        assert time.monotonic() < deadline
        time.sleep(0.5)
    started = time.monotonic()
    os.kill(proc.pid, signal.SIGTERM)
    out = finish(proc, timeout=30)
    assert proc.returncode == 143, out[-3000:]
    assert time.monotonic() - started < 15
    assert list_checkpoints(train_dir / "term" / "checkpoint_p0")


def test_sigterm_to_the_whole_process_group_is_one_orderly_stop(train_dir):
    """As `timeout`, `kill -- -PGID` or a batch scheduler send it: every process of the run gets SIGTERM. The
    children leave the stop to the driver: nothing is restarted, the learner saves, the evaluator still gives
    its last evaluation, and the run ends promptly."""
    args = [*FAST, f"--train_dir={train_dir}", "--experiment=group", "--train_for_seconds=120"]
    proc = start([*args, "--eval_interval=4000", "--eval_episodes=2"])
    log = train_dir / "group" / "log.txt"
    assert wait_for_steps_above(log, 2000, timeout=60), log.read_text()[-2000:] if log.exists() else "no log"
    find(proc, "appo:group:evaluator")
    started = time.monotonic()
    os.killpg(proc.pid, signal.SIGTERM)
    out = finish(proc, timeout=90)
    text = log.read_text()
    assert proc.returncode == 143, out[-3000:]
    assert time.monotonic() - started < 40, text[-3000:]
    assert "starting it again" not in text and "killed by signal" not in text, text[-3000:]
    assert "the evaluator is gone" not in text, text[-3000:]
    assert list_checkpoints(train_dir / "group" / "checkpoint_p0")


@pytest.mark.slow
def test_killed_learner_stops_the_run_and_the_rerun_resumes(train_dir):
    args = [*FAST, f"--train_dir={train_dir}", "--experiment=lr", "--train_for_env_steps=400000"]
    proc = start(args)
    ckpt_dir = train_dir / "lr" / "checkpoint_p0"
    wait_for_checkpoints(ckpt_dir, 2)
    find(proc, "appo:lr:learner_0").kill()
    out = finish(proc)
    assert proc.returncode == 1, out[-3000:]
    assert "learner_0 died (signal 9)" in out
    # A torn newest checkpoint (a crash mid-write of a non-atomic copy, a full disk) is skipped on resume.
    newest = list_checkpoints(ckpt_dir)[-1]
    previous = torch.load(list_checkpoints(ckpt_dir)[-2], weights_only=True)
    newest.write_bytes(newest.read_bytes()[:100])
    rerun = run_script(
        "train_appo.py", [*args[:-1], f"--train_for_env_steps={previous['env_steps'] + 20000}"], check=True
    )
    assert f"{newest.name}" in rerun.stdout and "resumed from" in rerun.stdout
    resumed = re.search(r"resumed from \S+ \(version (\d+), (\d+) env steps\)", rerun.stdout)
    assert int(resumed.group(1)) == previous["version"]


def test_nan_losses_are_skipped_then_stop_the_run_with_finite_checkpoints(train_dir):
    result = run_script(
        "train_appo.py",
        [
            "--env=tests.support.faulty_envs:NanRewardEnv",
            *FAST[1:],
            f"--train_dir={train_dir}",
            "--experiment=nan",
            "--with_vtrace=False",
        ],
    )
    assert result.returncode == 1, result.stdout[-3000:]
    assert "skipped an update with loss nan" in result.stdout
    assert "10 updates in a row with NaN/inf loss or gradients" in result.stdout
    for path in list_checkpoints(train_dir / "nan" / "checkpoint_p0"):
        state = torch.load(path, weights_only=True)
        assert all(torch.isfinite(v).all() for v in state["model"].values() if v.is_floating_point())


@pytest.mark.slow
def test_driver_killed_9_leaves_no_orphans_and_the_rerun_resumes(train_dir):
    args = [*FAST, f"--train_dir={train_dir}", "--experiment=d9", "--train_for_env_steps=2000000"]
    proc = start(args)
    ckpt_dir = train_dir / "d9" / "checkpoint_p0"
    wait_for_checkpoints(ckpt_dir, 2)
    children = psutil.Process(proc.pid).children(recursive=True)
    proc.kill()
    proc.communicate()
    gone, alive = psutil.wait_procs(children, timeout=10)
    assert not [p for p in alive if "appo:d9" in " ".join(p.cmdline())], "workers outlived their driver"
    assert not _kill_group(proc.pid)
    saved = torch.load(list_checkpoints(ckpt_dir)[-1], weights_only=True)
    rerun = run_script("train_appo.py", [*args[:-1], f"--train_for_env_steps={saved['env_steps'] + 10000}"], check=True)
    resumed = re.search(r"resumed from \S+ \(version (\d+), (\d+) env steps\)", rerun.stdout)
    assert int(resumed.group(2)) == saved["env_steps"]  # env steps continue, not restart


def test_checkpoint_that_does_not_fit_the_model_is_refused_before_starting(train_dir):
    args = [*FAST, f"--train_dir={train_dir}", "--experiment=fit", "--train_for_env_steps=5000"]
    run_script("train_appo.py", args, check=True)
    cfg_before = (train_dir / "fit" / "cfg.json").read_text()
    result = run_script("train_appo.py", [*args, "--encoder_mlp_layers", "32"])
    assert result.returncode == 2
    lines = [line for line in result.stdout.splitlines() if line.strip()]
    assert len(lines) == 1 and "does not fit the model of this cfg" in lines[0] and "size mismatch" in lines[0]
    assert (train_dir / "fit" / "cfg.json").read_text() == cfg_before  # nothing on disk touched


def test_a_run_whose_checkpoints_all_fail_to_load_is_refused_not_restarted(train_dir):
    """Starting afresh would overwrite the best checkpoint with a fresh policy's and prune the old ones as the new
    versions pass them: the rerun stops with one line naming the folder, and every file stays as it was."""
    args = [*FAST, f"--train_dir={train_dir}", "--experiment=unreadable", "--train_for_env_steps=5000"]
    run_script("train_appo.py", args, check=True)
    ckpt_dir = train_dir / "unreadable" / "checkpoint_p0"
    for path in list_checkpoints(ckpt_dir):
        path.write_bytes(path.read_bytes()[:1000])  # truncated, as a full disk leaves them
    before = {p.name: p.read_bytes() for p in ckpt_dir.iterdir()}
    result = run_script("train_appo.py", [*args[:-1], "--train_for_env_steps=10000"])
    assert result.returncode == 2, result.stdout[-2000:]
    lines = [line for line in result.stdout.splitlines() if line.startswith("error:")]
    assert len(lines) == 1 and str(ckpt_dir) in lines[0] and "none of its" in lines[0], result.stdout[-2000:]
    assert {p.name: p.read_bytes() for p in ckpt_dir.iterdir()} == before
