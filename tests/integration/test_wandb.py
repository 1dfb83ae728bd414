"""--with_wandb on real runs, offline (WANDB_MODE=offline): a short serial CartPole run with two policies writes one
wandb run per policy whose history holds every tensorboard scalar at the same env steps; enjoy.py --save_video logs
its mp4 into the policy's run (resumed by the id in wandb_ids.json); without wandb, --with_wandb is one error line.

The offline runs are read back from the `.wandb` file wandb writes: a LevelDB-style log (a 7-byte `:W&B` header,
32 KiB blocks, records of crc32/length/type chunks) of wandb's own `Record` protobufs (wandb.proto). wandb 0.31 has no
Python reader of it any more (`wandb sync` hands the file to wandb-core), so the framing is read here and checked
by every chunk's CRC; the records are parsed by wandb's protobuf classes."""

from __future__ import annotations

import json
import math
import os
import re
import signal
import struct
import subprocess
import sys
import threading
import time
import zlib
from pathlib import Path

import numpy as np
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from appo.learning.checkpoint import list_checkpoints
from tests.conftest import ROOT, _kill_group, run_script
from tests.integration.test_faults import start

BLOCK, HEADER = 32768, 7  # the log's block size; the size of the file header and of each chunk's header
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4
MISSING = "error: --with_wandb: cannot import wandb (No module named 'wandb'); pip install 'appo[wandb]'"


def read_records(path: Path) -> list:
    """Every Record of a .wandb file, in order; a chunk whose CRC does not match fails the test."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B", f"{path}: not a wandb transaction log"
    records, pending, pos = [], b"", HEADER
    while pos + HEADER <= len(data):
        if BLOCK - pos % BLOCK < HEADER:  # a block's tail too short for a chunk header is padding
            pos += BLOCK - pos % BLOCK
            continue
        crc, length, kind = struct.unpack("<IHB", data[pos : pos + HEADER])
        chunk = data[pos + HEADER : pos + HEADER + length]
        pos += HEADER + length
        if kind == 0:  # zeros: the rest of a block (or of a file being written)
            continue
        assert zlib.crc32(bytes([kind]) + chunk) == crc, f"{path}: bad chunk at {pos}"
        pending = chunk if kind in (FULL, FIRST) else pending + chunk
        if kind in (FULL, LAST):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            records.append(record)
    return records


def offline_runs(wandb_dir: Path, run_id: str) -> list[list]:
    """The records of every offline run directory of `run_id` (one per session that opened it), oldest first."""
    files = sorted(wandb_dir.glob(f"wandb/offline-run-*-{run_id}/run-{run_id}.wandb"))
    return [read_records(f) for f in files]


def of_type(records: list, kind: str) -> list:
    return [getattr(r, kind) for r in records if r.WhichOneof("record_type") == kind]


def history(records: list) -> list[dict]:
    """The rows of the run's history. An item names its key in `key`, or as a path in `nested_key` (a media
    value, such as a video, is stored as one item per field: ["video/enjoy", "_type"], ...): rebuilt as dicts."""
    rows = []
    for h in of_type(records, "history"):
        row: dict = {}
        for item in h.item:
            *parents, name = [item.key] if item.key else list(item.nested_key)
            node = row
            for part in parents:
                node = node.setdefault(part, {})
            node[name] = json.loads(item.value_json)
        rows.append(row)
    return rows


def as_f32(value: float) -> str:
    """Tensorboard keeps float32: compare at that precision (NaN equal to NaN)."""
    return "nan" if math.isnan(value) else repr(np.float32(value))


@pytest.fixture
def wandb_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Offline wandb with every file of it under tmp_path (runs, config, cache): nothing leaves the machine.
    Returns WANDB_DIR. Skipped where wandb is not installed; CI installs it (.ci/run: the [wandb] extra)."""
    pytest.importorskip("wandb")
    for name in ("WANDB_DIR", "WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR"):
        (tmp_path / name.lower()).mkdir()
        monkeypatch.setenv(name, str(tmp_path / name.lower()))
    monkeypatch.setenv("WANDB_MODE", "offline")
    return Path(os.environ["WANDB_DIR"])


