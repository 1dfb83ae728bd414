"""The layout of one run's folder, train_dir/NAME/, in one place."""

from __future__ import annotations

import os
from pathlib import Path


def experiment_dir(train_dir: str | Path, experiment: str) -> Path:
    return Path(train_dir) / experiment


def cfg_path(exp_dir: Path) -> Path:
    return exp_dir / "cfg.json"


def log_path(exp_dir: Path) -> Path:
    return exp_dir / "log.txt"


def checkpoint_dir(exp_dir: Path, policy_id: int) -> Path:
    return exp_dir / f"checkpoint_p{policy_id}"


def summaries_dir(exp_dir: Path, policy_id: int) -> Path:
    return exp_dir / "summaries" / str(policy_id)


def videos_dir(exp_dir: Path) -> Path:
    return exp_dir / "videos"


def write_text_atomic(path: Path, text: str) -> None:
    """Write `text` to `path` through a temporary file and a rename: a crash leaves the old file or the new one."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
