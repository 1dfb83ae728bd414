"""The driver's episode windows across a resume: the last RETURN_WINDOW episodes of each policy (returns, lengths,
returns by episode of a trial and by task bucket, true objectives, returns of games against a self-play pool) and
its episode count, kept in the run directory at every report. A resumed run starts from them, so
`episode/return_mean` goes on from where it stopped instead of restarting from the first episodes to end (the short
ones: a fallen robot's), `episode/count` keeps counting, and PBT on the true objective has its objectives at once."""

from __future__ import annotations

import json
from collections import deque
from pathlib import Path
from typing import Any

from appo.driver.stats import RETURN_WINDOW, PolicyStats, Stats
from appo.utils.logging import log
from appo.utils.paths import checkpoint_dir, write_text_atomic

WINDOW_FILE = "episode_window.json"


def save_windows(stats: Stats, exp_dir: Path) -> None:
    state = [
        {
            "episodes": p.episodes,
            "returns": list(p.returns),
            "lengths": list(p.lengths),
            "by_episode": {str(k): list(v) for k, v in p.by_episode.items()},
            "by_task": {k: list(v) for k, v in p.by_task.items()},
            "objectives": list(p.objectives),
            "pool_returns": list(p.pool_returns),
            "by_agent": {k: list(v) for k, v in p.by_agent.items()},
        }
        for p in stats.policies
    ]
    write_text_atomic(exp_dir / WINDOW_FILE, json.dumps(state) + "\n")


def restore_windows(stats: Stats, exp_dir: Path) -> None:
    """The saved windows of the policies that resume from a checkpoint; a policy that starts afresh (no
    checkpoint) starts with empty windows. An unreadable file is logged and ignored: it never stops a run."""
    from appo.learning.checkpoint import list_checkpoints  # torch: only where the driver already has it

    resuming = [bool(list_checkpoints(checkpoint_dir(exp_dir, pid))) for pid in range(len(stats.policies))]
    for p, resumed in zip(stats.policies, resuming, strict=True):
        p.resumed = resumed
    path = exp_dir / WINDOW_FILE
    if not path.exists():
        return
    try:
        state = json.loads(path.read_text())
        for p, saved, resumed in zip(stats.policies, state, resuming, strict=False):
            if resumed:
                _load(p, saved)
    except (ValueError, KeyError, TypeError) as exc:
        log.warning("%s: not read (%s); the episode statistics start afresh", path, exc)
        for pid in range(len(stats.policies)):
            stats.policies[pid] = PolicyStats()
            stats.policies[pid].resumed = resuming[pid]


def _load(p: PolicyStats, saved: dict[str, Any]) -> None:
    window = lambda values: deque((float(v) for v in values), maxlen=RETURN_WINDOW)  # noqa: E731
    p.episodes = int(saved["episodes"])
    p.returns = window(saved["returns"])
    p.lengths = deque((int(v) for v in saved["lengths"]), maxlen=RETURN_WINDOW)
    p.by_episode = {int(k): window(v) for k, v in saved["by_episode"].items()}
    p.by_task = {str(k): window(v) for k, v in saved["by_task"].items()}
    p.objectives = window(saved.get("objectives", []))
    p.pool_returns = window(saved.get("pool_returns", []))
    p.by_agent = {str(k): window(v) for k, v in saved.get("by_agent", {}).items()}
