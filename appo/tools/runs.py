"""The runs of a train_dir: which one was written last (enjoy.py without --experiment) and a table of them all.

    python -m appo.runs [--train_dir=DIR] [--tag=episode/return_mean]

A run is a folder `train_dir/NAME/` holding a cfg.json (a sweep's runs are one level down: pass
`--train_dir=train_dir/SWEEP`). A run was written when the newest of its cfg.json, checkpoint files
(`checkpoint_p<id>/`) and tensorboard event files (`summaries/<id>/`) was modified; the table is sorted by that,
newest first, and `latest_run` is its first row without reading any event file.

Torch-free and quick on many runs: env steps come from checkpoint file names (utils/paths.py), and the last
return from the newest event file of each policy that holds the tag: its records are walked by their framing
only, and the one record holding the tag's last value is decoded (no full parse of every event). With several
policies (PBT), the return shown is the best policy's last one."""

from __future__ import annotations

import argparse
import bisect
import json
import struct
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from appo.tools.plot import DEFAULT_TAG, PlotError, policy_summary_dirs
from appo.utils.paths import cfg_path, checkpoint_steps

DEFAULT_TRAIN_DIR = "./train_dir"  # RunCfg.train_dir's default; appo.config.cfg is not imported for one string


@dataclass(frozen=True)
class RunInfo:
    """One run as the table shows it; None where the run has nothing to say yet (no checkpoint, no summary)."""

    name: str
    path: Path
    env: str
    algo: str
    env_steps: int | None  # of the newest checkpoint, else the step of the last `tag` event
    last_return: float | None  # the last `tag` value (several policies: the best policy's)
    last_checkpoint: Path | None  # the newest checkpoint file (regular or best) of any policy
    checkpoint_written: float | None  # its modification time (seconds since the epoch)
    written: float  # the newest modification time of cfg.json, checkpoints and event files


# --- finding runs -------------------------------------------------------------------------------------------
def run_dirs(train_dir: str | Path) -> list[Path]:
    """The folders of `train_dir` holding a cfg.json, by name; [] when train_dir does not exist."""
    root = Path(train_dir)
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if p.is_dir() and cfg_path(p).is_file())


def _files(folder: Path, pattern: str) -> list[tuple[Path, float]]:
    """(path, mtime) of the files matching `pattern` in `folder`; files removed meanwhile (rotation) are skipped."""
    found = []
    for path in folder.glob(pattern):
        try:
            found.append((path, path.stat().st_mtime))
        except OSError:
            continue
    return found


def checkpoint_files(run_dir: Path) -> list[tuple[Path, float]]:
    """(path, mtime) of every regular and best checkpoint of every policy of the run, oldest first."""
    found = [(p, t) for p, t in _files(run_dir, "checkpoint_p*/*.pth") if checkpoint_steps(p.name) is not None]
    return sorted(found, key=lambda pt: (pt[1], checkpoint_steps(pt[0].name)))


def event_files(summary_dir: Path) -> list[tuple[Path, float]]:
    """(path, mtime) of the tensorboard event files of one policy, oldest first."""
    return sorted(_files(summary_dir, "events.out.tfevents.*"), key=lambda pt: (pt[1], pt[0].name))


def last_written(run_dir: Path) -> float:
    """When the run was last written: the newest mtime of its cfg.json, checkpoints and event files."""
    times = [cfg_path(run_dir).stat().st_mtime]
    times += [t for _, t in checkpoint_files(run_dir)]
    times += [t for _, t in _files(run_dir, "summaries/*/events.out.tfevents.*")]
    return max(times)


def latest_run(train_dir: str | Path) -> tuple[Path, float] | None:
    """(folder, last written) of the run of `train_dir` written most recently, or None if it holds no run."""
    written = []
    for run in run_dirs(train_dir):
        try:
            written.append((last_written(run), run.name, run))
        except OSError:  # removed while we looked
            continue
    if not written:
        return None
    when, _, run = max(written)
    return run, when


def no_runs_message(train_dir: str | Path) -> str:
    """The one-line error for a train_dir without runs (enjoy.py without --experiment, appo.runs)."""
    what = "no runs in it (no folder there holds a cfg.json)" if Path(train_dir).is_dir() else "no such folder"
    return f"--train_dir={train_dir}: {what}; train a run with train_appo.py, or pass the --train_dir of your runs"


def format_time(mtime: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(mtime))


# --- reading the last value of a tag ------------------------------------------------------------------------
def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _records(data: bytes) -> list[tuple[int, int]]:
    """(start, end) of the payload of every complete TFRecord: u64 length, u32 crc, payload, u32 crc. A record
    still being written at the end of the file is left out. CRCs are not checked (the decoder rejects garbage)."""
    bounds = []
    pos, size = 0, len(data)
    while pos + 12 <= size:
        (length,) = struct.unpack_from("<Q", data, pos)
        start = pos + 12
        end = start + length
        if end + 4 > size:
            break
        bounds.append((start, end))
        pos = end + 4
    return bounds


def _event_class() -> type:
    try:
        from tensorboard.compat.proto.event_pb2 import Event
    except ImportError:  # tensorboard is optional for reading; tensorboardX (which writes the files) is not
        from tensorboardX.proto.event_pb2 import Event
    return Event


