"""End-to-end runs of train_appo.py as real processes with tiny budgets: the files a run leaves, resume,
process names, serial mode, Ctrl-C, and bad input. Summaries are read back with tensorboard's reader."""

from __future__ import annotations

import json
import os
import re
import signal
import sys
import time
from pathlib import Path

import psutil
import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from appo.learning.checkpoint import list_checkpoints
from tests.conftest import _kill_group, live_children, run_script, spawn

FAST = ["--env=CartPole-v1", "--rollout=16", "--batch_size=256", "--num_envs_per_worker=4", "--report_interval=1"]
LAG_TAGS = ("perf/policy_lag_max", "perf/dropped_trajectories")
TAGS = [
    "episode/return_mean",
    "episode/length_mean",
    "perf/fps",
    "perf/policy_lag_avg",
    "perf/policy_lag_max",
    "train/policy_loss",
    "train/value_loss",
    "train/entropy",
    "train/kl",
    "train/learning_rate",
]


def scalars(summary_dir: Path) -> EventAccumulator:
    acc = EventAccumulator(str(summary_dir), size_guidance={"scalars": 0})
    acc.Reload()
    return acc


@pytest.mark.slow
def test_run_leaves_everything_and_resumes(train_dir):
    args = [*FAST, f"--train_dir={train_dir}", "--experiment=cp", "--num_workers=2"]
    first = run_script("train_appo.py", [*args, "--train_for_env_steps=20000"], check=True)
    exp = train_dir / "cp"
    assert json.loads((exp / "cfg.json").read_text())["rollout"] == 16
    assert "stopping: reached 20000 env steps" in (exp / "log.txt").read_text()
    ckpts = list_checkpoints(exp / "checkpoint_p0")
    assert ckpts, first.stdout[-3000:]
    state = torch.load(ckpts[-1], weights_only=True)
    assert state["env_steps"] >= 20000 and state["version"] > 0
    acc = scalars(exp / "summaries" / "0")
    missing = [t for t in TAGS if t not in acc.Tags()["scalars"]]
    assert not missing, f"missing summaries {missing}"
    assert max(e.step for e in acc.Scalars("perf/fps")) >= 10000  # x-axis is env steps
    first_counts = [e.value for e in acc.Scalars("episode/count")]
    first_fps = [e.value for e in acc.Scalars("perf/fps")]
    first_versions = len(acc.Scalars("train/version"))

    # The same command with a larger budget continues from the checkpoint instead of starting over (evaluating
    # every 8,000 steps from here on: the next multiple past the checkpoint first, not the checkpoint's weights again).
    run_script("train_appo.py", [*args, "--train_for_env_steps=40000", "--eval_interval=8000"], check=True)
    log_text = (exp / "log.txt").read_text()
    assert f"resumed from {ckpts[-1]}" in log_text
    resumed = torch.load(list_checkpoints(exp / "checkpoint_p0")[-1], weights_only=True)
    assert resumed["env_steps"] >= 40000 and resumed["version"] > state["version"]
    # ... and so do its curves: the episode window and count go on from the first session's (episode_window.json),
    # written from the checkpoint's env steps on, and the FPS counts only this session's steps.
    acc = scalars(exp / "summaries" / "0")
    counts = acc.Scalars("episode/count")
    later = counts[len(first_counts) :]
    assert later and min(e.step for e in later) >= state["env_steps"], [(e.step, e.value) for e in later[:3]]
    # (Its first report may come before any episode of the new session ends: the count holds there, then grows.)
    assert later[0].value >= first_counts[-1] and later[-1].value > first_counts[-1], (
        first_counts[-3:],
        [e.value for e in later[:3]],
    )
    assert max(e.value for e in acc.Scalars("perf/fps")) < 20 * max(first_fps)
    # Every row of the resumed session sits at or past the checkpoint's env steps: none at 0 before the learner's
    # first report (a curve that jumps back to the origin).
    for tag in ("train/version", "stats/worker_restarts"):
        steps = [e.step for e in acc.Scalars(tag)][first_versions:]
        assert steps and min(steps) >= state["env_steps"], (tag, steps[:3])
    evals = [e.step for e in acc.Scalars("eval/return_mean")]
    assert evals and min(evals) > state["env_steps"] and len(set(evals)) == len(evals), (state["env_steps"], evals)
    # The resumed actors act with the checkpoint's weights from their first step (the run's stores are filled from
    # it before any process starts), not with fresh ones until the learner has published: no trajectory is
    # trained on (or dropped) as the checkpoint's number of versions stale.
    after = {tag: [(e.step, e.value) for e in acc.Scalars(tag) if e.step >= state["env_steps"]] for tag in LAG_TAGS}
    assert all(after.values()) and max(v for _, v in after["perf/policy_lag_max"]) < state["version"] / 2, after
    assert max(v for _, v in after["perf/dropped_trajectories"]) == 0, after

    # The same command once more: the budget is spent, so nothing starts and nothing changes (it used to train one
    # more iteration and replace the final checkpoint).
    files = {f: f.stat().st_mtime_ns for f in exp.rglob("*") if f.is_file() and f.parent.name != exp.name}
    again = run_script("train_appo.py", [*args, "--train_for_env_steps=40000"], check=True)
    log_text = (exp / "log.txt").read_text()
    assert "nothing to train: the run's checkpoints have reached 40000 env steps" in log_text, again.stdout[-2000:]
    assert log_text.count("resumed from") == 1 and log_text.count("experiment cp: env") == 2, log_text[-2000:]
    assert {f: f.stat().st_mtime_ns for f in exp.rglob("*") if f.is_file() and f.parent.name != exp.name} == files


