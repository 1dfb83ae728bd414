"""`python -m appo.check_env` as users run it: a subprocess started in the checkout's root, real envs, a real spawned
process for the workers' build. A correct env passes with one `ok:` line (exit 0); each env of
tests/support/odd_envs.py, an unknown name and an env whose module imports in one process only
(tests/support/locked_env.py) is reported in exactly one line naming its problem, with exit status 1 and no
traceback; notes do not fail the check."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, _kill_group, run_script

ODD = "tests.support.odd_envs"


def check_env(env: str, *flags: str, environ: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """`python -m appo.check_env --env=ENV --steps=200 FLAGS...` from the checkout's root: its stdout (the lines
    it prints) apart from its stderr (what envs and libraries print there)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "appo.check_env", f"--env={env}", "--steps=200", *flags],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env={**os.environ, **(environ or {})},
    )
    try:
        out, err = proc.communicate(timeout=150)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        out, err = proc.communicate()
        raise AssertionError(f"check_env --env={env} timed out:\n{out}\n{err[-2000:]}") from None
    finally:
        orphans = _kill_group(proc.pid)
    assert not orphans, f"check_env --env={env} left processes behind: {orphans}"
    assert "Traceback" not in out + err, f"check_env --env={env} printed a traceback:\n{out}\n{err}"
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


@pytest.mark.parametrize(
    "env, spaces",
    [
        ("CartPole-v1", "observations Box(float32, (4,)), actions Discrete(2)"),
        (f"{ODD}:GoodEnv", "observations Box(float32, (4,)), actions Discrete(2)"),
        ("tests.support.agent_games:LeaveJoinGame", "3 agents, a row each: observations Box(float32, (4,))"),
    ],
)
def test_a_correct_env_passes_with_one_ok_line(env: str, spaces: str) -> None:
    result = check_env(env)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"ok: --env={env}: "), lines
    assert spaces in lines[0] and "episodes in 200 random steps" in lines[0], lines


@pytest.mark.parametrize(
    "env, problem",
    [
        (f"{ODD}:MultiDiscreteEnv", "unsupported action space MultiDiscrete([3 3]): only Box (1-D) and Discrete"),
        (f"{ODD}:WrongResetShapeEnv", "reset() returned an observation of shape (3,), the space says (4,)"),
        (f"{ODD}:NanRewardEnv", "step() at step 3 returned a reward of nan"),
        (f"{ODD}:OldStepApiEnv", "step() returned 4 values; gymnasium's API returns 5"),
        (f"{ODD}:WrongAgentShapeGame", "for agent 'b', an observation of shape (3,), the space says (4,)"),
        ("tests.support.agent_games:nan_reward_game", "agent 'b' got a non-finite reward nan"),
        ("FrozenLake-v1", "observation space Discrete(16) (a single-agent env) is not supported"),
        ("tests.support.no_such_module:Env", "cannot import Env from tests.support.no_such_module"),
        ("NoSuchEnv-v0", "not a project env"),
    ],
)
def test_each_problem_is_one_line_and_exit_status_1(env: str, problem: str) -> None:
    result = check_env(env)
    assert result.returncode == 1, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: --env={env}: "), lines
    assert problem in lines[0], lines


def test_an_env_whose_module_imports_only_where_the_check_runs_is_reported(tmp_path: Path) -> None:
    """tests/support/locked_env.py imports in the process that imports it first: the check builds the env there,
    and the spawned process, where a run's actor workers would build theirs, cannot."""
    env = "tests.support.locked_env:LockedEnv"
    result = check_env(env, environ={"APPO_TEST_LOCK": str(tmp_path / "lock")})
    assert result.returncode == 1, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: --env={env}: cannot be built in a fresh process"), lines
    assert "RuntimeError" in lines[0] and "held by another process" in lines[0], lines


def test_notes_do_not_fail_the_check() -> None:
    env = f"{ODD}:EndlessUnseededEnv"
    result = check_env(env)
    assert result.returncode == 0, result.stdout + result.stderr
    notes, ok = result.stdout.splitlines()[:-1], result.stdout.splitlines()[-1]
    assert len(notes) == 2 and all(n.startswith(f"note: --env={env}: ") for n in notes), notes
    assert "no episode ended in 200 random steps" in notes[0] and "reset's seed" in notes[1], notes
    assert ok.startswith(f"ok: --env={env}: ") and "; 0 episodes in 200 random steps" in ok, ok


def test_max_episode_steps_gives_the_env_a_time_limit() -> None:
    result = check_env(f"{ODD}:EndlessUnseededEnv", "--max_episode_steps=40")
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "no episode ended" not in out and "; 5 episodes in 200 random steps" in out, out


def test_check_from_python_returns_the_lines() -> None:
    from appo.check_env import check

    problems, notes, summary = check(f"{ODD}:GoodEnv", steps=30)
    assert problems == [] and notes == [] and summary.startswith(f"ok: --env={ODD}:GoodEnv: "), (problems, notes)
    problems, notes, summary = check(f"{ODD}:WrongResetShapeEnv", steps=30)
    assert len(problems) == 1 and "shape (3,)" in problems[0] and summary == "", problems


@pytest.mark.parametrize(
    ("env", "said"),
    [
        ("tests.support.odd_envs:MultiDiscreteEnv", "unsupported action space MultiDiscrete"),
        ("FrozenLake-v1", "observation space Discrete(16) (a single-agent env) is not supported"),
    ],
)
def test_a_run_on_spaces_no_model_takes_is_refused_in_one_line(env: str, said: str, tmp_path) -> None:
    """train_appo.py applies the same rules before it starts any process: exit 2, one line, no run folder."""
    result = run_script("train_appo.py", [f"--env={env}", f"--train_dir={tmp_path}", "--experiment=odd"], timeout=60)
    lines = [line for line in result.stdout.splitlines() if line.strip()]
    assert result.returncode == 2 and len(lines) == 1, result.stdout[-3000:]
    assert lines[0].startswith(f"error: --env={env}: ") and said in lines[0], lines[0]
    assert not (tmp_path / "odd").exists()
