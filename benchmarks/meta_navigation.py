"""Recurrent meta-RL (RL^2) on navigation2d, whether every seed adapts: the README's command per seed, then what a
user reads from the run's own meta-tests on the held-out goals (sampled and deterministic actions).

    python benchmarks/meta_navigation.py --seeds 1 2 3 [--steps 3000000] [--parallel 1] [-- extra flags]

Prints, per seed and for the meta-test with sampled actions (the policy as it trains) and with deterministic
ones: the mean over the last 3 meta-tests of episode 0 and 1 of a trial, whether it adapts (the better episode
>= -16, MAML-TRPO's return after one adaptation step, and the adaptation gain, episode 1 minus episode 0 paired by
task, above twice its standard error; the learning test's rule, on its 50 held-out goals: `--num_test_tasks=50`
unless the extra flags say otherwise), the meta-test curve; then wall time and the final training return. Exits 1 unless
every seed adapts on the sampled meta-test. Run seeds one at a time (--parallel 1) for wall times that mean anything."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from appo.tools.plot import load_events, scalar_series  # noqa: E402

BEST_EPISODE_AT_LEAST = -16.0
STANDARD_ERRORS = 2.0
TEST_TASKS = "--num_test_tasks=50"


def adapts(ep0: float, ep1: float, gain: float, gain_se: float) -> bool:
    """The learning test's rule (tests/learning/test_meta_learning.py)."""
    return max(ep0, ep1) >= BEST_EPISODE_AT_LEAST and gain > STANDARD_ERRORS * gain_se


def values(acc: object, tag: str) -> tuple[np.ndarray, np.ndarray]:
    """(steps, values) of `tag` (appo.tools.plot's reader; the run must have written it)."""
    series = scalar_series(acc, tag)  # type: ignore[arg-type]
    if series is None:
        raise SystemExit(f"{tag}: not in the run's summaries")
    return series[0], series[2]


def run_seed(train_dir: Path, seed: int, steps: int, extra: list[str]) -> dict[str, object]:
    name = f"nav_s{seed}"
    cmd = [sys.executable, str(ROOT / "train_appo.py"), "--env=navigation2d", f"--train_dir={train_dir}"]
    cmd += [f"--experiment={name}", f"--seed={seed}", f"--train_for_env_steps={steps}"]
    cmd += [*([] if any(a.startswith("--num_test_tasks") for a in extra) else [TEST_TASKS]), *extra]
    began = time.monotonic()
    subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.monotonic() - began
    acc = load_events(train_dir / name / "summaries" / "0")
    out: dict[str, object] = {"seed": seed, "wall_seconds": round(wall, 1)}
    for prefix, key in (("meta_test_sampled", "sampled"), ("meta_test", "deterministic")):
        step, ep0 = values(acc, f"{prefix}/return_ep0")
        _, ep1 = values(acc, f"{prefix}/return_ep1")
        last0, last1 = float(ep0[-3:].mean()), float(ep1[-3:].mean())
        gain = float(values(acc, f"{prefix}/adaptation_gain")[1][-3:].mean())
        gain_se = float(values(acc, f"{prefix}/adaptation_gain_se")[1][-3:].mean())
        every = max(1, len(step) // 8)
        out[key] = {
            "ep0_last3": round(last0, 2),
            "ep1_last3": round(last1, 2),
            "gain_last3": f"{gain:.2f} +- {gain_se:.2f}",
            "adapts": adapts(last0, last1, gain, gain_se),
            "curve": [
                f"{s // 1000}k {a:.0f}/{b:.0f}"
                for s, a, b in zip(step[::every], ep0[::every], ep1[::every], strict=True)
            ],
        }
    out["train_return_end"] = round(float(values(acc, "episode/return_mean")[1][-5:].mean()), 2)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--steps", type=int, default=3_000_000)
    parser.add_argument("--parallel", type=int, default=1, help="runs at a time (wall times only valid at 1)")
    parser.add_argument("--train_dir", type=Path, default=None)
    parser.add_argument("extra", nargs="*", help="flags passed to train_appo.py (after --)")
    args = parser.parse_args()
    train_dir = args.train_dir or Path(tempfile.mkdtemp(prefix="meta_nav_"))
    print(f"train_dir {train_dir}; extra flags: {' '.join(args.extra) or '(none)'}", flush=True)
    with ThreadPoolExecutor(args.parallel) as pool:
        results = list(pool.map(lambda s: run_seed(train_dir, s, args.steps, args.extra), args.seeds))
    for r in results:
        print(json.dumps(r), flush=True)
    adapted = sum(bool(r["sampled"]["adapts"]) for r in results)  # type: ignore[index]
    wall = np.median([r["wall_seconds"] for r in results])
    print(f"{adapted}/{len(results)} seeds adapt (sampled meta-test); median wall {wall:.0f} s")
    return 0 if adapted == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