def test_wandb_mirrors_tensorboard_and_logs_the_video(train_dir, wandb_env):
    args = ["--env=CartPole-v1", f"--train_dir={train_dir}", "--experiment=cp", "--serial_mode=True"]
    args += ["--num_workers=2", "--num_envs_per_worker=4", "--rollout=16", "--batch_size=256", "--device=cpu"]
    args += ["--num_policies=2", "--report_interval=0.3", "--eval_interval=6000", "--eval_episodes=2"]
    args += ["--train_for_env_steps=16000", "--with_wandb", "--wandb_tags=smoke,cartpole"]
    run_script("train_appo.py", args, check=True)
    exp = train_dir / "cp"
    ids = json.loads((exp / "wandb_ids.json").read_text())
    assert sorted(ids) == ["0", "1"] and ids["0"] != ids["1"]

    for pid in (0, 1):
        (records,) = offline_runs(wandb_env, ids[str(pid)])
        (run,) = of_type(records, "run")
        assert (run.run_id, run.display_name, run.run_group) == (ids[str(pid)], f"cp_p{pid}", "cp")
        assert (run.project, list(run.tags)) == ("appo", ["smoke", "cartpole"])
        config = {i.key: json.loads(i.value_json) for c in [run.config, *of_type(records, "config")] for i in c.update}
        assert (config["env"], config["policy_id"], config["with_wandb"]) == ("CartPole-v1", pid, True)
        assert any(m.glob_name == "*" and m.step_metric == "env_steps" for m in of_type(records, "metric"))

        # Every tensorboard scalar, and nothing else, at the same env steps with the same value.
        acc = EventAccumulator(str(exp / "summaries" / str(pid)), size_guidance={"scalars": 0})
        acc.Reload()
        tb = {tag: sorted((e.step, as_f32(e.value)) for e in acc.Scalars(tag)) for tag in acc.Tags()["scalars"]}
        wb: dict[str, list] = {}
        for row in history(records):
            for key, value in row.items():
                if not key.startswith("_") and key != "env_steps":
                    wb.setdefault(key, []).append((row["env_steps"], as_f32(value)))
        assert {k: sorted(v) for k, v in wb.items()} == tb
        steps = [s for s, _ in tb["episode/return_mean"]]
        assert len(set(steps)) >= 2 and max(steps) >= 16000, steps
        assert "eval/return_mean" in tb and "train/policy_loss" in tb

    # enjoy.py --save_video of policy 1: the mp4 lands in policy 1's wandb run, at its checkpoint's env steps.
    flags = [f"--train_dir={train_dir}", "--experiment=cp", "--policy_index=1", "--save_video", "--max_num_episodes=1"]
    result = run_script("enjoy.py", flags)
    assert result.returncode == 0, result.stdout[-3000:]
    assert f"video: logged to wandb run {ids['1']} (project appo)" in result.stdout
    (video,) = (exp / "videos").glob("*.mp4")
    trained, enjoyed = offline_runs(wandb_env, ids["1"])  # the same run id, one session folder each
    assert not any("video/enjoy" in row for row in history(trained))
    (row,) = [row for row in history(enjoyed) if "video/enjoy" in row]
    assert row["video/enjoy"]["_type"] == "video-file"
    assert row["env_steps"] == int(list_checkpoints(exp / "checkpoint_p1")[-1].stem.split("_")[-1])
    (media,) = wandb_env.glob(f"wandb/offline-run-*-{ids['1']}/files/{row['video/enjoy']['path']}")
    assert media.read_bytes() == video.read_bytes()
    assert len(offline_runs(wandb_env, ids["0"])) == 1  # policy 0's run untouched


def test_ctrl_c_finishes_the_wandb_run(train_dir, wandb_env):
    """SIGINT to the run's process group (Ctrl-C) while it trains: the wandb run ends with its exit record, its
    history the tensorboard file's (the last report, written at shutdown, included)."""
    args = ["--env=CartPole-v1", f"--train_dir={train_dir}", "--experiment=cc", "--serial_mode=True", "--device=cpu"]
    args += ["--num_workers=2", "--num_envs_per_worker=4", "--rollout=16", "--report_interval=0.3"]
    proc = start([*args, "--train_for_seconds=600", "--with_wandb"])
    lines: list[str] = []

    def read() -> None:
        for line in proc.stdout:
            lines.append(line)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    deadline = time.monotonic() + 120
    # Two reports with a return (not "return nan": no episode ended yet, as on a slow machine's first reports), so
    # the tensorboard file holds episode/return_mean before the Ctrl-C.
    while (
        sum(re.search(r"\| p0: return (?!nan)", line) is not None for line in list(lines)) < 2 and proc.poll() is None
    ):
        assert time.monotonic() < deadline, "".join(lines)[-3000:]
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGINT)  # as a terminal's Ctrl-C (wandb's own process runs in a session of its own)
    assert proc.wait(timeout=60) == 0, "".join(lines)[-3000:]  # a run stopped by SIGINT exits 0
    reader.join(timeout=5)
    assert not _kill_group(proc.pid)
    (run_id,) = json.loads((train_dir / "cc" / "wandb_ids.json").read_text()).values()
    (records,) = offline_runs(wandb_env, run_id)
    assert len(of_type(records, "exit")) == 1
    acc = EventAccumulator(str(train_dir / "cc" / "summaries" / "0"), size_guidance={"scalars": 0})
    acc.Reload()
    tb = [(e.step, as_f32(e.value)) for e in acc.Scalars("episode/return_mean")]
    wb = [
        (row["env_steps"], as_f32(row["episode/return_mean"]))
        for row in history(records)
        if "episode/return_mean" in row
    ]
    assert len(tb) >= 2 and sorted(wb) == sorted(tb)


def test_with_wandb_without_wandb_is_one_error_line(train_dir, tmp_path, monkeypatch):
    """A wandb that cannot be imported (a stand-in package first on PYTHONPATH): exit 2, one line naming the flag
    and the extra, nothing written; without the flag, the driver's summaries never import wandb."""
    fake = tmp_path / "no_wandb" / "wandb"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'wandb'\", name='wandb')\n")
    monkeypatch.setenv("PYTHONPATH", str(fake.parent))
    args = ["--env=CartPole-v1", f"--train_dir={train_dir}", "--experiment=nw", "--with_wandb"]
    result = run_script("train_appo.py", args)
    assert result.returncode == 2, result.stdout[-3000:]
    assert [line for line in result.stdout.splitlines() if line.strip()] == [MISSING]
    assert not (train_dir / "nw").exists()

    probe = (
        "import sys; from pathlib import Path; from appo.config.cfg import Cfg; from appo.config.verify import verify;"
        "from appo.driver.stats import SummaryWriters; cfg = Cfg(env='CartPole-v1'); assert verify(cfg) == [];"
        f"SummaryWriters(Path({str(tmp_path / 'tb')!r}), 2, cfg).close(); assert 'wandb' not in sys.modules"
    )
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
