"""Several learner ranks per policy (--learner_world_size, DDP over gloo on this CPU), with real processes:
two ranks train exactly as one learner on the whole batch, every rank resumes from the same checkpoint, a killed
rank brings the run down cleanly (and the run resumes), and bad flags are refused before anything starts."""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from appo.config.cfg import Cfg
from appo.learning.checkpoint import list_checkpoints, save_snapshot
from appo.learning.distributed import state_digest
from appo.models.registry import make_model
from appo.protocol.messages import LoadPolicy
from tests.conftest import run_script
from tests.integration.test_faults import FAST, find, finish, start, wait_for_checkpoints
from tests.support.fixed_batch import train_on_fixed_batch
from tests.support.recorded_batch import record_halfcheetah

# 2 slot groups of 8 HalfCheetah trajectories of 32 steps: one iteration (512 steps), the normalisers on.
RECORDED = dict(
    env="HalfCheetah-v5",
    num_workers=1,
    num_envs_per_worker=16,
    worker_num_splits=2,
    rollout=32,
    normalize_input=True,
    normalize_returns=True,
    learning_rate=3e-4,
    max_policy_lag=10,
    experiment="ranks",
)
SHAPES = {
    # GAE, feed-forward: minibatches of single steps drawn over the whole batch (the MuJoCo preset's path).
    "gae_steps": dict(with_vtrace=False, batch_size=256, num_batches_per_epoch=2, num_epochs=2),
    # V-trace: minibatches of whole trajectories, targets and the returns normaliser per minibatch.
    "vtrace_trajectories": dict(with_vtrace=True, batch_size=256, num_batches_per_epoch=2, num_epochs=2),
    # One trajectory per minibatch: in every minibatch one rank has nothing and trains on a zero stand-in.
    "vtrace_one_each": dict(with_vtrace=True, batch_size=32, num_batches_per_epoch=16, num_epochs=1),
    # --ppo_target_kl's early stop, read from the whole minibatch's KL: every rank stops after the first of 8 steps.
    "gae_steps_target_kl": dict(
        with_vtrace=False, batch_size=128, num_batches_per_epoch=4, num_epochs=2, ppo_target_kl=1e-7
    ),
}
LOSSES = ("policy_loss", "value_loss", "entropy", "kl", "clip_fraction", "grad_norm")


@pytest.mark.mujoco
@pytest.mark.timeout(240)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.slow
def test_two_gloo_ranks_train_as_one_learner_on_the_whole_batch(tmp_path: Path, shape: str) -> None:
    cfg = {**RECORDED, **SHAPES[shape]}
    spaces, record = record_halfcheetah(Cfg(**cfg))
    one = train_on_fixed_batch(Cfg(**cfg, train_dir=str(tmp_path / "one")), spaces, record, iterations=3)
    two = train_on_fixed_batch(
        Cfg(**cfg, train_dir=str(tmp_path / "two"), learner_world_size=2), spaces, record, iterations=3
    )
    # Identical across ranks: weights, normalisers, Adam's moments and the random state hash alike at the end.
    assert re.search(r"learner 0: 2 ranks in step at the end \(training state sha256 [0-9a-f]{64}\)", two.log)
    assert [r.version for r in two.reports] == [1, 2, 3]
    torch.manual_seed(Cfg.seed)  # the learner's own initial weights (seed + policy 0)
    initial = make_model(Cfg(**cfg), *spaces).state_dict()
    moved = max((one.weights[k] - initial[k]).abs().max().item() for k in initial)
    assert moved > 1e-4, f"three updates moved the weights by {moved} only"
    worst = {k: (one.weights[k].double() - two.weights[k].double()).abs().max().item() for k in one.weights}
    assert max(worst.values()) <= 1e-5, f"weights differ from the single learner's: {worst}"
    for a, b in zip(one.reports, two.reports, strict=True):
        diffs = {k: abs(a.stats[k] - b.stats[k]) for k in LOSSES}
        assert max(diffs.values()) <= 1e-5, f"iteration {a.version}: logged losses differ {diffs}"
        assert a.stats["policy_lag_avg"] == b.stats["policy_lag_avg"]
        assert a.stats["updates_done"] == b.stats["updates_done"] == (1 / 8 if "target_kl" in shape else 1.0)
    assert two.reports[-1].stats["learner_samples_per_sec"] > 0


