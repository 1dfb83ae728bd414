"""Config: precedence, explicit-flag detection, derived values, verify messages and exit code 2."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace

import pytest

from appo.config.cfg import Cfg, build_parser, merge_cfg, parse_cfg
from appo.config.derive import derive
from appo.config.verify import verify
from appo.envs.mujoco.family import MUJOCO_PRESET
from tests.conftest import ROOT


def test_parser_reports_only_explicit_flags():
    ns = build_parser().parse_args(
        ["--num_workers=4", "--async_rl=False", "--use_rnn", "--encoder_mlp_layers", "8", "8"]
    )
    assert vars(ns) == {"num_workers": 4, "async_rl": False, "use_rnn": True, "encoder_mlp_layers": [8, 8]}


def test_precedence_defaults_preset_saved_explicit():
    saved = {"learning_rate": 0.5, "num_workers": 7, "batch_size": 2048, "train_for_seconds": 9.0}
    cfg = merge_cfg({"env": "HalfCheetah-v5", "num_workers": 3}, saved)
    assert cfg.num_workers == 3  # explicit beats saved
    assert cfg.learning_rate == 0.5  # saved beats preset (0.00295)
    assert cfg.num_epochs == MUJOCO_PRESET["num_epochs"]  # preset beats default (1)
    assert cfg.gamma == Cfg.gamma  # default where nobody says otherwise
    assert cfg.train_for_seconds == Cfg.train_for_seconds  # session flags are not resumed


def test_resume_reads_saved_cfg(tmp_path):
    exp = tmp_path / "exp"
    exp.mkdir()
    (exp / "cfg.json").write_text(json.dumps({"env": "CartPole-v1", "rollout": 16, "batch_size": 256}))
    cfg = parse_cfg([f"--train_dir={tmp_path}", "--experiment=exp", "--batch_size=512"])
    assert (cfg.env, cfg.rollout, cfg.batch_size) == ("CartPole-v1", 16, 512)


def test_derived_values_async_and_sync():
    cfg = Cfg(
        num_workers=2,
        num_envs_per_worker=8,
        worker_num_splits=2,
        rollout=64,
        batch_size=1024,
        num_batches_per_epoch=4,
        async_rl=False,
    )
    d = derive(cfg)
    assert d.envs_per_split == 4 and d.num_envs_total == 16 and d.samples_per_iteration == 4096
    assert d.slot_groups_per_split == 4  # 4096 / (16 envs * 64 steps): each env fills 4 rollouts
    assert d.num_slots == 4 * 4 * 4
    # 16 workers: one round (16*8 envs * 64 steps = 8192) exceeds 4096, so an iteration is one whole round
    # of 8 minibatches of 1024: still zero lag, same minibatch size.
    d16 = derive(
        Cfg(num_workers=16, num_envs_per_worker=8, rollout=64, batch_size=1024, num_batches_per_epoch=4, async_rl=False)
    )
    assert (d16.samples_per_iteration, d16.minibatches_per_epoch, d16.slot_groups_per_split) == (8192, 8, 1)
    d_async = derive(Cfg(num_workers=2, num_envs_per_worker=8, rollout=64, batch_size=1024))
    assert d_async.slot_groups_per_split == 1 + 2  # one filling + 2 iterations of 1024 over 1024-step rounds
    # --collect_ahead: the same iteration, and room for a second one filled while the learner trains.
    d_ahead = derive(replace(cfg, collect_ahead=True))
    assert (d_ahead.samples_per_iteration, d_ahead.minibatches_per_epoch) == (d.samples_per_iteration, 4)
    assert d_ahead.slot_groups_per_split == 2 * d.slot_groups_per_split


def test_verify_names_flag_and_valid_values():
    errors = verify(Cfg(num_envs_per_worker=5, worker_num_splits=2, nonlinearity="sigmoid", batch_size=100))
    assert any(e.startswith("--num_envs_per_worker=5") and "--worker_num_splits=2" in e for e in errors)
    assert any(e.startswith("--nonlinearity=sigmoid") and "tanh, relu, elu" in e for e in errors)
    assert any(e.startswith("--batch_size=100") and "--rollout=64" in e for e in errors)
    assert verify(Cfg()) == []


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["--num_workers=0"], "--num_workers=0: must be > 0"),
        (["--rnn_type=tcn"], "--rnn_type=tcn: must be one of"),
        (["--doom_damage_reward=-0.01"], "--doom_damage_reward=-0.01: must be >= 0"),
    ],
)
def test_bad_flag_exits_2_with_one_line(tmp_path, args, fragment):
    proc = subprocess.run(
        [sys.executable, "train_appo.py", "--env=CartPole-v1", f"--train_dir={tmp_path}", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2, proc.stderr
    assert fragment in proc.stderr
    assert not (tmp_path / "default").exists(), "nothing may be written for a rejected cfg"


def test_a_train_dir_that_is_a_file_exits_2_naming_the_flag(tmp_path):
    (tmp_path / "afile").write_text("")
    argv = [sys.executable, "train_appo.py", "--env=CartPole-v1", f"--train_dir={tmp_path / 'afile'}", "--experiment=x"]
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr[-2000:]
    assert f"--train_dir={tmp_path / 'afile'}: cannot make the run folder" in proc.stderr


def test_unknown_flag_exits_2(tmp_path):
    proc = subprocess.run(
        [sys.executable, "train_appo.py", "--nmu_workers=3"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2 and "--nmu_workers" in proc.stderr


@pytest.mark.parametrize(
    "content, fragment",
    [
        ("{not json", "unreadable saved config"),
        ('{"env": "CartPole-v1", "warp_drive": 1}', "unknown settings: warp_drive"),
        ('{"env": "CartPole-v1", "num_workers": "2"}', "num_workers is '2', where it takes a value like"),
        ('{"env": "CartPole-v1", "encoder_mlp_layers": 64}', "encoder_mlp_layers is 64, where it takes a value like"),
        ('{"env": "CartPole-v1", "use_rnn": 1}', "use_rnn is 1, where it takes a value like False"),
    ],
)
def test_bad_saved_cfg_json_exits_2_and_is_left_alone(tmp_path, content, fragment):
    exp = tmp_path / "old"
    exp.mkdir()
    (exp / "cfg.json").write_text(content)
    proc = subprocess.run(
        [sys.executable, "train_appo.py", f"--train_dir={tmp_path}", "--experiment=old"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1 and fragment in proc.stderr
    assert (exp / "cfg.json").read_text() == content


@pytest.mark.parametrize(
    ("algo", "env"),
    [("maml_trpo", "navigation2d"), ("sac", "Pendulum-v1"), ("udrl", "CartPole-v1"), ("rcp_r", "CartPole-v1")],
)
@pytest.mark.parametrize(
    ("flag", "message"),
    [
        ("--with_pbt=True", "--with_pbt: not supported with --algo={algo} (one policy per run)"),
        ("--num_policies=2", "--num_policies=2: --algo={algo} trains exactly one policy; use 1"),
        ("--use_rnn=True", "--use_rnn=True: --algo={algo} has "),
    ],
)
def test_single_policy_algorithms_refuse_populations_and_rnns_in_one_line(tmp_path, algo, env, flag, message):
    errors = verify(parse_cfg([f"--algo={algo}", f"--env={env}", f"--train_dir={tmp_path}", flag]))
    expected = message.format(algo=algo)
    assert any(e.startswith(expected) and "\n" not in e for e in errors), errors


def test_sacs_learner_threads_are_the_cores_the_run_leaves_free():
    """Regression: SAC's --learner_threads=2 was a constant; on 2 cores with the actors running one thread was 3x
    faster. 0 (SAC's default) means the cores the actor workers and other learners leave free, 1 to 4."""
    from appo.config.cfg import merge_cfg
    from appo.config.derive import learner_threads

    sac = merge_cfg({"env": "Pendulum-v1", "algo": "sac", "num_workers": 2}, None)
    assert sac.learner_threads == 0
    assert learner_threads(sac, cores=2) == 1 and learner_threads(sac, cores=4) == 2
    assert learner_threads(sac, cores=16) == 4
    assert learner_threads(merge_cfg({"env": "CartPole-v1"}, None), cores=16) == 1  # PPO keeps one
