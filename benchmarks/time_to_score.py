"""Wall time to a score: train an env with its preset for a fixed wall-clock budget, one seed after the other in one
sitting, and report when each run's training return first reached the target, where the time went and how much of
the machine's arithmetic the learner used.

    python benchmarks/time_to_score.py --env=atari_pong --target=18 --minutes=60 --seeds 0 1 2 [train flags]

Per seed: the minutes from launch (start-up included) to the first report of the training return (the mean of the
last 100 episodes, `episode/return_mean`) at or above --target; the return at each quarter of the budget and at the
end; the agent steps reached; each process kind's share of its wall time from the run's profile lines (actor workers
waiting, the learner training); and the learner's achieved GFLOP/s: the floating-point operations of one training
sample (the model's forward and backward pass, counted by torch's FlopCounterMode, times the epochs, plus the no-grad
pass where the algorithm makes one) times the samples the learner trained per second of its training time
(`perf/learner_samples_per_sec`, the run's median). The machine's peak is torch's own GEMM (4096 x 4096,
--learner_threads threads, in the convnets' precision: float32, or bf16 where --learner_precision gives it) timed
before the runs. The table ends with the median over seeds; a run that never reached the target counts as the budget
(and says so). Flags it does not know go to every run."""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from appo.config.cfg import parse_cfg  # noqa: E402
from appo.config.derive import derive  # noqa: E402
from appo.envs import make_run_env  # noqa: E402
from appo.models.device import compute_dtype  # noqa: E402
from appo.models.registry import make_model  # noqa: E402
from appo.protocol.buffers import rnn_state_size  # noqa: E402
from appo.tools.plot import load_events, scalar_series  # noqa: E402

PROFILE = re.compile(r"(actor worker \d+|learner \d+) profile: wall=([\d.]+)s (.*)")


def gemm_gflops(threads: int, size: int = 4096, repeats: int = 5, dtype: torch.dtype = torch.float32) -> float:
    """torch's matmul rate in `dtype` on `threads` threads: the best of `repeats`."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    a, b = torch.randn(size, size, dtype=dtype), torch.randn(size, size, dtype=dtype)
    a @ b
    best = float("inf")
    for _ in range(repeats):
        began = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - began)
    torch.set_num_threads(before)
    return 2 * size**3 / best / 1e9


def flops_per_sample(flags: list[str]) -> float:
    """Floating-point operations the learner spends on one training sample: forward and backward over a minibatch
    of the run's shape, times the epochs, plus one forward pass (a third of forward and backward) where GAE's values
    come from a no-grad pass of their own (more than one minibatch an epoch)."""
    from torch.utils.flop_counter import FlopCounterMode

    cfg = parse_cfg(flags)
    env = make_run_env(cfg)
    spaces = (env.observation_space, env.action_space)
    env.close()
    model = make_model(cfg, *spaces)
    d = derive(cfg)
    n, t = max(1, cfg.batch_size // cfg.rollout), cfg.rollout
    obs = torch.zeros(n, t, *spaces[0].shape, dtype=torch.uint8 if spaces[0].dtype == np.uint8 else torch.float32)
    actions = (
        torch.zeros(n, t, 1, dtype=torch.int64) if hasattr(spaces[1], "n") else torch.zeros(n, t, *spaces[1].shape)
    )
    states = torch.zeros(n, t, max(1, rnn_state_size(cfg)))
    with FlopCounterMode(display=False) as counter:
        out = model(obs, actions, states, torch.zeros(n, t), d.recurrence)
        (out.log_probs.sum() + out.entropy.sum() + out.values.sum()).backward()
    per_pass = counter.get_total_flops() / (n * t)
    extra = per_pass / 3 if d.minibatches_per_epoch > 1 else 0.0
    return per_pass * cfg.num_epochs + extra


def shares(log: str) -> str:
    """Each process's profile line at the end of the run, shortened to its two largest shares."""
    out = []
    for name, _, rest in PROFILE.findall(log):
        parts = sorted(re.findall(r"(\w+)=[\d.]+s \((\d+)%\)", rest), key=lambda kv: -int(kv[1]))[:2]
        out.append(f"{name}: " + ", ".join(f"{k} {v}%" for k, v in parts))
    return "; ".join(out)


