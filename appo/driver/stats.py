"""What the driver makes of reports: FPS over sliding windows, episode returns, learner statistics and
policy lag per policy; the console status line; one tensorboard writer per policy (x-axis: env steps)."""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

from appo.config.algorithms import ALGORITHMS
from appo.protocol.messages import EpisodeReport, EvalReport, HyperparamsReport, TrainReport

FPS_WINDOWS = (10, 60, 300)  # seconds
RETURN_WINDOW = 100  # episodes averaged for the return statistics
# Learner statistics that are events, not state: written once, at the env steps of the report that carried them.
EVENT_PREFIX = "greedy/"
# Learner statistics written under perf/ rather than train/ (besides policy_lag_*): the engine's, and each
# algorithm's own (its traits' perf_keys).
PERF_KEYS = {"dropped_trajectories"}.union(*(spec.traits.perf_keys for spec in ALGORITHMS.values()))


def agent_groups(agents: list[str]) -> dict[str, list[str]]:
    """Agents grouped as PettingZoo names them: the name less a trailing `_<number>` (`adversary_0`, `adversary_1`
    -> `adversary`)."""
    groups: dict[str, list[str]] = {}
    for agent in agents:
        head, _, tail = agent.rpartition("_")
        groups.setdefault(head if head and tail.isdigit() else agent, []).append(agent)
    return groups


class PolicyStats:
    def __init__(self) -> None:
        self.returns: deque[float] = deque(maxlen=RETURN_WINDOW)
        self.lengths: deque[int] = deque(maxlen=RETURN_WINDOW)
        self.env_steps = 0
        self.version = 0
        self.reported = False  # a learner's report has come: env_steps is its count (a resumed run's included)
        self.resumed = False  # the policy resumes from a checkpoint (appo/driver/episode_window.py)
        self.train: dict[str, float] = {}
        self.episodes = 0
        # Task envs: returns by episode index within a trial, and trial returns by task bucket.
        self.by_episode: dict[int, deque[float]] = {}
        self.by_task: dict[str, deque[float]] = {}
        self.last_eval: EvalReport | None = None
        self.unwritten_evals: list[EvalReport] = []  # every evaluation since the last summary write, in order
        self.unwritten_events: list[tuple[int, str, float]] = []  # (env steps, tag, value): learners' evaluations
        self.hparams: dict[str, float] = {}  # current values of the hyperparameters PBT may change
        self.pool_returns: deque[float] = deque(maxlen=RETURN_WINDOW)  # games against self-play snapshots
        self.objectives: deque[float] = deque(maxlen=RETURN_WINDOW)  # true objectives the env reported
        self.by_agent: dict[str, deque[float]] = {}  # multi-agent: returns by agent name

    def add_trials(self, trials: list[dict]) -> None:
        for trial in trials:
            for k, ret in enumerate(trial["returns"]):
                self.by_episode.setdefault(k, deque(maxlen=RETURN_WINDOW)).append(ret)
            self.by_task.setdefault(trial["bucket"], deque(maxlen=RETURN_WINDOW)).append(sum(trial["returns"]))

    def return_mean(self) -> float:
        return sum(self.returns) / len(self.returns) if self.returns else math.nan

    def objective_mean(self) -> float:
        return sum(self.objectives) / len(self.objectives) if self.objectives else math.nan

    def length_mean(self) -> float:
        return sum(self.lengths) / len(self.lengths) if self.lengths else math.nan