@pytest.mark.slow
def test_synchronous_lag_is_zero_and_collect_ahead_at_most_one(train_dir):
    """Synchronous PPO trains every sample with the weights that collected it; with --collect_ahead the actors
    fill the next iteration while the learner trains, one version behind at most. The learner takes 16 epochs over
    each iteration, long against stepping CartPole even when another test loads the machine (with one epoch the
    learner could finish before the actors stepped once), so some samples are exactly one version old."""
    lags = {}
    slow_learner = ["--num_epochs=16"]
    for name, extra in (("sync", slow_learner), ("ahead", ["--collect_ahead=True", *slow_learner])):
        args = [*FAST, f"--train_dir={train_dir}", f"--experiment={name}", "--num_workers=2", "--async_rl=False"]
        run_script("train_appo.py", [*args, *extra, "--train_for_env_steps=30000"], check=True)
        acc = scalars(train_dir / name / "summaries" / "0")
        lags[name] = [e.value for e in acc.Scalars("perf/policy_lag_max")], acc.Scalars("perf/policy_lag_avg")
    assert lags["sync"][0] and max(lags["sync"][0]) == 0
    assert lags["ahead"][0] and max(lags["ahead"][0]) == 1
    assert max(e.value for e in lags["ahead"][1]) > 0


def test_serial_mode_trains_and_checkpoints(train_dir):
    run_script(
        "train_appo.py",
        [*FAST, f"--train_dir={train_dir}", "--experiment=s", "--serial_mode", "--train_for_env_steps=8000"],
        check=True,
    )
    state = torch.load(list_checkpoints(train_dir / "s" / "checkpoint_p0")[-1], weights_only=True)
    assert state["env_steps"] >= 8000


