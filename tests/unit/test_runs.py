"""appo.tools.runs on fake run folders: a cfg.json written as the driver writes it, empty files under the
checkpoint names the learner writes, and event files written by tensorboardX as the driver's stats do. The
table's fields and order, the latest run (what enjoy.py picks without --experiment), the one-line errors of a
train_dir without runs, and the torch-free import."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from tensorboardX import SummaryWriter

from appo import cli
from appo.config.cfg import cfg_to_dict, make_cfg
from appo.learning.checkpoint import best_name, checkpoint_name, list_checkpoints
from appo.tools import runs as R
from appo.utils.paths import cfg_path, checkpoint_dir, checkpoint_steps, summaries_dir, write_text_atomic
from tests.conftest import ROOT

TAG = "episode/return_mean"
T0 = 1_700_000_000.0  # the mtimes below: T0 + seconds


def touch(path: Path, when: float) -> Path:
    os.utime(path, (T0 + when, T0 + when))
    return path


def make_run(train_dir: Path, name: str, when: float, env: str = "CartPole-v1", algo: str = "appo") -> Path:
    """A run folder with only its cfg.json, written at T0 + when."""
    run = train_dir / name
    run.mkdir(parents=True)
    cfg = make_cfg({"env": env, "algo": algo, "experiment": name, "train_dir": str(train_dir)})
    write_text_atomic(cfg_path(run), json.dumps(cfg_to_dict(cfg), indent=2) + "\n")
    touch(cfg_path(run), when)
    return run


def add_checkpoint(run: Path, version: int, env_steps: int, when: float, policy: int = 0, best: float | None = None):
    folder = checkpoint_dir(run, policy)
    folder.mkdir(exist_ok=True)
    name = checkpoint_name(version, env_steps) if best is None else best_name(version, env_steps, best)
    (folder / name).write_bytes(b"")
    return touch(folder / name, when)


def write_session(run: Path, scalars: list[tuple[str, float, int]], when: float, policy: int = 0) -> Path:
    """One training session's event file of a policy: (tag, value, env steps) in order, as the driver logs."""
    folder = summaries_dir(run, policy)
    before = set(folder.glob("events.out.tfevents.*"))
    # Sessions of a test start within one second: a suffix keeps their file names (time.host) apart.
    writer = SummaryWriter(str(folder), filename_suffix=f".session{len(before)}")
    for tag, value, step in scalars:
        writer.add_scalar(tag, value, step)
    writer.close()
    (path,) = set(folder.glob("events.out.tfevents.*")) - before
    return touch(path, when)


def reports(steps: range, value, tags=(TAG, "episode/return_mean_smoothed", "train/loss")):  # noqa: ANN001
    """Every report writes several tags; one starts with the return's tag, which must not be mistaken for it."""
    return [(tag, value(step) + 1000 * i, step) for step in steps for i, tag in enumerate(tags)]


def test_checkpoint_names_parse_without_torch_helpers():
    assert checkpoint_steps(checkpoint_name(7, 123456)) == (7, 123456)
    assert checkpoint_steps(best_name(12, 98304, -3.25)) == (12, 98304)
    for other in ("replay.pth", "pbt_snapshot_for_p1.pth", checkpoint_name(1, 2) + ".tmp", "cfg.json"):
        assert checkpoint_steps(other) is None
    assert R.checkpoint_files(Path("/nonexistent")) == []


def test_list_runs_reads_env_steps_return_and_checkpoint_newest_first(tmp_path):
    old = make_run(tmp_path, "old", when=0, env="Pendulum-v1", algo="sac")
    add_checkpoint(old, 10, 5000, when=50)
    write_session(old, reports(range(1000, 6000, 1000), lambda s: -s / 1000), when=60)
    new = make_run(tmp_path, "new", when=100)
    add_checkpoint(new, 3, 3000, when=110)
    add_checkpoint(new, 9, 9000, when=180)
    add_checkpoint(new, 6, 6000, when=170, best=42.5)
    write_session(new, reports(range(2000, 10_001, 2000), lambda s: s / 100), when=190)
    (tmp_path / "notes").mkdir()  # a folder without cfg.json is no run
    touch(tmp_path / "notes", 999)

    found = R.list_runs(tmp_path)

    assert [r.name for r in found] == ["new", "old"]
    first, second = found
    assert (first.env, first.algo, first.env_steps, first.last_return) == ("CartPole-v1", "appo", 9000, 100.0)
    assert first.last_checkpoint == checkpoint_dir(new, 0) / checkpoint_name(9, 9000)
    assert first.checkpoint_written == T0 + 180 and first.written == T0 + 190 and first.path == new
    assert (second.env, second.algo, second.env_steps, second.last_return) == ("Pendulum-v1", "sac", 5000, -5.0)
    assert second.written == T0 + 60
    assert list_checkpoints(checkpoint_dir(new, 0))[-1] == first.last_checkpoint  # the learner's own order agrees


def test_last_return_comes_from_the_newest_session_that_logged_it(tmp_path):
    run = make_run(tmp_path, "resumed", when=0)
    write_session(run, reports(range(100, 501, 100), lambda s: s / 10), when=10)  # ends at 50.0
    second = write_session(run, reports(range(600, 801, 100), lambda s: s / 10), when=20)  # ends at 80.0
    assert R.last_scalar(summaries_dir(run, 0)) == (800, 80.0)
    # A third session that has reported only other tags so far: the second session's value still stands.
    write_session(run, [("train/loss", 1.0, 900)], when=30)
    info = R.read_run(run)
    assert (info.last_return, info.env_steps, info.last_checkpoint) == (80.0, 800, None)  # steps from the event
    assert R.last_in_file(second, "train/loss") == (800, 2000 + 80.0)
    assert R.last_in_file(second, "no/such_tag") is None