def _scalar(value) -> float | None:  # noqa: ANN001 (a Summary.Value proto)
    kind = value.WhichOneof("value")
    if kind == "simple_value":
        return float(value.simple_value)
    if kind == "tensor":  # tensorboard's newer scalar summaries
        tensor = value.tensor
        if tensor.float_val or tensor.double_val:
            return float((tensor.float_val or tensor.double_val)[0])
        if tensor.tensor_content and tensor.dtype in (1, 2):  # DT_FLOAT, DT_DOUBLE
            return float(struct.unpack_from("<f" if tensor.dtype == 1 else "<d", tensor.tensor_content)[0])
    return None


def last_in_file(path: Path, tag: str) -> tuple[int, float] | None:
    """(step, value) of the last `tag` scalar in one event file, or None. The tag's encoding (a Summary.Value's
    field 1) is searched from the end of the file, and only the record holding it is decoded."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    needle = b"\x0a" + _varint(len(tag.encode())) + tag.encode()
    at = data.rfind(needle)
    if at < 0:
        return None
    bounds = _records(data)
    starts = [start for start, _ in bounds]
    event_cls = _event_class()
    while at >= 0:
        i = bisect.bisect_right(starts, at) - 1
        if i >= 0 and at + len(needle) <= bounds[i][1]:
            try:
                event = event_cls.FromString(data[bounds[i][0] : bounds[i][1]])
            except Exception:  # noqa: BLE001 (a damaged record: look further back)
                event = None
            for value in event.summary.value if event is not None else ():
                if value.tag == tag and (number := _scalar(value)) is not None:
                    return int(event.step), number
        at = data.rfind(needle, 0, at)
    return None


def last_scalar(summary_dir: Path, tag: str = DEFAULT_TAG) -> tuple[int, float] | None:
    """(step, value) of the last `tag` scalar of one policy: from its newest event file that has the tag (a
    resumed run writes a file per session), or None."""
    for path, _ in reversed(event_files(summary_dir)):
        found = last_in_file(path, tag)
        if found is not None:
            return found
    return None


# --- the table ----------------------------------------------------------------------------------------------
def read_run(run_dir: Path, tag: str = DEFAULT_TAG) -> RunInfo:
    """What the table shows of one run (a cfg.json that cannot be read shows `?` as env and algorithm)."""
    try:
        saved = json.loads(cfg_path(run_dir).read_text())
    except (OSError, json.JSONDecodeError):
        saved = {}
    saved = saved if isinstance(saved, dict) else {}
    checkpoints = checkpoint_files(run_dir)
    last_ckpt, ckpt_time = checkpoints[-1] if checkpoints else (None, None)
    try:
        policies = policy_summary_dirs(run_dir)
    except PlotError:  # the run never reported
        policies = []
    lasts = [found for _, folder in policies if (found := last_scalar(folder, tag)) is not None]
    env_steps = checkpoint_steps(last_ckpt.name)[1] if last_ckpt else max((s for s, _ in lasts), default=None)
    return RunInfo(
        name=run_dir.name,
        path=run_dir,
        env=str(saved.get("env", "?")),
        algo=str(saved.get("algo", "?")),
        env_steps=env_steps,
        last_return=max((v for _, v in lasts), default=None),
        last_checkpoint=last_ckpt,
        checkpoint_written=ckpt_time,
        written=last_written(run_dir),
    )


def list_runs(train_dir: str | Path, tag: str = DEFAULT_TAG) -> list[RunInfo]:
    """Every run of `train_dir`, the most recently written first; [] if there is none."""
    runs = []
    for run in run_dirs(train_dir):
        try:
            runs.append(read_run(run, tag))
        except OSError:  # removed while we looked
            continue
    return sorted(runs, key=lambda r: (r.written, r.name), reverse=True)


def format_table(runs: list[RunInfo], tag: str = DEFAULT_TAG) -> str:
    """A plain-text table, one row per run, columns aligned."""
    header = ["name", "env", "algo", "env steps", "last return" if tag == DEFAULT_TAG else tag]
    header += ["last checkpoint", "checkpoint written", "run written"]
    rows = [header]
    for r in runs:
        ckpt = f"{r.last_checkpoint.parent.name}/{r.last_checkpoint.name}" if r.last_checkpoint else "-"
        rows.append(
            [
                r.name,
                r.env,
                r.algo,
                f"{r.env_steps:,}" if r.env_steps is not None else "-",
                f"{r.last_return:.2f}" if r.last_return is not None else "-",
                ckpt,
                format_time(r.checkpoint_written) if r.checkpoint_written is not None else "-",
                format_time(r.written),
            ]
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    right = {3, 4}  # numbers
    lines = [
        "  ".join(
            cell.rjust(w) if i in right else cell.ljust(w) for i, (cell, w) in enumerate(zip(row, widths, strict=True))
        )
        for row in rows
    ]
    return "\n".join(line.rstrip() for line in lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m appo.runs", description="List the runs of a train_dir, the most recently written first."
    )
    parser.add_argument(
        "--train_dir", default=DEFAULT_TRAIN_DIR, help=f"root folder of runs (default: {DEFAULT_TRAIN_DIR})"
    )
    parser.add_argument("--tag", default=DEFAULT_TAG, help=f"scalar shown as the last return (default: {DEFAULT_TAG})")
    args = parser.parse_args(argv)
    runs = list_runs(args.train_dir, args.tag)
    if not runs:
        print(f"error: {no_runs_message(args.train_dir)}", file=sys.stderr)
        return 2
    print(format_table(runs, args.tag), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
