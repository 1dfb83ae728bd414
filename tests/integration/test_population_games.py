"""A population of four policies mixed in the games of one env, end to end (real processes, paddle_duel, two actor
workers): each agent redraws its policy every few of its games (--policy_redraw_every), each policy plays a pool of
its own past selves, and PBT ranks the policies by the win rate the env reports (info['true_objective'],
--pbt_target_objective=true_objective). A resumed run goes on with the population's PBT schedule, every policy's
pool and its window of objectives. Also: a single-agent env's true objective reaches tensorboard."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from appo.learning.checkpoint import list_checkpoints
from tests.conftest import run_script

POLICIES = 4
PERIOD = 3000  # PBT period, in each policy's env steps
POPULATION = [
    "--env=paddle_duel",
    "--num_workers=2",
    "--num_envs_per_worker=4",
    "--rollout=16",
    "--batch_size=128",
    f"--num_policies={POLICIES}",
    "--policy_redraw_every=3",
    "--selfplay_pool=2",
    "--selfplay_snapshot_every=5",
    "--with_pbt",
    "--pbt_target_objective=true_objective",
    f"--pbt_period_env_steps={PERIOD}",
    f"--pbt_start_mutation={PERIOD}",
    "--pbt_replace_reward_gap=0",  # any win-rate gap over 0.01 replaces the worst (the policies start alike)
    "--pbt_replace_reward_gap_absolute=0.01",
    "--report_interval=1",
    "--seed=3",
]


def scalars(summaries: Path, tag: str) -> list[tuple[int, float]]:
    acc = EventAccumulator(str(summaries), size_guidance={"scalars": 0})
    acc.Reload()
    return [(e.step, e.value) for e in acc.Scalars(tag)] if tag in acc.Tags()["scalars"] else []


def train(train_dir: Path, steps: int, *args: str) -> tuple[Path, str]:
    argv = [*args, f"--train_for_env_steps={steps}", f"--train_dir={train_dir}", "--experiment=population"]
    result = run_script("train_appo.py", argv, timeout=200)
    assert result.returncode == 0, result.stdout[-3000:]
    return train_dir / "population", result.stdout


def decisions(exp: Path) -> list[dict]:
    return [json.loads(line) for line in (exp / "pbt.jsonl").read_text().splitlines()]


@pytest.mark.timeout(420)
@pytest.mark.slow
def test_a_population_of_four_in_one_env_ranks_by_win_rate_and_resumes_its_pbt_state_and_pools(
    train_dir: Path,
) -> None:
    exp, _ = train(train_dir, 4 * PERIOD, *POPULATION)
    first = decisions(exp)
    assert first, "no PBT decision in the first run"
    for event in first:  # objectives are win rates (fractions of games won), not returns (-1..1, zero-sum)
        assert all(o is None or 0.0 <= o <= 1.0 for o in event["objectives"]), event
    assert any(sum(o is not None for o in e["objectives"]) >= 2 for e in first), first
    replaced = [e for e in first if e["kind"] == "replace"]
    assert replaced, f"no policy replaced in {len(first)} decisions"
    for e in replaced:  # a worse win rate takes a better one's weights
        assert e["objectives"][e["source"]] > e["objectives"][e["target"]] + 0.01, e
    for pid in range(POLICIES):
        summaries = exp / "summaries" / str(pid)
        win_rates = [v for _, v in scalars(summaries, "episode/true_objective")]
        assert win_rates and all(0.0 <= v <= 1.0 for v in win_rates), (pid, win_rates)
        assert scalars(summaries, "selfplay/pool_win_rate"), f"policy {pid} played no game against its pool"
    state = json.loads((exp / "pbt_state.json").read_text())
    windows = json.loads((exp / "episode_window.json").read_text())
    assert all(len(w["objectives"]) > 0 for w in windows), [len(w["objectives"]) for w in windows]
    pools = {}
    for pid in range(POLICIES):
        ckpt = torch.load(list_checkpoints(exp / f"checkpoint_p{pid}")[-1], map_location="cpu", weights_only=False)
        pools[pid] = ckpt["snapshot_pool"]["added"]
        assert pools[pid] >= 1, f"policy {pid} took no snapshot"

    exp, out = train(train_dir, 7 * PERIOD, *POPULATION)
    assert "PBT: schedule resumed" in out, out[-3000:]
    for pid in range(POLICIES):
        assert re.search(rf"learner {pid}: self-play pool restored, \d snapshots", out), (pid, out[-3000:])
        ckpt = torch.load(list_checkpoints(exp / f"checkpoint_p{pid}")[-1], map_location="cpu", weights_only=False)
        assert ckpt["snapshot_pool"]["added"] > pools[pid], f"policy {pid}'s pool did not go on from the saved one"
    later = decisions(exp)[len(first) :]
    assert later, "no PBT decision after the resume"
    # The schedule goes on from the saved boundaries (none fired again at once on restored env steps), and the
    # restored windows give every policy its objective from the first decision on.
    assert all(e["env_steps"] >= state["next_period"][e["target"]] for e in later), (state["next_period"], later)
    assert all(o is not None for o in later[0]["objectives"]), later[0]


def test_a_single_agent_envs_true_objective_reaches_tensorboard(train_dir: Path) -> None:
    """paddle_duel's single-agent twin (one side against the scripted tracker) reports a win as its true
    objective; the run's episode/true_objective is the share of games won, which the returns (+1/-1/0) agree with."""
    argv = ["--env=appo.envs.multi_agent.paddle_duel:PaddleDuelVsScripted"]
    argv += ["--num_workers=1", "--num_envs_per_worker=4"]
    argv += ["--rollout=16", "--batch_size=128", "--report_interval=1", "--train_for_env_steps=6000"]
    result = run_script("train_appo.py", [*argv, f"--train_dir={train_dir}", "--experiment=twin"], timeout=120)
    assert result.returncode == 0, result.stdout[-3000:]
    summaries = train_dir / "twin" / "summaries" / "0"
    win_rates = scalars(summaries, "episode/true_objective")
    returns = dict(scalars(summaries, "episode/return_mean"))
    assert win_rates, "no episode/true_objective"
    for step, win_rate in win_rates:
        # Over the same last games, return = wins - losses (draws: 0), so return <= win rate <= (return + 1) / 2.
        assert returns[step] - 1e-6 <= win_rate <= (returns[step] + 1.0) / 2 + 1e-6, (step, win_rate, returns[step])