@pytest.mark.mujoco
@pytest.mark.timeout(120)
def test_a_nan_in_one_ranks_shard_skips_the_step_on_every_rank(tmp_path: Path) -> None:
    """Rank 1's trajectories carry a NaN reward; rank 0's loss is finite (no advantage normalisation to spread
    the NaN), yet every rank skips every step together and the ranks stay in step."""
    cfg = Cfg(
        **{**RECORDED, **SHAPES["gae_steps"]}, normalize_advantage=False, train_dir=str(tmp_path), learner_world_size=2
    )
    spaces, record = record_halfcheetah(cfg)
    record["rewards"][-1, :] = float("nan")  # the last trajectory: rank 1's shard
    run = train_on_fixed_batch(cfg, spaces, record, iterations=2)
    assert [r.stats["nonfinite_updates"] for r in run.reports] == [4.0, 8.0]  # 2 epochs x 2 minibatches each
    assert "learner 0: 2 ranks in step at the end" in run.log
    torch.manual_seed(Cfg.seed)
    initial = make_model(cfg, *spaces).state_dict()
    assert all(torch.equal(run.weights[k], initial[k]) for k, _ in make_model(cfg, *spaces).named_parameters())


@pytest.mark.mujoco
@pytest.mark.timeout(120)
def test_a_pbt_copy_reaches_every_rank(tmp_path: Path) -> None:
    """LoadPolicy (PBT replacing this policy by a copy of another) reaches rank 0; every rank must load the
    snapshot at the same iteration, or the ranks fall out of step (checked at the end)."""
    cfg = Cfg(**{**RECORDED, **SHAPES["gae_steps"]}, train_dir=str(tmp_path), learner_world_size=2)
    spaces, record = record_halfcheetah(cfg)
    torch.manual_seed(123)
    other = make_model(cfg, *spaces)
    snapshot = {"model": other.state_dict(), "optimizer": torch.optim.Adam(other.parameters()).state_dict()}
    path = tmp_path / "pbt_snapshot_for_p0.pth"
    save_snapshot({**snapshot, "version": 7}, path)
    copy = LoadPolicy(0, 1, str(path), {"learning_rate": 1e-4})
    run = train_on_fixed_batch(cfg, spaces, record, iterations=3, inject={2: [copy]})
    assert "learner 0: PBT replaced by a copy of policy 1" in run.log
    assert "learner 0: 2 ranks in step at the end" in run.log
    # The version jumps past --max_policy_lag: the record is too old for the copy, which trains no more. (The copy
    # lands before the second or the third iteration, depending on when rank 0's trainer picks the second batch.)
    assert run.reports[-1].version - (RECORDED["max_policy_lag"] + 1) in (1, 2)
    assert all(torch.equal(run.weights[k], v) for k, v in snapshot["model"].items())


def ranks_args(train_dir: Path, experiment: str) -> list[str]:
    return [*FAST, "--learner_world_size=2", f"--train_dir={train_dir}", f"--experiment={experiment}"]