class Stats:
    def __init__(self, num_policies: int) -> None:
        self.policies = [PolicyStats() for _ in range(num_policies)]
        self.history: deque[tuple[float, int]] = deque()  # (time, total env steps)
        self.restarts = 0  # actor and policy workers started again by the driver
        self.actor_busy: dict[int, float] = {}  # worker -> share of time stepping envs (last report)
        self.learner_busy_seconds = 0.0  # training time reported since the last status line

    def on_report(self, msg: Any) -> None:
        handler = self.handlers.get(type(msg))
        if handler is not None:  # other messages carry nothing to count
            handler(self, msg)

    def _on_episodes(self, msg: EpisodeReport) -> None:
        p = self.policies[msg.policy_id]
        p.returns.extend(msg.returns)
        p.lengths.extend(msg.lengths)
        p.episodes += len(msg.returns)
        p.add_trials(msg.trials)
        p.pool_returns.extend(msg.pool_returns)
        p.objectives.extend(msg.objectives)
        for agent, returns in msg.agent_returns.items():
            p.by_agent.setdefault(agent, deque(maxlen=RETURN_WINDOW)).extend(returns)
        if msg.busy >= 0:
            self.actor_busy[msg.worker_idx] = msg.busy

    def _on_eval(self, msg: EvalReport) -> None:
        p = self.policies[msg.policy_id]
        p.last_eval = msg
        p.unwritten_evals.append(msg)

    def _on_train(self, msg: TrainReport) -> None:
        p = self.policies[msg.policy_id]
        p.env_steps, p.version, p.reported = msg.env_steps, msg.version, True
        # greedy/*: evaluations a learner ran (UDRL's and RCP's greedy episodes), written once at the steps they
        # came with; everything else is the learner's latest state, written at every summary.
        events = {k: v for k, v in msg.stats.items() if k.startswith(EVENT_PREFIX)}
        p.train.update({k: v for k, v in msg.stats.items() if k not in events})
        p.unwritten_events.extend((msg.env_steps, k, v) for k, v in events.items())
        self.learner_busy_seconds += msg.stats.get("train_seconds", 0.0)

    def _on_hparams(self, msg: HyperparamsReport) -> None:
        self.policies[msg.policy_id].hparams = dict(msg.hparams)

    handlers: ClassVar[dict[type, Callable[[Stats, Any], None]]] = {
        EpisodeReport: _on_episodes,
        EvalReport: _on_eval,
        TrainReport: _on_train,
        HyperparamsReport: _on_hparams,
    }

    @property
    def env_steps(self) -> int:
        return sum(p.env_steps for p in self.policies)

    @property
    def min_policy_env_steps(self) -> int:
        """Env steps of the policy with the fewest: the run's budget applies to every policy."""
        return min(p.env_steps for p in self.policies)

    def sample(self, now: float | None = None) -> None:
        """Record (time, env steps) for the FPS windows, from when every learner has reported: a resumed run's
        first report carries the steps of its checkpoint, which are not this session's."""
        if not all(p.reported for p in self.policies):
            return
        now = time.monotonic() if now is None else now
        self.history.append((now, self.env_steps))
        while self.history and now - self.history[0][0] > max(FPS_WINDOWS) + 1:
            self.history.popleft()

    def fps(self, window: float) -> float:
        if len(self.history) < 2:
            return math.nan
        now, steps = self.history[-1]
        for then, old_steps in self.history:
            if now - then <= window:
                return (steps - old_steps) / max(now - then, 1e-9) if now > then else math.nan
        return math.nan

    def status_line(self, elapsed: float, target_steps: int | None = None, interval: float = 0.0) -> str:
        """Env steps (with progress and ETA toward `target_steps`), FPS windows, utilisation of actor workers
        (time stepping envs) and learners (time training) over the last `interval` seconds, per-policy return
        and lag."""
        fps = "/".join("nan" if math.isnan(f) else f"{f:.0f}" for f in (self.fps(w) for w in FPS_WINDOWS))
        steps = f"steps {self.env_steps}"
        if target_steps:
            target_steps *= len(self.policies)
            rate = self.fps(FPS_WINDOWS[1])
            left = max(target_steps - self.env_steps, 0)
            eta = f"{left / rate / 60:.1f} min" if rate and not math.isnan(rate) and rate > 0 else "?"
            steps += f"/{target_steps} ({100 * self.env_steps / target_steps:.0f}%, ETA {eta})"
        parts = [steps, f"FPS (10s/1m/5m) {fps}", f"{elapsed:.0f}s"]
        if self.actor_busy and interval:
            actors = 100 * sum(self.actor_busy.values()) / len(self.actor_busy)
            learners = 100 * self.learner_busy_seconds / interval / len(self.policies)
            parts.append(f"busy: actors {actors:.0f}% learner {learners:.0f}%")
        self.learner_busy_seconds = 0.0
        for pid, p in enumerate(self.policies):
            lag = p.train
            parts.append(
                f"p{pid}: return {p.return_mean():.1f} v{p.version} lag "
                f"{lag.get('policy_lag_min', math.nan):.0f}/{lag.get('policy_lag_avg', math.nan):.1f}/"
                f"{lag.get('policy_lag_max', math.nan):.0f}"
            )
        return " | ".join(parts)


def eval_line(report: EvalReport) -> str:
    """The console line of one evaluation."""
    if report.returns_by_episode:
        curve = " ".join(f"ep{k} {v:.1f}" for k, v in enumerate(report.returns_by_episode))
        if report.stochastic_returns_by_episode:
            curve += " (sampled: " + " ".join(f"{v:.1f}" for v in report.stochastic_returns_by_episode) + ")"
        return (
            f"meta-test p{report.policy_id} at {report.env_steps} steps (v{report.version}): {curve} | "
            f"trial return {report.return_mean:.1f} +- {report.return_std:.1f} over {len(report.task_returns)} tasks"
        )
    objective = report.true_objective_mean
    return (
        f"eval p{report.policy_id} at {report.env_steps} steps (v{report.version}): return "
        f"{report.return_mean:.1f} +- {report.return_std:.1f}, length {report.length_mean:.0f}"
        + ("" if objective is None else f", true objective {objective:.2f}")
    )


