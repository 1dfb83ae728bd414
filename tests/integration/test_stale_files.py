"""A run killed mid-write leaves temporary files behind (cfg.json.tmp, a checkpoint's, a PBT snapshot's, the
replay's): the next start of the same run removes every one of them, and nothing it did not write."""

from __future__ import annotations

from tests.conftest import run_script

FAST = ["--env=CartPole-v1", "--rollout=16", "--batch_size=256", "--num_envs_per_worker=4", "--num_workers=1"]


def test_a_restarted_run_removes_the_temporary_files_of_the_killed_one(tmp_path) -> None:
    args = [*FAST, f"--train_dir={tmp_path}", "--experiment=run", "--device=cpu"]
    run_script("train_appo.py", [*args, "--train_for_env_steps=1000"], check=True)
    run_dir = tmp_path / "run"
    stale = [
        run_dir / "cfg.json.tmp",
        run_dir / "best_policy.json.tmp",
        run_dir / "checkpoint_p0" / "replay.pth.tmp",
        run_dir / "checkpoint_p0" / "pbt_snapshot_for_p0.pth.tmp",
        run_dir / "checkpoint_p0" / "checkpoint_000000009_9999.pth.tmp",
    ]
    foreign = [run_dir / "my_notes.txt.tmp", run_dir / "checkpoint_p0" / "my_model.pth.tmp"]
    for path in [*stale, *foreign]:
        path.write_bytes(b"half a file")
    run_script("train_appo.py", [*args, "--train_for_env_steps=2000"], check=True)
    assert [str(p.relative_to(run_dir)) for p in stale if p.exists()] == []
    assert all(p.exists() for p in foreign)
