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
    """The policy index best_policy.json names, or None when the run has no such file; ValueError (one line naming
    the file) for a file that is not such a record."""
    path = best_policy_path(exp_dir)
    if not path.exists():
        return None
    try:
        index = json.loads(path.read_text())["policy_index"]
        if isinstance(index, bool) or int(index) != index or index < 0:
            raise ValueError(f"policy_index is {index!r}")
        return int(index)
    except (OSError, json.JSONDecodeError, KeyError, ValueError, TypeError) as exc:
        detail = f"no {exc}" if isinstance(exc, KeyError) else str(exc).splitlines()[0]
        raise ValueError(f"{path}: unreadable ({type(exc).__name__}: {detail}); remove it or fix it") from None


def pick_policy_index(exp_dir: Path, value: str | int, num_policies: int) -> int:
    """--policy_index as a number: a policy of the run (0..num_policies-1), or `best`, which reads the run's
    best_policy.json (kept current by the driver); ValueError, one line naming the flag, for anything else."""
    if value == "best":
        try:
            best = read_best_policy(exp_dir)
        except ValueError as exc:  # a corrupt file: one line naming it
            raise ValueError(f"--policy_index=best: {exc}") from None
        if best is None:
            raise ValueError(f"--policy_index=best: {best_policy_path(exp_dir)} does not exist yet")
        return best
    text = str(value)
    if not text.isdigit() or int(text) >= num_policies:
        raise ValueError(f"--policy_index={value}: the run has policies 0..{num_policies - 1} (or pass best)")
    return int(text)


def budget_reached(exp_dir: Path) -> bool:
    """Whether a run trained its whole budget: every policy's newest checkpoint holds its --train_for_env_steps, or
    its --train_for_iterations (train/version), as cfg.json sets them. --train_for_seconds is one session's, so a
    run stopped by it (or by a signal, or a crash) has training left. Read from file names: no torch needed."""
    exp_dir = Path(exp_dir)
    try:
        cfg = json.loads(cfg_path(exp_dir).read_text())
        env_budget = int(cfg.get("train_for_env_steps", 0))
        iter_budget = int(cfg.get("train_for_iterations", 0) or 0)
        policies = int(cfg.get("num_policies", 1))
    except (OSError, ValueError, TypeError, AttributeError):
        return False
    for policy_id in range(max(policies, 1)):
        ckpt_dir = checkpoint_dir(exp_dir, policy_id)
        names = [n for p in (ckpt_dir.iterdir() if ckpt_dir.is_dir() else []) if (n := CHECKPOINT_RE.match(p.name))]
        if not names:
            return False
        version, env_steps = max((int(m.group(1)), int(m.group(2))) for m in names)
        if env_steps < env_budget and not (iter_budget > 0 and version >= iter_budget):
            return False
    return True


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


def fsync_dir(directory: Path) -> None:
    """Persist directory entries (a rename) to disk; a no-op where directories cannot be opened (Windows)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some filesystems (certain network mounts) reject fsync on directories; the rename is still atomic
    finally:
        os.close(fd)


def write_text_atomic(path: Path, text: str) -> None:
    """`write_bytes_atomic` of `text` in UTF-8."""
    write_bytes_atomic(path, text.encode())


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Write `data` to `path` through a temporary file, fsync and a rename: a crash or a power cut leaves the old
    file or the new one, never an empty or partial one; a failed write leaves no temporary file."""
    path = Path(path)
    tmp = path.with_name(path.name + TMP_SUFFIX)
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)