def run(env: str, seed: int, minutes: float, out: Path, extra: list[str]) -> dict:
    name = f"{env}_s{seed}"
    cmd = [sys.executable, "train_appo.py", f"--env={env}", f"--seed={seed}", f"--experiment={name}"]
    cmd += [f"--train_dir={out}", f"--train_for_seconds={int(minutes * 60)}", "--train_for_env_steps=10000000000"]
    cmd += ["--report_interval=10", *extra]
    out.mkdir(parents=True, exist_ok=True)
    began = time.time()
    with open(out / f"{name}.out", "w") as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
        try:
            proc.wait()
        finally:
            if proc.poll() is None:
                proc.send_signal(2)
                proc.wait()
    acc = load_events(out / name / "summaries" / "0")
    returns = scalar_series(acc, "episode/return_mean")
    rates = scalar_series(acc, "perf/learner_samples_per_sec")
    steps, walls, values = returns if returns is not None else (np.zeros(0),) * 3
    minutes_at = (walls - began) / 60
    return {
        "seed": seed,
        "status": proc.returncode,
        "minutes": minutes_at,
        "values": values,
        "steps": steps,
        "samples_per_sec": float(np.median(rates[2])) if rates is not None else float("nan"),
        "shares": shares((out / f"{name}.out").read_text()),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--env", default="atari_pong")
    parser.add_argument("--target", type=float, default=18.0)
    parser.add_argument("--minutes", type=float, default=60.0)
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--out", type=Path, default=Path("train_dir") / "time_to_score")
    args, extra = parser.parse_known_args()
    flags = [f"--env={args.env}", *extra]
    cfg = parse_cfg(flags)
    threads = cfg.learner_threads or torch.get_num_threads()
    dtype = compute_dtype(cfg.learner_precision, "cpu") or torch.float32  # the convnets' (--learner_precision)
    peak = gemm_gflops(threads, dtype=dtype)
    flops = flops_per_sample(flags)
    print(
        f"GEMM peak {peak:.0f} GFLOP/s in {str(dtype).removeprefix('torch.')} on {threads} threads; "
        f"{flops / 1e6:.3g} MFLOP per training sample"
    )
    results = [run(args.env, seed, args.minutes, args.out, extra) for seed in args.seeds]
    quarters = [args.minutes * q for q in (0.25, 0.5, 0.75, 1.0)]
    reached = []
    for r in results:
        hit = np.flatnonzero(r["values"] >= args.target)
        to_target = float(r["minutes"][hit[0]]) if len(hit) else None
        reached.append(to_target if to_target is not None else args.minutes)
        at = [r["values"][r["minutes"] <= q][-1] if (r["minutes"] <= q).any() else float("nan") for q in quarters]
        achieved = flops * r["samples_per_sec"] / 1e9
        when = f"{to_target:.1f} min" if to_target is not None else f"not within {args.minutes:g} min"
        print(
            f"seed {r['seed']} (exit {r['status']}): {args.target:g} at {when}; return at "
            + " / ".join(f"{q:g} min {v:.1f}" for q, v in zip(quarters, at, strict=True))
            + f"; {int(r['steps'][-1]) if len(r['steps']) else 0:,} agent steps; learner {achieved:.0f} GFLOP/s "
            f"({achieved / peak:.0%} of the GEMM peak)\n    {r['shares']}"
        )
    print(f"median minutes to {args.target:g}: {statistics.median(reached):.1f} over {len(reached)} seeds")
    return 0 if all(r["status"] == 0 for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
