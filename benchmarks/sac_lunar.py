"""Wall time to a deterministic evaluation mean >= --target on LunarLanderContinuous-v3: this engine's SAC against
Stable-Baselines3's SAC on the same machine, in the same sitting (docs/results.md, SAC). `pip install
stable-baselines3` for the baseline (not a dependency of the project); `pip install -e .[box2d]` for the env.

    python benchmarks/sac_lunar.py [--runs ours sb3] [--minutes 60] [--target 200] [--seed 0] [-- extra flags for ours]

Both with SAC's usual settings, the same for both: 256x256 relu networks, Adam 3e-4, batch 256, one update per env
step, tau 0.005, gamma 0.99, entropy tuned toward -|A|, 10,000 random steps first, a replay of 10^6; evaluation of
5 deterministic episodes every 5,000 env steps. Each run is its own process; the clock starts when it is launched
(imports, env and Ray start-up included) and stops at the first evaluation >= target, which is then stopped (ours
with Ctrl-C: it saves and exits). Stable-Baselines3 runs torch with its default threads (every core) in one
process that steps, trains and evaluates in turn; ours runs the learner, two actor workers and the evaluator as
separate processes. Prints one line per run and a table; also the evaluations as they come.
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from appo.tools.plot import load_events  # noqa: E402

ENV = "LunarLanderContinuous-v3"
EVAL_EVERY, EVAL_EPISODES, LEARNING_STARTS = 5000, 5, 10_000

SB3_SCRIPT = f"""
import json, sys, time
began = float(sys.argv[1]); target = float(sys.argv[2]); seed = int(sys.argv[3]); out = sys.argv[4]
limit = float(sys.argv[5])
import gymnasium as gym
from stable_baselines3 import SAC
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.evaluation import evaluate_policy

class Evaluate(BaseCallback):
    def __init__(self):
        super().__init__()
        self.env = gym.make("{ENV}")
        self.rows = []
    def _on_step(self):
        if self.num_timesteps % {EVAL_EVERY} == 0:
            mean, _ = evaluate_policy(self.model, self.env, n_eval_episodes={EVAL_EPISODES}, deterministic=True)
            self.rows.append((self.num_timesteps, time.time() - began, float(mean)))
            print("sb3 eval", self.rows[-1], flush=True)
            json.dump(self.rows, open(out, "w"))
            return mean < target and time.time() - began < limit
        return time.time() - began < limit

model = SAC("MlpPolicy", gym.make("{ENV}"), learning_starts={LEARNING_STARTS}, seed=seed, verbose=0)
model.learn(total_timesteps=10**8, callback=Evaluate())
"""


def run_sb3(target: float, seed: int, minutes: float, out: Path) -> list[tuple[int, float, float]]:
    began = time.time()
    cmd = [sys.executable, "-c", SB3_SCRIPT, str(began), str(target), str(seed), str(out), str(minutes * 60)]
    subprocess.run(cmd, check=True, cwd=ROOT)
    return [tuple(r) for r in json.loads(out.read_text())]


def run_ours(target: float, seed: int, minutes: float, train_dir: Path, extra: list[str]) -> list[tuple]:
    began = time.time()
    cmd = [sys.executable, "train_appo.py", "--algo=sac", f"--env={ENV}", "--num_workers=2", f"--seed={seed}"]
    cmd += [f"--eval_interval={EVAL_EVERY}", f"--eval_episodes={EVAL_EPISODES}", f"--learning_starts={LEARNING_STARTS}"]
    cmd += [f"--train_dir={train_dir}", "--experiment=sac", f"--train_for_seconds={minutes * 60:.0f}", *extra]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    summaries = train_dir / "sac" / "summaries" / "0"
    try:
        return _follow(proc, summaries, began, target)
    finally:  # this script stopped early (Ctrl-C, kill): stop the run too, which saves and exits
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                proc.kill()


def _follow(proc: subprocess.Popen, summaries: Path, began: float, target: float) -> list[tuple]:
    """Poll the run's evaluations until it exits; stop it (Ctrl-C) at the first one >= target."""
    rows: list[tuple] = []
    acc = None
    while proc.poll() is None:
        time.sleep(5)
        if not summaries.is_dir():
            continue
        # One accumulator, reloaded: each poll reads only the events written since the last one (parsing the
        # whole file every 5 s took 13% of a core by 100k env steps, CPU taken from the run being timed).
        if acc is None:
            acc = load_events(summaries)
        else:
            acc.Reload()
        if "eval/return_mean" not in acc.Tags()["scalars"]:
            continue
        new = [(e.step, e.wall_time - began, e.value) for e in acc.Scalars("eval/return_mean")]
        for row in new[len(rows) :]:
            print("ours eval", row, flush=True)
        rows = new
        if rows and rows[-1][2] >= target and proc.poll() is None:
            proc.send_signal(signal.SIGINT)  # saves and exits
    proc.wait()
    return rows


def first_at(rows: list[tuple], target: float) -> tuple | None:
    return next((r for r in rows if r[2] >= target), None)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", nargs="+", default=["ours", "sb3"], choices=["ours", "sb3"])
    parser.add_argument("--minutes", type=float, default=60.0)
    parser.add_argument("--target", type=float, default=200.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--race", action="store_true", help="stop a later run once it can no longer be first (at the best time so far)"
    )
    args, extra = parser.parse_known_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so that `kill` stops our run too (run_ours, finally)
    extra = [e for e in extra if e != "--"]
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        limit = args.minutes
        for name in args.runs:
            if name == "ours":
                rows = run_ours(args.target, args.seed, limit, Path(tmp) / "ours", extra)
            else:
                rows = run_sb3(args.target, args.seed, limit, Path(tmp) / "sb3.json")
            results[name] = rows
            hit = first_at(rows, args.target)
            reached = f"{hit[1] / 60:.1f} min at {hit[0]} env steps" if hit else f"not reached in {limit:.1f} min"
            if hit and args.race:
                limit = min(limit, hit[1] / 60)
            print(f"{name}: target {args.target:g} {reached}; last evaluation {rows[-1] if rows else None}")
    print(f"\n| run | minutes to eval >= {args.target:g} | env steps then | evaluations |")
    print("|---|---|---|---|")
    for name, rows in results.items():
        hit = first_at(rows, args.target)
        curve = ", ".join(f"{r[2]:.0f}" for r in rows)
        print(f"| {name} | {hit[1] / 60:.1f} | {hit[0]} | {curve} |" if hit else f"| {name} | > limit | - | {curve} |")


if __name__ == "__main__":
    main()