@pytest.mark.slow
def test_every_rank_resumes_from_the_checkpoint_exactly(train_dir: Path) -> None:
    args = ranks_args(train_dir, "resume")
    first = run_script("train_appo.py", [*args, "--train_for_env_steps=8000"], check=True)
    assert "learner 0: 2 ranks on cpu, cpu (gloo)" in first.stdout
    assert "learner 0: 2 ranks in step at the end" in first.stdout, first.stdout[-3000:]
    for name in ("learner 0 profile", "learner 0 rank 1 profile"):
        profile = re.search(rf"{name}: (.*)", first.stdout)
        assert profile and all(f" {k}=" in profile.group(1) for k in ("forward", "backward", "grad_allreduce"))
    acc = EventAccumulator(str(train_dir / "resume" / "summaries" / "0"), size_guidance={"scalars": 0})
    acc.Reload()
    assert max(e.value for e in acc.Scalars("perf/learner_samples_per_sec")) > 0

    newest = list_checkpoints(train_dir / "resume" / "checkpoint_p0")[-1]
    saved = torch.load(newest, weights_only=True)
    expected = state_digest(saved["model"], {"optimizer": saved["optimizer"]}, [saved["random_states"]["torch"]])
    rerun = run_script("train_appo.py", [*args, f"--train_for_env_steps={saved['env_steps'] + 3000}"], check=True)
    loaded = re.findall(r"learner 0 rank (\d): training state sha256 ([0-9a-f]{64}) \(from (\S+)\)", rerun.stdout)
    assert sorted(rank for rank, _, _ in loaded) == ["0", "1"], rerun.stdout[-3000:]
    for rank, digest, path in loaded:
        assert Path(path) == newest, f"rank {rank} resumed from {path}, not the newest checkpoint {newest}"
        assert digest == expected, f"rank {rank} does not hold the checkpoint's state"
    assert "learner 0: 2 ranks in step at start" in rerun.stdout


@pytest.mark.parametrize("victim", ["learner_0_rank1", "learner_0"])
@pytest.mark.slow
def test_a_killed_learner_rank_stops_the_run_cleanly_and_the_rerun_resumes(train_dir: Path, victim: str) -> None:
    args = ranks_args(train_dir, "kill")
    proc = start([*args, "--train_for_env_steps=100000000"])  # ends only by the kill
    try:
        wait_for_checkpoints(train_dir / "kill" / "checkpoint_p0", 1)
        find(proc, f"appo:kill:{victim}", exact=True).kill()
    except BaseException:
        os.killpg(proc.pid, signal.SIGKILL)  # the whole session: driver and every rank
        finish(proc, timeout=10)
        raise
    killed = time.monotonic()
    out = finish(proc, timeout=90)  # no orphans either
    assert proc.returncode == 1, out[-3000:]
    # The driver's supervisor sees the death, or a surviving rank names the dead one first (whichever reports first).
    rank = 1 if victim.endswith("rank1") else 0
    assert f"{victim} died (signal 9)" in out or f"learner 0: rank {rank} died" in out, out[-3000:]
    assert time.monotonic() - killed < 60, "the run took over a minute to come down"
    if victim == "learner_0":
        return
    saved = torch.load(list_checkpoints(train_dir / "kill" / "checkpoint_p0")[-1], weights_only=True)
    rerun = run_script("train_appo.py", [*args, f"--train_for_env_steps={saved['env_steps'] + 3000}"], check=True)
    resumed = re.search(r"resumed from \S+ \(version (\d+), (\d+) env steps\)", rerun.stdout)
    assert resumed and int(resumed.group(2)) == saved["env_steps"]
    assert "learner 0: 2 ranks in step at the end" in rerun.stdout


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--learner_world_size=0"], "error: --learner_world_size=0: must be >= 1"),
        (
            ["--learner_world_size=2", "--learner_devices=cuda:0,cuda:0"],
            "error: --learner_devices=cuda:0,cuda:0: needs cuda:0, this machine has 0 CUDA device(s)",
        ),
        (
            ["--learner_world_size=2", "--serial_mode"],
            "error: --learner_world_size=2: --serial_mode runs one learner in the driver process; use 1",
        ),
    ],
)
def test_bad_learner_rank_flags_exit_2_with_one_line(train_dir: Path, flags: list[str], message: str) -> None:
    if "cuda" in " ".join(flags) and torch.cuda.device_count() > 0:
        pytest.skip("this machine has a GPU")
    result = run_script("train_appo.py", [*FAST, f"--train_dir={train_dir}", "--experiment=bad", *flags])
    assert result.returncode == 2
    assert [line for line in result.stdout.splitlines() if line.strip()] == [message]
    assert not (train_dir / "bad").exists()  # refused before anything was written
