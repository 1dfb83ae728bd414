"""Atomic, crash-safe checkpoint files for a learner.

This module owns the on-disk checkpoint layout of one learner directory (e.g. ``train_dir/NAME/checkpoint_p0/``):

* regular checkpoints ``checkpoint_{version:09d}_{env_steps}.pth``, of which only the newest ``keep`` are retained;
* a single best checkpoint ``best_{version:09d}_{env_steps}_{metric:.3f}.pth``;
* transient ``*.tmp`` files that only exist while a save is in flight (stale ones from a crash are ignored, and
  removed when the run starts again and by the next save).

Every write goes to a temp file in the same directory, is fsync'ed, then ``os.replace``'d onto the final name and the
directory is fsync'ed, so a crash at any point leaves either the old set of files or the new one, never a
half-written file under a final name. Loading always uses ``torch.load(weights_only=True)`` so a checkpoint cannot
execute arbitrary pickled code; states must therefore only contain tensors, dicts, lists, tuples, ints, floats,
strings, bools and None.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
from pathlib import Path
from typing import Any

import torch

from appo.utils.paths import BEST_CHECKPOINT_RE as _BEST_RE
from appo.utils.paths import CHECKPOINT_RE as _CKPT_RE
from appo.utils.paths import TMP_SUFFIX as _TMP_SUFFIX
from appo.utils.paths import checkpoint_temporary_files, fsync_dir

log = logging.getLogger("appo")


def checkpoint_name(version: int, env_steps: int) -> str:
    """File name of a regular checkpoint; the zero-padded version keeps lexicographic order sane for humans."""
    return f"checkpoint_{version:09d}_{env_steps}.pth"


def best_name(version: int, env_steps: int, metric: float) -> str:
    """File name of the best checkpoint; the metric is in the name so it is visible without loading the file."""
    return f"best_{version:09d}_{env_steps}_{metric:.3f}.pth"


def _remove_stale_tmp(ckpt_dir: Path) -> None:
    """Delete temp files left by a crashed save (checkpoints, best, PBT snapshots, the replay); only our own name
    patterns, never unrelated user files."""
    for p in checkpoint_temporary_files(ckpt_dir):
        with contextlib.suppress(OSError):
            p.unlink()


def _atomic_save(state: dict[str, Any], final_path: Path) -> Path:
    """Write ``state`` to ``final_path`` atomically (temp file + fsync + rename + directory fsync).

    On any failure the temp file is removed and the exception propagates; ``final_path`` is then untouched.
    """
    final_path.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_tmp(final_path.parent)
    tmp_path = final_path.with_name(final_path.name + _TMP_SUFFIX)
    try:
        with open(tmp_path, "wb") as f:
            torch.save(state, f)
            f.flush()
            # flush() only empties Python's buffer; fsync makes the bytes durable before the rename publishes them.
            os.fsync(f.fileno())
        os.replace(tmp_path, final_path)
    except BaseException:
        # BaseException too: a KeyboardInterrupt mid-save must not leave a temp file behind either.
        with contextlib.suppress(OSError):
            tmp_path.unlink()
        raise
    fsync_dir(final_path.parent)
    return final_path


def save_snapshot(state: dict[str, Any], path: Path) -> Path:
    """Write a state outside the regular rotation (a PBT snapshot), atomically like every checkpoint."""
    return _atomic_save(state, path)


def list_checkpoints(ckpt_dir: Path) -> list[Path]:
    """Regular checkpoints in ``ckpt_dir``, sorted oldest to newest by (version, env_steps) parsed from the name.

    Temp files, best checkpoints and unrelated files are ignored. A missing directory yields ``[]``.
    """
    ckpt_dir = Path(ckpt_dir)
    if not ckpt_dir.is_dir():
        return []
    found: list[tuple[int, int, Path]] = []
    for p in ckpt_dir.iterdir():
        m = _CKPT_RE.match(p.name)
        if m is not None and p.is_file():
            found.append((int(m.group(1)), int(m.group(2)), p))
    found.sort(key=lambda t: (t[0], t[1]))
    return [p for _, _, p in found]


def _list_best(ckpt_dir: Path) -> list[Path]:
    """Best checkpoints sorted oldest to newest by (version, env_steps); normally at most one exists."""
    if not ckpt_dir.is_dir():
        return []
    found: list[tuple[int, int, Path]] = []
    for p in ckpt_dir.iterdir():
        m = _BEST_RE.match(p.name)
        if m is not None and p.is_file():
            found.append((int(m.group(1)), int(m.group(2)), p))
    found.sort(key=lambda t: (t[0], t[1]))
    return [p for _, _, p in found]


def save_checkpoint(ckpt_dir: Path, state: dict[str, Any], version: int, env_steps: int, keep: int) -> Path:
    """Atomically save a regular checkpoint and prune old ones.

    Args:
        ckpt_dir: learner checkpoint directory (created if missing).
        state: weights_only-compatible state (tensors, dicts, lists, ints, floats, strings, bools).
        version: policy version (number of learner updates); orders checkpoints.
        env_steps: environment steps consumed so far.
        keep: number of newest regular checkpoints to retain; ``<= 0`` disables pruning.

    Returns:
        Path of the written checkpoint.
    """
    ckpt_dir = Path(ckpt_dir)
    path = _atomic_save(state, ckpt_dir / checkpoint_name(version, env_steps))
    if keep > 0:
        # Prune only after the new file is durable, so a crash here can never leave fewer than `keep` good files.
        existing = list_checkpoints(ckpt_dir)
        for old in existing[: max(len(existing) - keep, 0)]:
            if old != path:
                with contextlib.suppress(OSError):
                    old.unlink()
    return path


def save_best(ckpt_dir: Path, state: dict[str, Any], version: int, env_steps: int, metric: float) -> Path:
    """Atomically save the best checkpoint, replacing any previous best.

    Args:
        ckpt_dir: learner checkpoint directory (created if missing).
        state: weights_only-compatible state.
        version: policy version.
        env_steps: environment steps consumed so far.
        metric: the score that made this the best (e.g. mean episode return), embedded in the name.

    Returns:
        Path of the written best checkpoint.
    """
    ckpt_dir = Path(ckpt_dir)
    path = _atomic_save(state, ckpt_dir / best_name(version, env_steps, metric))
    # Remove the old best only after the new one is in place, so there is always at least one best on disk.
    for old in _list_best(ckpt_dir):
        if old != path:
            with contextlib.suppress(OSError):
                old.unlink()
    return path


def find_best(ckpt_dir: Path) -> Path | None:
    """Path of the best checkpoint in ``ckpt_dir`` (the newest if a crash left several), or None."""
    best = _list_best(Path(ckpt_dir))
    return best[-1] if best else None


def best_metric(ckpt_dir: Path) -> float:
    """The score of the best checkpoint in ``ckpt_dir`` (as its name holds it), -inf where there is none."""
    best = find_best(ckpt_dir)
    match = _BEST_RE.match(best.name) if best is not None else None
    try:
        return float(match.group(3)) if match is not None else -math.inf
    except ValueError:
        return -math.inf


def load_checkpoint(path: Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """Load a checkpoint with ``weights_only=True``; arbitrary pickled objects are refused (raises).

    Args:
        path: checkpoint file.
        map_location: device to map tensors onto.

    Returns:
        The saved state dict.
    """
    return torch.load(Path(path), map_location=map_location, weights_only=True)


def load_latest(ckpt_dir: Path, map_location: str | torch.device = "cpu") -> tuple[dict[str, Any], Path] | None:
    """Load the newest regular checkpoint that loads cleanly.

    A file that fails to load (truncated, corrupted, or refused by weights_only) is skipped with a warning on the
    ``appo`` logger and the previous one is tried, so a crash during the last save costs one checkpoint interval
    rather than the run.

    Args:
        ckpt_dir: learner checkpoint directory.
        map_location: device to map tensors onto.

    Returns:
        ``(state, path)`` of the newest loadable checkpoint, or None if there is none.
    """
    for path in reversed(list_checkpoints(Path(ckpt_dir))):
        try:
            return load_checkpoint(path, map_location=map_location), path
        except Exception as e:  # any load failure means "unusable file": fall back to an older one
            log.warning(
                "failed to load checkpoint %s (%s: %s); falling back to an older one", path, type(e).__name__, e
            )
    return None


REPLAY_FILE = "replay.pth"  # beside the checkpoints: an off-policy algorithm's replay (--save_replay)
REPLAY_STAMP = "saved_with_checkpoint"  # in the replay file: the version and env steps of its checkpoint


def save_replay(ckpt_dir: Path, replay: dict[str, Any], version: int, env_steps: int) -> None:
    """An off-policy algorithm's replay beside the checkpoints, stamped with the checkpoint it goes with (a kill
    between the two writes shows on resume)."""
    stamp = {"version": version, "env_steps": env_steps}
    save_snapshot({**replay, REPLAY_STAMP: stamp}, ckpt_dir / REPLAY_FILE)


def load_replay(
    ckpt_dir: Path, device: str, policy_id: int, checkpoint: Path, version: int, env_steps: int
) -> dict[str, Any] | None:
    """The replay saved beside the checkpoints (None: there is none). One saved with another checkpoint than the one
    resumed (`checkpoint`, at `version` and `env_steps`: the learner was killed between the two writes, or the
    newest checkpoint was unreadable) is loaded all the same (its transitions are as good), with a warning naming
    both."""
    if not (ckpt_dir / REPLAY_FILE).is_file():
        return None
    state = load_checkpoint(ckpt_dir / REPLAY_FILE, device)
    stamp = state.pop(REPLAY_STAMP, None)
    if stamp is not None and (int(stamp["version"]), int(stamp["env_steps"])) != (version, env_steps):
        log.warning(
            "learner %d: %s was saved with the checkpoint of version %d (%d env steps), not with %s (version %d, "
            "%d env steps): it holds the transitions up to then",
            policy_id,
            REPLAY_FILE,
            int(stamp["version"]),
            int(stamp["env_steps"]),
            checkpoint.name,
            version,
            env_steps,
        )
    return state