def test_event_file_cut_mid_record_still_reads(tmp_path):
    run = make_run(tmp_path, "live", when=0)
    path = write_session(run, reports(range(1, 4), float), when=5)
    data = path.read_bytes()
    path.write_bytes(data + data[-40:-5])  # a record the writer had not finished when we looked
    assert R.last_in_file(path, TAG) == (3, 3.0)


def test_several_policies_show_the_best_return(tmp_path):
    run = make_run(tmp_path, "pbt", when=0)
    for policy, final in ((0, 10.0), (1, 30.0), (2, 20.0)):
        add_checkpoint(run, 5, 4000 + policy, when=10 + policy, policy=policy)
        write_session(run, [(TAG, final, 4000)], when=20, policy=policy)
    info = R.read_run(run)
    assert info.last_return == 30.0
    assert info.last_checkpoint == checkpoint_dir(run, 2) / checkpoint_name(5, 4002) and info.env_steps == 4002


def test_latest_run_is_the_one_with_the_newest_file(tmp_path):
    a = make_run(tmp_path, "a", when=0)
    b = make_run(tmp_path, "b", when=50)
    assert R.latest_run(tmp_path) == (b, T0 + 50)
    add_checkpoint(a, 1, 100, when=60)  # a checkpoint of a is now the newest file
    assert R.latest_run(tmp_path) == (a, T0 + 60)
    write_session(b, [(TAG, 1.0, 10)], when=70)  # and now b's summaries
    assert R.latest_run(tmp_path) == (b, T0 + 70)
    touch(cfg_path(a), 80)  # resuming a rewrites its cfg.json
    assert R.latest_run(tmp_path) == (a, T0 + 80)
    assert [r.name for r in R.list_runs(tmp_path)] == ["a", "b"]  # the table's first row is the latest run


def test_table_lists_every_run_newest_first(tmp_path, capsys):
    make_run(tmp_path, "first", when=0)
    second = make_run(tmp_path, "second", when=10, env="HalfCheetah-v5")
    add_checkpoint(second, 2, 12345, when=20)
    write_session(second, [(TAG, -1.5, 12000)], when=30)
    assert R.main([f"--train_dir={tmp_path}"]) == 0
    header, row1, row2 = capsys.readouterr().out.splitlines()
    assert (
        header.split() == "name env algo env steps last return last checkpoint checkpoint written run written".split()
    )
    assert row1.split()[:6] == [
        "second",
        "HalfCheetah-v5",
        "appo",
        "12,345",
        "-1.50",
        f"checkpoint_p0/{checkpoint_name(2, 12345)}",
    ]
    assert row2.split()[:6] == ["first", "CartPole-v1", "appo", "-", "-", "-"]


@pytest.mark.parametrize("exists", [True, False])
def test_no_runs_is_one_line_exit_2(tmp_path, capsys, exists):
    train_dir = tmp_path / "train_dir"
    if exists:
        (train_dir / "not_a_run").mkdir(parents=True)
    assert R.main([f"--train_dir={train_dir}"]) == 2
    with pytest.raises(SystemExit) as stop:
        cli.enjoy([f"--train_dir={train_dir}", "--no_render"])
    assert stop.value.code == 2
    out = capsys.readouterr()
    lines = [line for line in (out.out + out.err).splitlines() if line.strip()]
    assert len(lines) == 2 and lines[0] == lines[1], lines  # the same one line from both
    assert lines[0].startswith(f"error: --train_dir={train_dir}: ") and "train_appo.py" in lines[0]
    assert ("no runs in it" if exists else "no such folder") in lines[0]


def test_enjoy_with_experiment_typed_does_not_pick_the_latest(tmp_path, capsys):
    make_run(tmp_path, "other", when=0)
    assert cli.enjoy([f"--train_dir={tmp_path}", "--experiment=default", "--no_render"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"error: --experiment=default: no run at {tmp_path / 'default'} (cfg.json missing)"
    argv, note = cli.with_latest_experiment([f"--train_dir={tmp_path}", "--no_render"])
    assert argv[-1] == "--experiment=other" and note.startswith(
        f"no --experiment: using the latest run in {tmp_path}: other"
    )


def test_listing_runs_does_not_import_torch(tmp_path):
    run = make_run(tmp_path, "r", when=0)
    add_checkpoint(run, 1, 64, when=1)
    write_session(run, [(TAG, 2.0, 64)], when=2)
    code = (
        "import sys; from appo.tools.runs import list_runs; import appo.runs; "
        f"(info,) = list_runs({str(tmp_path)!r}); assert info.last_return == 2.0 and info.env_steps == 64; "
        "assert 'torch' not in sys.modules, 'torch imported'"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr


def test_an_atomic_write_that_fails_keeps_the_old_file_and_leaves_no_temporary(tmp_path, monkeypatch):
    path = tmp_path / "cfg.json"
    write_text_atomic(path, "old\n")
    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: synced.append(fd) or real_fsync(fd))
    write_text_atomic(path, "new\n")
    assert path.read_text() == "new\n" and len(synced) == 2  # the file's bytes, then the folder's entry

    def full_disk(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full_disk)
    with pytest.raises(OSError, match="No space left"):
        write_text_atomic(path, "lost\n")
    assert path.read_text() == "new\n" and sorted(p.name for p in tmp_path.iterdir()) == ["cfg.json"]
