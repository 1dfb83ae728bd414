"""The layout of one run's folder, train_dir/NAME/, in one place."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

# Checkpoint file names (appo/learning/checkpoint.py writes them): checkpoint_{version:09d}_{env_steps}.pth and
# best_{version:09d}_{env_steps}_{metric:.3f}.pth. Here, torch-free, so that listing runs needs no torch.
CHECKPOINT_RE = re.compile(r"^checkpoint_(\d+)_(\d+)\.pth$")
BEST_CHECKPOINT_RE = re.compile(r"^best_(\d+)_(\d+)_(.+)\.pth$")


def experiment_dir(train_dir: str | Path, experiment: str) -> Path:
    return Path(train_dir) / experiment


def cfg_path(exp_dir: Path) -> Path:
    return exp_dir / "cfg.json"


def log_path(exp_dir: Path) -> Path:
    return exp_dir / "log.txt"


def checkpoint_dir(exp_dir: Path, policy_id: int) -> Path:
    return exp_dir / f"checkpoint_p{policy_id}"


def checkpoint_steps(name: str) -> tuple[int, int] | None:
    """(version, env steps) from a regular or best checkpoint's file name; None for any other name."""
    m = CHECKPOINT_RE.match(name) or BEST_CHECKPOINT_RE.match(name)
    return (int(m.group(1)), int(m.group(2))) if m else None


def summaries_dir(exp_dir: Path, policy_id: int) -> Path:
    return exp_dir / "summaries" / str(policy_id)


def videos_dir(exp_dir: Path) -> Path:
    return exp_dir / "videos"


def best_policy_path(exp_dir: Path) -> Path:
    """PBT's pick of the population (appo/driver/pbt_controller.py keeps it current; enjoy.py --policy_index=best)."""
    return Path(exp_dir) / "best_policy.json"


def read_best_policy(exp_dir: Path) -> int | None:
    """The policy index best_policy.json names, or None when the run has no such file."""
    path = best_policy_path(exp_dir)
    if not path.exists():
        return None
    return int(json.loads(path.read_text())["policy_index"])


# The temporary files of the run's atomic writes (write_text_atomic in the run's folder; checkpoints, PBT snapshots
# and the replay in each checkpoint folder): a kill mid-write leaves one behind; nothing else has these names.
TMP_SUFFIX = ".tmp"
_CHECKPOINT_DIR_TMP = ("checkpoint_", "best_", "pbt_snapshot_", "replay")


def checkpoint_temporary_files(ckpt_dir: Path) -> list[Path]:
    """The temporary files of interrupted saves in one checkpoint folder."""
    return sorted(p for p in Path(ckpt_dir).glob(f"*.pth{TMP_SUFFIX}") if p.name.startswith(_CHECKPOINT_DIR_TMP))


def stale_temporary_files(exp_dir: Path) -> list[Path]:
    """The temporary files of interrupted atomic writes in a run's folder and its checkpoint folders."""
    exp_dir = Path(exp_dir)
    found = [p for p in exp_dir.glob(f"*.json{TMP_SUFFIX}") if p.is_file()]
    for ckpt_dir in sorted(exp_dir.glob("checkpoint_p*")):
        found += checkpoint_temporary_files(ckpt_dir)
    return sorted(found)


def write_text_atomic(path: Path, text: str) -> None:
    """Write `text` to `path` through a temporary file and a rename: a crash leaves the old file or the new one."""
    tmp = path.with_name(path.name + TMP_SUFFIX)
    tmp.write_text(text)
    os.replace(tmp, path)