class SummaryWriters:
    """One tensorboard run per policy under summaries/<policy_id>/; under --with_wandb each writer also logs every
    scalar into its policy's wandb run (utils/tracking.py)."""

    def __init__(self, summaries_root: Path, num_policies: int, cfg: Any = None) -> None:
        from tensorboardX import SummaryWriter

        self.writers = [SummaryWriter(str(summaries_root / str(pid)), flush_secs=10) for pid in range(num_policies)]
        if cfg is not None and cfg.with_wandb:
            from appo.utils.tracking import mirror_writers  # wandb is imported only then

            self.writers = mirror_writers(self.writers, cfg, summaries_root.parent)

    def write(self, stats: Stats) -> None:
        fps = stats.fps(FPS_WINDOWS[0])
        for writer, p in zip(self.writers, stats.policies, strict=True):
            step = p.env_steps
            for report in p.unwritten_evals:  # two can arrive between writes (the last one, forced at shutdown)
                self.write_eval(writer, report)
            p.unwritten_evals.clear()
            for event_step, tag, value in p.unwritten_events:
                writer.add_scalar(tag, value, event_step)
            p.unwritten_events.clear()
            # A resumed run's rows from the learner's first report on: at its checkpoint's env steps, not at 0.
            if p.resumed and not p.reported:
                writer.flush()
                continue
            self.write_episodes(writer, p, step)
            if not math.isnan(fps):
                writer.add_scalar("perf/fps", fps, step)
            for key, value in p.train.items():
                group = "perf" if key.startswith("policy_lag") or key in PERF_KEYS else "train"
                # A key with its own group ("udrl/command_return", "eval/return_mean") is written as it is.
                writer.add_scalar(key if "/" in key else f"{group}/{key}", value, step)
            writer.add_scalar("train/version", p.version, step)
            writer.add_scalar("stats/worker_restarts", stats.restarts, step)
            if len(stats.policies) > 1:
                for key, value in p.hparams.items():
                    writer.add_scalar(f"hparams/{key}", value, step)
            writer.flush()  # this report's rows out (wandb: one row per env step)

    @staticmethod
    def write_episodes(writer: Any, p: PolicyStats, step: int) -> None:
        if p.returns:
            writer.add_scalar("episode/return_mean", p.return_mean(), step)
            writer.add_scalar("episode/length_mean", p.length_mean(), step)
            writer.add_scalar("episode/count", p.episodes, step)
        if p.objectives:
            writer.add_scalar("episode/true_objective", p.objective_mean(), step)
        for k, values in p.by_episode.items():
            writer.add_scalar(f"episode/return_ep{k}", sum(values) / len(values), step)
        for bucket, values in p.by_task.items():
            writer.add_scalar(f"episode_by_task/{bucket}", sum(values) / len(values), step)
        for agent, values in p.by_agent.items():
            writer.add_scalar(f"episode_by_agent/{agent}", sum(values) / len(values), step)
        groups = agent_groups(list(p.by_agent))
        for group, agents in groups.items() if len(groups) > 1 else ():
            values = [v for agent in agents for v in p.by_agent[agent]]
            writer.add_scalar(f"episode_by_group/{group}", sum(values) / len(values), step)
        if p.pool_returns:  # self-play: the policy's last games against its pool of past selves
            writer.add_scalar("selfplay/pool_return_mean", sum(p.pool_returns) / len(p.pool_returns), step)
            wins = sum(r > 0 for r in p.pool_returns) / len(p.pool_returns)
            writer.add_scalar("selfplay/pool_win_rate", wins, step)
            draws = sum(r == 0 for r in p.pool_returns) / len(p.pool_returns)
            writer.add_scalar("selfplay/pool_draw_rate", draws, step)  # (ended by a time limit, no winner)

    @staticmethod
    def write_eval(writer: Any, report: EvalReport) -> None:
        step = report.env_steps
        prefix = "meta_test" if report.returns_by_episode else "eval"
        writer.add_scalar(f"{prefix}/return_mean", report.return_mean, step)
        writer.add_scalar(f"{prefix}/return_std", report.return_std, step)
        writer.add_scalar(f"{prefix}/length_mean", report.length_mean, step)
        if report.true_objective_mean is not None:
            writer.add_scalar(f"{prefix}/true_objective", report.true_objective_mean, step)
        for k, value in enumerate(report.returns_by_episode):
            writer.add_scalar(f"meta_test/return_ep{k}", value, step)
        for k, value in enumerate(report.stochastic_returns_by_episode):
            writer.add_scalar(f"meta_test_sampled/return_ep{k}", value, step)
        if report.returns_by_episode:
            # The RL^2 paper's measure: a trial's total reward over its episodes (mean over the held-out tasks),
            # deterministic and with sampled actions (the paper's policies sample).
            writer.add_scalar("meta_test/trial_return", report.return_mean, step)
        if report.stochastic_returns_by_episode:
            writer.add_scalar("meta_test_sampled/trial_return", sum(report.stochastic_returns_by_episode), step)
        if len(report.returns_by_episode) > 1:
            for prefix, (gain, se) in (
                ("meta_test", report.adaptation_gain),
                ("meta_test_sampled", report.stochastic_adaptation_gain),
            ):
                writer.add_scalar(f"{prefix}/adaptation_gain", gain, step)
                writer.add_scalar(f"{prefix}/adaptation_gain_se", se, step)
        for i, value in enumerate(report.task_returns):
            writer.add_scalar(f"meta_test/task_{i}", value, step)

    def close(self) -> None:
        for writer in self.writers:
            writer.flush()
            writer.close()
