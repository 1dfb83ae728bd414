"""UDRL on LunarLander-v3 (docs/results.md, UDRL and RCP): one run per seed for a fixed wall time, then the
figures from the last checkpoint's per-iteration history (appo/algorithms/reward_conditioned/udrl.py HISTORY_COLUMNS).

    python benchmarks/udrl_lunarlander.py --seeds 0 --minutes 12
    python benchmarks/udrl_lunarlander.py --algo=rcp_r --seeds 0 --minutes 15

Needs box2d (`pip install -e .[box2d]`). Prints, per seed: iterations, seconds per iteration, the mean return of
the first and of the last 10 iterations' episodes, the mean return of the best --udrl_last_few buffer episodes
at the end, and the greedy evaluations; the acceptance in the issue is last-10 - first-10 >= 40 for every seed,
a last-10 mean >= -30 for at least one, and a top-75 buffer mean >= +30 for every seed."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from appo.algorithms.reward_conditioned.udrl import HISTORY_COLUMNS  # noqa: E402
from appo.learning.checkpoint import list_checkpoints  # noqa: E402

ARGS = [
    "--env=LunarLander-v3",
    "--num_workers=1",
    "--num_envs_per_worker=8",
    "--report_interval=10",
    "--max_command_return=320",  # LunarLander's scale (the default is no cap)
]


def run_seed(train_dir: Path, seed: int, minutes: float, extra: list[str], algo: str = "udrl") -> dict[str, float]:
    """Train `algo` on LunarLander-v3 for `minutes`, then the figures of its last checkpoint."""
    name = f"{algo}_lunarlander_s{seed}"
    cmd = [sys.executable, str(ROOT / "train_appo.py"), f"--algo={algo}", *ARGS]
    cmd += [f"--train_dir={train_dir}", f"--experiment={name}"]
    cmd += [f"--seed={seed}", f"--train_for_seconds={minutes * 60}", *extra]
    print(" ".join(cmd[1:]), flush=True)
    subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    state = torch.load(list_checkpoints(train_dir / name / "checkpoint_p0")[-1], weights_only=True)
    h = state["udrl" if algo == "udrl" else "rcp"]["history"].numpy()
    col = {name: h[:, i] for i, name in enumerate(HISTORY_COLUMNS)}
    evals = col["eval_return"][~np.isnan(col["eval_return"])]
    return {
        "algo": algo,
        "seed": seed,
        "iterations": int(len(h)),
        "episodes": int(col["episodes"][-1]),
        "env_steps": int(state["env_steps"]),
        "seconds_per_iteration": float(np.mean(col["seconds"][1:])),
        "first10_return": float(np.nanmean(col["episode_return"][:10])),
        "last10_return": float(np.nanmean(col["episode_return"][-10:])),
        "top_buffer_return": float(col["buffer_top_return"][-1]),  # RCP: the FIFO's mean return
        "curve_by_10": [round(float(np.nanmean(col["episode_return"][i : i + 10])), 1) for i in range(0, len(h), 10)],
        "last_command": [float(col["command_return"][-1]), float(col["command_horizon"][-1])],
        "eval_returns_last3": [round(float(v), 1) for v in evals[-3:]],
        "eval_best": float(evals.max()) if len(evals) else float("nan"),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--algo", default="udrl", help="udrl, rcp_r or rcp_a")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--minutes", type=float, default=12.0)
    parser.add_argument("--train_dir", default=str(ROOT / "train_dir" / "benchmarks"))
    parser.add_argument("extra", nargs="*", help="more train_appo.py flags (after --)")
    args = parser.parse_args()
    results = [run_seed(Path(args.train_dir), s, args.minutes, args.extra, args.algo) for s in args.seeds]
    for r in results:
        print(json.dumps(r), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
