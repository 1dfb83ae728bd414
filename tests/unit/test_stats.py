"""The driver's statistics as tensorboard shows them (read back with tensorboard's own reader)."""

from __future__ import annotations

from appo.driver.stats import Stats, SummaryWriters, agent_groups
from appo.protocol.messages import EvalReport, TrainReport
from appo.tools.plot import load_events, scalar_series


def test_every_evaluation_between_two_writes_reaches_tensorboard(tmp_path):
    # At shutdown the scheduled evaluation and the final forced one arrive within one report interval.
    stats, writers = Stats(num_policies=1), SummaryWriters(tmp_path, num_policies=1)
    stats.on_report(EvalReport(0, 25_000, 10, 883.0, 1.0, 1000.0, [], []))
    writers.write(stats)
    stats.on_report(EvalReport(0, 300_000, 300, 6427.5, 1.0, 1000.0, [], []))
    stats.on_report(EvalReport(0, 300_112, 301, 6262.5, 1.0, 1000.0, [], []))
    writers.write(stats)
    writers.write(stats)  # nothing new: nothing written twice
    writers.close()
    steps, _wall, values = scalar_series(load_events(tmp_path / "0"), "eval/return_mean")
    assert steps.tolist() == [25_000, 300_000, 300_112]
    assert values.tolist() == [883.0, 6427.5, 6262.5]
    assert stats.policies[0].last_eval.return_mean == 6262.5


def test_a_learners_greedy_evaluation_is_written_once_at_its_own_steps(tmp_path):
    """UDRL/RCP's greedy evaluations (greedy/*) are events: each at the env steps of the report that carried it,
    once, however many summaries follow; the learner's state (train/*) is written at every summary."""
    stats, writers = Stats(num_policies=1), SummaryWriters(tmp_path, num_policies=1)
    stats.on_report(TrainReport(0, 1_000, 5, {"loss": 1.0, "greedy/return_mean": 42.0}))
    stats.on_report(TrainReport(0, 1_500, 6, {"loss": 0.5}))
    writers.write(stats)
    stats.on_report(TrainReport(0, 2_000, 7, {"loss": 0.25}))
    writers.write(stats)
    writers.close()
    events = load_events(tmp_path / "0")
    steps, _wall, values = scalar_series(events, "greedy/return_mean")
    assert steps.tolist() == [1_000] and values.tolist() == [42.0]
    steps, _wall, values = scalar_series(events, "train/loss")
    assert steps.tolist() == [1_500, 2_000] and values.tolist() == [0.5, 0.25]


def test_a_resumed_runs_fps_counts_only_the_steps_of_this_session(tmp_path):
    """A resumed learner's first report carries its checkpoint's env steps: the FPS windows (console, ETA and
    perf/fps) start from it instead of counting millions of restored steps as stepped in the first seconds."""
    stats = Stats(num_policies=2)
    stats.sample(now=0.0)  # before any report: nothing to count from
    stats.on_report(TrainReport(0, 7_700_000, 1800, {}))
    stats.sample(now=5.0)  # policy 1 not reported yet
    stats.on_report(TrainReport(1, 7_600_000, 1790, {}))
    stats.sample(now=10.0)
    stats.on_report(TrainReport(0, 7_710_000, 1801, {}))
    stats.on_report(TrainReport(1, 7_610_000, 1791, {}))
    stats.sample(now=20.0)
    assert stats.fps(60) == 2_000.0
    assert "ETA 39.0 min" in stats.status_line(20.0, target_steps=10_000_000)


def test_agents_group_by_their_name_less_its_number() -> None:
    names = ["leadadversary_0", "adversary_0", "adversary_1", "agent_0", "agent_1", "player", "red_team"]
    assert agent_groups(names) == {
        "leadadversary": ["leadadversary_0"],
        "adversary": ["adversary_0", "adversary_1"],
        "agent": ["agent_0", "agent_1"],
        "player": ["player"],
        "red_team": ["red_team"],
    }
