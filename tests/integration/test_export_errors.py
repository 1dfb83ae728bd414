"""`python -m appo.export` and `appo.load_policy` on runs that are not quite right: `latest` skips an unreadable
newest checkpoint (as enjoy.py), a bad cfg.json or an env that cannot be built is one line (exit 2 / ValueError),
an --out without a suffix gets the format's and a wrong one for npz is refused, `--policy_index=best` reads
best_policy.json and a checkpoint other than the latest gets its own default file; `Run.finished` says whether
`appo.train` reached the run's budget (its status is 0 either way)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import appo
from appo.utils.paths import CHECKPOINT_RE
from tests.conftest import ROOT

SMALL = dict(num_workers=1, num_envs_per_worker=4, rollout=16, batch_size=256)


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    train_dir = tmp_path_factory.mktemp("train_dir")
    run = appo.train(env="CartPole-v1", experiment="done", train_dir=str(train_dir), train_for_env_steps=4096, **SMALL)
    assert run.status == 0 and run.finished, run
    return run.run_dir


def export(run: Path, *flags: str) -> subprocess.CompletedProcess:
    args = [f"--train_dir={run.parent}", f"--experiment={run.name}", *flags]
    return subprocess.run(
        [sys.executable, "-m", "appo.export", *args], cwd=ROOT, capture_output=True, text=True, timeout=120
    )


def one_error_line(done: subprocess.CompletedProcess, *expected: str) -> None:
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    assert all(e in lines[0] for e in expected), lines[0]


def copy_run(run: Path, name: str) -> Path:
    return Path(shutil.copytree(run, run.parent / name))


@pytest.mark.timeout(120)
def test_a_run_stopped_by_its_time_limit_is_not_finished(tmp_path):
    run = appo.train(
        env="CartPole-v1",
        experiment="cut",
        train_dir=str(tmp_path),
        train_for_env_steps=10**8,
        train_for_seconds=2,
        **SMALL,
    )
    assert run.status == 0 and not run.finished, run


@pytest.mark.timeout(120)
def test_latest_skips_an_unreadable_newest_checkpoint(trained):
    run = copy_run(trained, "torn")
    ckpt_dir = run / "checkpoint_p0"
    good = max(p for p in ckpt_dir.iterdir() if CHECKPOINT_RE.match(p.name))
    version, steps = (int(g) for g in CHECKPOINT_RE.match(good.name).groups())
    torn = ckpt_dir / f"checkpoint_{version + 1:09d}_{steps + 1}.pth"
    torn.write_bytes(good.read_bytes()[:100])
    done = export(run)
    assert done.returncode == 0 and f"from {good})" in done.stdout, done.stdout + done.stderr
    assert str(torn) in done.stderr and "falling back" in done.stderr, done.stderr
    assert appo.load_policy(run).source["checkpoint"] == str(good)


@pytest.mark.timeout(120)
def test_bad_cfg_json_and_an_env_not_buildable_are_one_line(trained):
    bad = copy_run(trained, "badcfg")
    (bad / "cfg.json").write_text("{not json")
    unknown = copy_run(trained, "unknown_env")
    cfg = json.loads((unknown / "cfg.json").read_text())
    (unknown / "cfg.json").write_text(json.dumps({**cfg, "env": "NoSuchEnv-v0"}))
    for run, expected in ((bad, str(bad / "cfg.json")), (unknown, "NoSuchEnv-v0")):
        one_error_line(export(run), expected)
        with pytest.raises(ValueError, match="^[^\n]*$") as caught:
            appo.load_policy(run)
        assert expected in str(caught.value)
        assert not (run / "export").exists()


@pytest.mark.timeout(120)
def test_out_gets_the_format_suffix_and_a_wrong_or_unwritable_one_is_refused(trained, tmp_path):
    done = export(trained, f"--out={tmp_path / 'noext'}")
    assert done.returncode == 0 and f"wrote {tmp_path / 'noext.npz'} " in done.stdout, done.stdout + done.stderr
    assert appo.load_policy(tmp_path / "noext.npz").source["env_steps"] >= 4096
    one_error_line(export(trained, f"--out={tmp_path / 'x.foo'}"), f"--out={tmp_path / 'x.foo'}", ".npz")
    one_error_line(export(trained, "--out=/proc/nope/x.npz"), "--out=/proc/nope/x.npz")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["noext.npz"]


@pytest.mark.timeout(120)
def test_policy_index_best_and_a_checkpoint_other_than_the_latest_get_their_own_file(trained):
    run = copy_run(trained, "picks")
    latest = max(p for p in (run / "checkpoint_p0").iterdir() if CHECKPOINT_RE.match(p.name))
    older = run / "checkpoint_p0" / "checkpoint_000000000_1.pth"
    shutil.copyfile(latest, older)
    done = export(run, "--policy_index=best", f"--checkpoint={older}")
    assert done.returncode == 0 and f"from {older})" in done.stdout, done.stdout + done.stderr
    assert appo.load_policy(run / "export" / f"policy_p0_{older.stem}.npz").source["checkpoint"] == str(older)
    assert export(run).returncode == 0
    assert appo.load_policy(run / "export" / "policy_p0.npz").source["checkpoint"] == str(latest)
    assert appo.load_policy(run, policy_index="best").source["checkpoint"] == str(latest)
    one_error_line(export(run, "--policy_index=1"), "--policy_index=1", "0..0")
    (run / "best_policy.json").unlink()
    one_error_line(export(run, "--policy_index=best"), "--policy_index=best", "best_policy.json")
    with pytest.raises(ValueError, match="^--policy_index=best: .*best_policy.json"):
        appo.load_policy(run, policy_index="best")
