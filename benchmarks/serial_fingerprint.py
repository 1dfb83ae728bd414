"""Fingerprints of short --serial_mode runs, to show that a change leaves training bit-identical: each run's final
checkpoint hashed tensor by tensor (sha256 over the model's and optimiser's tensors in name order).

    python benchmarks/serial_fingerprint.py [--tree PATH]   # PATH: another checkout (a git worktree of an old commit)

Runs CartPole-v1 and Pendulum-v1 (APPO) and navigation2d (MAML-TRPO), each with its own train_appo.py, and prints
one line per run: env, algo, env steps, hash. Equal hashes from two trees: the same weights, bit for bit."""

from __future__ import annotations

import argparse
import hashlib
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
COMMON = ["--serial_mode=True", "--device=cpu", "--seed=3", "--report_interval=1000", "--save_every_sec=1e9"]
RUNS = {
    "CartPole-v1": ["--env=CartPole-v1", "--num_workers=2", "--num_envs_per_worker=4", "--rollout=16"]
    + ["--batch_size=64", "--num_batches_per_epoch=2", "--train_for_env_steps=1024"],
    "Pendulum-v1": ["--env=Pendulum-v1", "--num_workers=2", "--num_envs_per_worker=4", "--rollout=16"]
    + ["--batch_size=64", "--num_batches_per_epoch=2", "--train_for_env_steps=1024"],
    "navigation2d": ["--env=navigation2d", "--algo=maml_trpo", "--num_workers=2", "--meta_batch_size=4"]
    + ["--fast_batch_size=4", "--train_for_iterations=2"],
}


def digest(obj: object, h: hashlib._Hash) -> None:
    if isinstance(obj, torch.Tensor):
        h.update(obj.detach().cpu().contiguous().numpy().tobytes())
    elif isinstance(obj, dict):
        for k in sorted(obj, key=str):
            h.update(str(k).encode())
            digest(obj[k], h)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            digest(v, h)


def fingerprint(tree: Path, name: str, flags: list[str], out: Path) -> str:
    cmd = [sys.executable, str(tree / "train_appo.py"), *flags, *COMMON, f"--train_dir={out}", f"--experiment={name}"]
    done = subprocess.run(cmd, cwd=tree, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        return f"failed ({done.returncode}): {done.stderr.strip().splitlines()[-1:]}"
    ckpts = sorted((out / name).glob("checkpoint_p0/checkpoint_*.pth"))
    if not ckpts:
        return "no checkpoint"
    state = torch.load(ckpts[-1], map_location="cpu", weights_only=False)
    h = hashlib.sha256()
    digest({k: v for k, v in state.items() if k in ("model", "optimizer", "algorithm", "env_steps", "version")}, h)
    return f"{state.get('env_steps', '?')} steps  {h.hexdigest()[:16]}"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tree", type=Path, default=ROOT)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for name, flags in RUNS.items():
            print(f"{name:14s} {fingerprint(args.tree.resolve(), name, flags, Path(tmp))}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