def test_a_serial_run_counts_the_episodes_of_its_last_second(train_dir):
    # 50-step episodes (the env's render plays no part): the envs finish at least 4 * (S / 4 // 50) episodes in S
    # trained steps; a report of the actors comes at most once a second, so those of the run's last second reach
    # the final summary only through the report forced at the stop.
    env = "--env=tests.support.faulty_envs:NoFrameEnv"
    flags = [env, "--rollout=16", "--batch_size=256", "--num_envs_per_worker=4", "--num_workers=1", "--serial_mode"]
    run_script("train_appo.py", [*flags, f"--train_dir={train_dir}", "--experiment=e", "--train_for_env_steps=4000"])
    trained = torch.load(list_checkpoints(train_dir / "e" / "checkpoint_p0")[-1], weights_only=True)["env_steps"]
    counts = [e.value for e in scalars(train_dir / "e" / "summaries" / "0").Scalars("episode/count")]
    assert counts[-1] >= 4 * (trained // 4 // 50), (counts, trained)


def test_train_for_iterations_stops_at_that_version(train_dir):
    result = run_script(
        "train_appo.py",
        [*FAST, f"--train_dir={train_dir}", "--experiment=it", "--serial_mode", "--train_for_iterations=3"],
        check=True,
    )
    assert "stopping: reached 3 iterations (train/version)" in result.stdout, result.stdout[-2000:]
    state = torch.load(list_checkpoints(train_dir / "it" / "checkpoint_p0")[-1], weights_only=True)
    # The driver stops at the first report at or past version 3 (a round of serial mode may train twice).
    assert 3 <= state["version"] <= 4, state["version"]


def _titles(root: psutil.Process) -> set[str]:
    out = set()
    for p in [root, *root.children(recursive=True)]:
        try:
            out.add(" ".join(p.cmdline()))
        except psutil.Error:
            pass
    return out


def test_process_names_and_ctrl_c(train_dir):
    """Every process names itself; SIGINT stops all of them, saves, and exits 0."""
    proc = spawn(
        [
            sys.executable,
            "train_appo.py",
            *FAST,
            f"--train_dir={train_dir}",
            "--experiment=names",
            "--num_workers=2",
            "--actor_inference=False",  # a policy worker process too
            "--train_for_seconds=120",
        ]
    )
    try:
        expected = {
            f"appo:names:{n}" for n in ("driver", "actor_worker_0", "actor_worker_1", "policy_worker_0_0", "learner_0")
        }
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            titles = _titles(psutil.Process(proc.pid))
            if expected <= {t.strip() for t in titles} and list((train_dir / "names" / "summaries").glob("0/*")):
                break
            time.sleep(0.5)
        assert expected <= {t.strip() for t in titles}, titles
        os.kill(proc.pid, signal.SIGINT)
        out, _ = proc.communicate(timeout=30)
        assert proc.returncode == 0, out[-3000:]
        assert "stopping: signal 2" in out
        assert list_checkpoints(train_dir / "names" / "checkpoint_p0")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        assert not _kill_group(proc.pid), "orphans left after SIGINT"


def test_unknown_env_is_one_line_exit_2(train_dir):
    result = run_script("train_appo.py", ["--env=NoSuchEnv-v9", f"--train_dir={train_dir}"])
    assert result.returncode == 2
    lines = [line for line in result.stdout.splitlines() if line.strip()]
    assert lines == [lines[0]] and lines[0].startswith("error: --env=NoSuchEnv-v9")
    assert not train_dir.exists()


@pytest.mark.mujoco
@pytest.mark.slow
def test_sixteen_workers_oversubscribed(train_dir):
    """16 actor workers on 2 cores: slower, but correct, and a clean exit with everything written."""
    # Unique per test run: the leftover check below looks for this name machine-wide, where others may train too.
    experiment = f"w16_{os.getpid()}"
    run_script(
        "train_appo.py",
        [
            "--env=HalfCheetah-v5",
            f"--train_dir={train_dir}",
            f"--experiment={experiment}",
            "--num_workers=16",
            "--train_for_seconds=40",
            "--report_interval=2",
        ],
        timeout=170,
        check=True,
    )
    exp = train_dir / experiment
    log_text = (exp / "log.txt").read_text()
    assert "stopping: ran 40 s" in log_text  # the time budget ended it, not a failure or a stall
    # Every actor worker stepped its envs: each logs its time profile on exit (more than once if restarted).
    env_step_seconds: dict[int, float] = {}
    for worker, profile in re.findall(r"actor worker (\d+) profile: (.*)", log_text):
        step = re.search(r"\benv_step=([\d.]+)s", profile)
        env_step_seconds[int(worker)] = env_step_seconds.get(int(worker), 0.0) + (float(step[1]) if step else 0.0)
    assert sorted(env_step_seconds) == list(range(16)), env_step_seconds
    idle = [w for w, seconds in env_step_seconds.items() if seconds <= 0]
    assert not idle, f"actor workers that never stepped an env: {idle}"
    # At least one rollout of every env (16 workers x 16 envs x 64 steps, MuJoCo preset) was trained on.
    state = torch.load(list_checkpoints(exp / "checkpoint_p0")[-1], weights_only=True)
    assert state["env_steps"] >= 16 * 16 * 64 and state["version"] > 0, (state["env_steps"], state["version"])
    acc = scalars(exp / "summaries" / "0")
    assert acc.Scalars("perf/fps")[-1].value > 0
    # No process of the run is left: not under this test runner, nor orphaned elsewhere under its title.
    assert not live_children()
    titles = []
    for proc in psutil.process_iter():
        try:
            titles.append(" ".join(proc.cmdline()))
        except psutil.Error:
            continue
    assert not [t for t in titles if t.startswith(f"appo:{experiment}:")]
