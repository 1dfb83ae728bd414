"""Evaluation during training: eval/* and meta_test/* summaries, the final evaluation of exactly the saved
weights, and agreement with a separate enjoy.py run of the same checkpoint."""

from __future__ import annotations

import math
import re

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from appo.learning.checkpoint import list_checkpoints
from tests.conftest import run_script

CARTPOLE = ["--env=CartPole-v1", "--num_workers=2", "--num_envs_per_worker=4", "--report_interval=1"]


def last(summary_dir, tag: str) -> tuple[int, float]:
    acc = EventAccumulator(str(summary_dir), size_guidance={"scalars": 0})
    acc.Reload()
    event = acc.Scalars(tag)[-1]
    return event.step, event.value


@pytest.mark.slow
def test_eval_summaries_match_enjoy(train_dir):
    run_script(
        "train_appo.py",
        [
            *CARTPOLE,
            f"--train_dir={train_dir}",
            "--experiment=ev",
            "--eval_interval=20000",
            "--eval_episodes=10",
            "--train_for_env_steps=120000",
        ],
        check=True,
    )
    exp = train_dir / "ev"
    summaries = exp / "summaries" / "0"
    step, eval_return = last(summaries, "eval/return_mean")
    assert step >= 120000
    for tag in ("eval/return_std", "eval/length_mean"):
        last(summaries, tag)
    # The final evaluation ran on the weights the learner saved last.
    versions = re.findall(r"eval p0 at \d+ steps \(v(\d+)\)", (exp / "log.txt").read_text())
    assert len(versions) >= 2, "expected evaluations during training and at the end"
    saved = torch.load(list_checkpoints(exp / "checkpoint_p0")[-1], weights_only=True)
    assert int(versions[-1]) == saved["version"]

    out = run_script(
        "enjoy.py", [f"--train_dir={train_dir}", "--experiment=ev", "--no_render", "--max_num_episodes=10"], check=True
    ).stdout
    enjoy_return = float(re.search(r"mean return (-?[\d.]+)", out).group(1))
    # Same weights, deterministic actions, different start states: equal within episode-to-episode noise.
    assert abs(enjoy_return - eval_return) <= 0.25 * max(abs(eval_return), 40.0), (eval_return, enjoy_return)


def test_meta_test_writes_adaptation_curve(train_dir):
    run_script(
        "train_appo.py",
        [
            "--env=navigation2d",
            f"--train_dir={train_dir}",
            "--experiment=nav",
            "--num_workers=1",
            "--meta_test_interval=10000",
            "--train_for_env_steps=20000",
            "--num_test_tasks=3",
            "--report_interval=1",
        ],
        check=True,
    )
    summaries = train_dir / "nav" / "summaries" / "0"
    acc = EventAccumulator(str(summaries), size_guidance={"scalars": 0})
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    # The navigation2d preset's trials are 2 episodes: an adaptation curve of exactly 2 points, training's
    # per-episode returns the same length, and one trial return per held-out task (3), no more.
    assert {t for t in tags if t.startswith("meta_test/return_ep")} == {"meta_test/return_ep0", "meta_test/return_ep1"}
    assert {t for t in tags if t.startswith("episode/return_ep")} == {"episode/return_ep0", "episode/return_ep1"}
    assert {t for t in tags if t.startswith("meta_test/task_")} == {f"meta_test/task_{i}" for i in range(3)}
    final = {t: acc.Scalars(t)[-1] for t in tags if t.startswith("meta_test/")}
    assert len({e.step for e in final.values()}) == 1, "every meta_test tag comes from the same last evaluation"
    curve = [final[f"meta_test/return_ep{k}"].value for k in range(2)]
    tasks = [final[f"meta_test/task_{i}"].value for i in range(3)]
    # An episode is at most 100 steps, each at most max_distance from the goal (goal within 0.5 per axis, the
    # point within 0.1 per step per axis of the origin): no real return is below that.
    max_distance = math.hypot(0.5 + 100 * 0.1, 0.5 + 100 * 0.1)
    for value in curve:
        assert math.isfinite(value) and -100 * max_distance <= value <= 0, curve
    # The same tasks with sampled actions, beside the deterministic curve (a policy may search with its noise).
    assert {t for t in tags if t.startswith("meta_test_sampled/")} == {
        "meta_test_sampled/return_ep0",
        "meta_test_sampled/return_ep1",
        "meta_test_sampled/trial_return",
        "meta_test_sampled/adaptation_gain",
        "meta_test_sampled/adaptation_gain_se",
    }
    sampled = [acc.Scalars(f"meta_test_sampled/return_ep{k}")[-1] for k in range(2)]
    assert {e.step for e in sampled} == {e.step for e in final.values()}
    for e in sampled:
        assert math.isfinite(e.value) and -100 * max_distance <= e.value <= 0, sampled
    assert [e.value for e in sampled] != curve, "sampled actions gave exactly the deterministic returns"
    for value in tasks:
        assert math.isfinite(value) and -2 * 100 * max_distance <= value <= 0, tasks
    # The curve is a per-episode split of the same trials the task returns total: they must add up.
    mean_trial = final["meta_test/return_mean"].value
    assert sum(curve) == pytest.approx(mean_trial, rel=1e-4, abs=1e-3)
    assert sum(tasks) / 3 == pytest.approx(mean_trial, rel=1e-4, abs=1e-3)
    # The paper's measure, a trial's total: deterministic (the same as return_mean) and sampled (the episodes' sum).
    assert acc.Scalars("meta_test/trial_return")[-1].value == pytest.approx(mean_trial)
    sampled_trial = acc.Scalars("meta_test_sampled/trial_return")[-1]
    assert sampled_trial.step == sampled[0].step
    assert sampled_trial.value == pytest.approx(sum(e.value for e in sampled), rel=1e-5)
    # The adaptation gain, paired by task: its mean is the difference of the episodes' means; an error over 3 tasks.
    assert final["meta_test/adaptation_gain"].value == pytest.approx(curve[1] - curve[0], rel=1e-4, abs=1e-3)
    gain = acc.Scalars("meta_test_sampled/adaptation_gain")[-1].value
    assert gain == pytest.approx(sampled[1].value - sampled[0].value, rel=1e-4, abs=1e-3)
    assert final["meta_test/adaptation_gain_se"].value >= 0
    assert 2 <= final["meta_test/length_mean"].value <= 200  # 2 episodes of 1..100 steps
    log_text = (train_dir / "nav" / "log.txt").read_text()
    assert re.search(
        r"meta-test p0 at \d+ steps \(v\d+\): ep0 -[\d.]+ ep1 -[\d.]+ \(sampled: -[\d.]+ -[\d.]+\) \| "
        r"trial return .* over 3 tasks",
        log_text,
    )
    out = run_script(
        "enjoy.py",
        [f"--train_dir={train_dir}", "--experiment=nav", "--no_render", "--max_num_episodes=4", "--task=1"],
        check=True,
    ).stdout
    assert len(re.findall(r"^trial \d+: task", out, re.M)) == 2
    episodes = [float(r) for r in re.findall(r"^episode \d+: return (-?[\d.]+)", out, re.M)]
    assert len(episodes) == 4
    assert "mean return by episode within trial" in out
    # The trial's return, as training reports it (episode/return_mean of a task env): its episodes' sum.
    trial_mean = re.search(r"^mean trial return (-?[\d.]+) ± [\d.]+ over 2 trials$", out, re.M)
    assert trial_mean and float(trial_mean.group(1)) == pytest.approx(sum(episodes) / 2, abs=0.11), out[-1000:]
