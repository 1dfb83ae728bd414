"""RL^2-APPO, the oracle and MAML-TRPO side by side on the MuJoCo task families (docs/results.md's table of them).

    python benchmarks/meta_mujoco_table.py [--envs ant_dir ant_goal half_cheetah_vel half_cheetah_dir]
        [--seed 0] [--minutes 10] [--parallel 3] [--out DIR]

For every env, three runs of the same wall time (`--train_for_seconds`), `--parallel` at a time on this machine:
- RL^2-APPO with hidden tasks (the family's preset: trials of 2 episodes, the GRU carried across them);
- the oracle: the same with `--task_visibility=visible` (the task in the observation: the ceiling of adaptation);
- MAML-TRPO (pytorch-maml-rl's defaults; a meta-test every 2 meta-iterations).
It prints one row per env: RL^2's and the oracle's meta-test returns of a trial's episodes 0 and 1 (deterministic
actions, `meta_test/return_ep0`, `..._ep1`), MAML's return before and after its adaptation step (sampled actions,
`meta_test/return_step0`, `..._step1`), each at the end of its run (equal wall time) and at the largest env step
all three reached (equal env steps: each curve's last meta-test at or before it), with the env steps. Where RL^2
sits between its own episode 0 (a task-blind start) and the oracle says whether it adapts; on the direction
families both episodes of a trial being equal is expected once the direction is found within the first steps."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from learning_suite import launch, run_name  # noqa: E402

from appo.protocol.processes import stop_signals_unblocked  # noqa: E402
from appo.tools.plot import load_events, scalar_series  # noqa: E402

METHODS = {  # name -> (extra flags, the two tags read)
    "rl2": ([], ("meta_test/return_ep0", "meta_test/return_ep1")),
    "oracle": (["--task_visibility=visible"], ("meta_test/return_ep0", "meta_test/return_ep1")),
    "maml": (["--algo=maml_trpo", "--meta_test_interval=2"], ("meta_test/return_step0", "meta_test/return_step1")),
}


def curves(folder: Path, tags: tuple[str, str]) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(env steps, first tag's values, second tag's values) of a run's meta-tests, or None without any."""
    events = load_events(folder / "summaries" / "0")
    first, second = scalar_series(events, tags[0]), scalar_series(events, tags[1])
    if first is None or second is None:
        return None
    n = min(len(first[0]), len(second[0]))
    return first[0][:n], first[2][:n], second[2][:n]


def at(curve: tuple[np.ndarray, np.ndarray, np.ndarray], step: int | None) -> str:
    """'a / b (steps)' at the last meta-test at or before `step` (None: the last one)."""
    steps = curve[0]
    i = len(steps) - 1 if step is None else int(np.searchsorted(steps, step, side="right")) - 1
    if i < 0:
        return "no meta-test yet"
    return f"{curve[1][i]:.1f} / {curve[2][i]:.1f} ({int(steps[i]):,})"


def final_steps(folder: Path) -> int:
    """The env steps a run reached (its last summary of any tag)."""
    events = load_events(folder / "summaries" / "0")
    return max((int(events.Scalars(t)[-1].step) for t in events.Tags()["scalars"]), default=0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", nargs="+", default=["ant_dir", "ant_goal", "half_cheetah_vel", "half_cheetah_dir"])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--minutes", type=float, default=10.0, help="wall time of every run")
    parser.add_argument("--parallel", type=int, default=3, help="runs at a time")
    parser.add_argument("--out", type=Path, default=ROOT / "train_dir" / "meta_mujoco_table")
    args, extra = parser.parse_known_args()
    jobs = [(env, method) for env in args.envs for method in METHODS]
    pending, running, status = list(jobs), {}, {}
    flags = [f"--train_for_seconds={args.minutes * 60}", *extra]
    with stop_signals_unblocked():  # SIGINT back where it was ignored (`cmd &`, nohup): see learning_suite.run_all
        try:
            while pending or running:
                while pending and len(running) < args.parallel:
                    env, method = pending.pop(0)
                    out = args.out / method
                    running[(env, method)] = launch(env, args.seed, 10**12, out, [*METHODS[method][0], *flags])
                    print(f"started {env} {method}", flush=True)
                time.sleep(1.0)
                for key, proc in list(running.items()):
                    if proc.poll() is not None:
                        proc.log.close()
                        status[key] = proc.returncode
                        del running[key]
                        print(f"finished {key[0]} {key[1]}: exit {proc.returncode}", flush=True)
        finally:
            for proc in running.values():
                proc.send_signal(2)  # SIGINT: the run's orderly shutdown
            for proc in running.values():
                proc.wait()
                proc.log.close()
    print(f"\n{args.minutes:g} minutes a run, seed {args.seed}, {args.parallel} at a time; ep0 / ep1 (env steps)")
    print("| env | at | RL^2 ep0 / ep1 | oracle ep0 / ep1 | MAML before / after |")
    print("|---|---|---|---|---|")
    for env in args.envs:
        folders = {m: args.out / m / run_name(env, args.seed) for m in METHODS}
        found = {m: curves(folders[m], METHODS[m][1]) for m in METHODS}
        if any(c is None for c in found.values()):
            print(f"| {env} | - | runs without meta-tests: {[m for m, c in found.items() if c is None]} | | |")
            continue
        common = min(final_steps(f) for f in folders.values())
        for label, step in (("equal wall time", None), (f"equal env steps ({common:,})", common)):
            print(f"| {env} | {label} | " + " | ".join(at(found[m], step) for m in METHODS) + " |", flush=True)
    return 0 if all(s == 0 for s in status.values()) and len(status) == len(jobs) else 1


if __name__ == "__main__":
    sys.exit(main())
