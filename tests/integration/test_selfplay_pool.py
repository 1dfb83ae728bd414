"""Self-play against past selves (--selfplay_pool) through whole runs of train_appo.py on paddle_duel, in serial mode,
on the local backend with two actor workers and on a private Ray instance: the policy's games against its pool
reach tensorboard (selfplay/pool_win_rate, selfplay/pool_return_mean), the learner's checkpoint holds the pool (the
last snapshots, taken every --selfplay_snapshot_every versions), and a resumed run starts from the saved pool and
goes on filling it. Flags that cannot work are refused before the run with one line naming the flag."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from appo.learning.checkpoint import list_checkpoints
from tests.conftest import run_script
from tests.support.ray_cluster import RAY_MARKS

EVERY = 5
POOL = ["--selfplay_pool=2", f"--selfplay_snapshot_every={EVERY}"]
DUEL = ["--env=paddle_duel", "--num_envs_per_worker=4", "--rollout=16", "--batch_size=128", "--report_interval=1"]
MODES = {
    "serial": ["--serial_mode", "--num_workers=1"],
    "local": ["--num_workers=2"],
    "ray": ["--backend=ray", "--num_workers=2", "--ray_object_store_mb=100"],
}
RESTORED = "learner 0: self-play pool restored, 2 snapshots"


def scalars(summaries: Path, tag: str) -> list[tuple[int, float]]:
    """(env steps, value) of every `tag` the run wrote."""
    acc = EventAccumulator(str(summaries), size_guidance={"scalars": 0})
    acc.Reload()
    return [(e.step, e.value) for e in acc.Scalars(tag)] if tag in acc.Tags()["scalars"] else []


def train(train_dir: Path, args: list[str], steps: int) -> Path:
    argv = [*args, f"--train_for_env_steps={steps}", f"--train_dir={train_dir}", "--experiment=pool"]
    result = run_script("train_appo.py", argv, timeout=120)
    assert result.returncode == 0, result.stdout[-3000:]
    return train_dir / "pool"


def latest_pool(exp: Path) -> tuple[int, dict]:
    """The newest regular checkpoint's version and the pool it holds."""
    state = torch.load(list_checkpoints(exp / "checkpoint_p0")[-1], map_location="cpu", weights_only=False)
    assert "snapshot_pool" in state, sorted(state)
    return int(state["version"]), state["snapshot_pool"]


def check_pool(version: int, pool: dict) -> list[int]:
    """The pool of two holds the last two snapshots: versions at multiples of EVERY, the newest at or just below the
    learner's version, each with its weights; `added` counts every snapshot since the run began."""
    versions = pool["versions"]
    assert len(versions) == 2 and all(v > 0 and v % EVERY == 0 for v in versions), versions
    newest = version // EVERY * EVERY
    assert sorted(versions) == [newest - EVERY, newest], (version, versions)
    assert pool["added"] == newest // EVERY, (pool["added"], version)
    assert all(isinstance(s, dict) and s for s in pool["states"]), "a filled slot without its weights"
    return versions


@pytest.mark.parametrize("mode", ["serial", "local", pytest.param("ray", marks=RAY_MARKS)])
@pytest.mark.slow
def test_a_run_plays_its_pool_saves_it_and_a_resumed_run_goes_on_from_it(train_dir: Path, mode: str) -> None:
    args = [*DUEL, *MODES[mode], *POOL]
    exp = train(train_dir, args, 30000)
    summaries = exp / "summaries" / "0"
    wins = scalars(summaries, "selfplay/pool_win_rate")
    means = dict(scalars(summaries, "selfplay/pool_return_mean"))
    assert wins, "no game against the pool reported"
    assert all(0.0 <= w <= 1.0 for _, w in wins), wins
    # Games are won (+1), lost (-1) or drawn (0): a window's mean return lies between 2 * wins - 1 and wins.
    for step, w in wins:
        assert 2 * w - 1 - 1e-6 <= means[step] <= w + 1e-6, (step, w, means[step])
    version, pool = latest_pool(exp)
    assert version >= 4 * EVERY, version
    before = check_pool(version, pool)
    assert RESTORED not in (exp / "log.txt").read_text()

    exp = train(train_dir, args, 45000)  # the same command, trained further
    log = (exp / "log.txt").read_text()
    assert log.count(RESTORED) == 1, log[-3000:]
    resumed_version, resumed = latest_pool(exp)
    assert resumed_version > version
    after = check_pool(resumed_version, resumed)
    assert min(after) > max(before), (before, after)


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["--env=CartPole-v1", "--selfplay_pool=2"], "error: --selfplay_pool=2: needs a multi-agent env"),
        (["--env=paddle_duel", "--selfplay_pool=2", "--selfplay_pool_prob=1.5"], "error: --selfplay_pool_prob=1.5"),
        (
            ["--env=CartPole-v1", "--obs_agent_id"],
            "error: --obs_agent_id: needs a multi-agent env (--env=CartPole-v1 has one agent)",
        ),
    ],
)
def test_bad_multi_agent_flags_are_refused_before_the_run_with_one_line(
    train_dir: Path, args: list[str], line: str
) -> None:
    result = run_script("train_appo.py", [*args, f"--train_dir={train_dir}", "--experiment=bad"], timeout=60)
    lines = [text for text in result.stdout.splitlines() if text.strip()]
    assert result.returncode == 2 and len(lines) == 1, result.stdout[-3000:]
    assert lines[0] == line or (line.endswith("=1.5") and lines[0].startswith(f"{line}: ")), lines
    assert not (train_dir / "bad").exists(), "a refused run left an experiment behind"
