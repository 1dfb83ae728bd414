"""Every algorithm on a device: short runs of each `--algo` with `--device=cuda` (or another), side by side, and a
table of what each did: exit status, env steps, FPS, the last training return, and how many evaluations reached
tensorboard (the engine's evaluator `eval/*`, the learner's greedy evaluation `greedy/*`, the meta-test).

A run that dies (a tensor on the wrong device, say) shows as a non-zero exit with the last error line of its log.
This is a correctness check on a GPU machine, not a speed benchmark: the runs share the machine's cores and GPU.

    python benchmarks/device_check.py --seconds=120 --device=cuda [--only=udrl,sac] [--train_dir=/tmp/device_check]
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# name -> flags (each run also gets --device, --train_for_seconds, --train_dir, --experiment)
RUNS: dict[str, list[str]] = {
    "appo": ["--algo=appo", "--env=ant_dir", "--num_workers=4", "--eval_interval=0", "--meta_test_interval=200000"],
    "appo_mlp": ["--algo=appo", "--env=HalfCheetah-v5", "--num_workers=2", "--eval_interval=100000"],
    "sac": ["--algo=sac", "--env=HalfCheetah-v5", "--num_workers=2", "--eval_interval=10000"],
    "udrl": [
        "--algo=udrl",
        "--env=LunarLander-v3",
        "--num_workers=1",
        "--num_envs_per_worker=8",
        "--udrl_eval_every=2",
        "--eval_interval=50000",
    ],
    "rcp_r": [
        "--algo=rcp_r",
        "--env=LunarLander-v3",
        "--num_workers=1",
        "--num_envs_per_worker=8",
        "--udrl_eval_every=2",
    ],
    "rcp_a": [
        "--algo=rcp_a",
        "--env=LunarLander-v3",
        "--num_workers=1",
        "--num_envs_per_worker=8",
        "--udrl_eval_every=2",
    ],
    "maml_trpo": ["--algo=maml_trpo", "--env=navigation2d", "--num_workers=2"],
}


def tensorboard_counts(summaries: Path) -> dict[str, object]:
    """Points of the evaluation tags and the last training return, read with tensorboard's own reader."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out: dict[str, object] = {}
    if not summaries.is_dir():
        return out
    acc = EventAccumulator(str(summaries), size_guidance={"scalars": 0})
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    for tag in ("eval/return_mean", "greedy/return_mean", "meta_test/return_mean", "meta_test/return_step1"):
        if tag in tags:
            out[tag] = len(acc.Scalars(tag))
    for tag in ("episode/return_mean", "maml/return_pre", "maml/return_post"):
        if tag in tags:
            out["last_" + tag] = round(acc.Scalars(tag)[-1].value, 1)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=120.0)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--only", default="", help="comma-separated names of RUNS (default: all)")
    parser.add_argument("--train_dir", default="/tmp/device_check")
    parser.add_argument("--json", default="", help="also write the rows to this file")
    parser.add_argument("--command_env", default="LunarLander-v3", help="env of the UDRL and RCP runs")
    args = parser.parse_args()
    names = [n for n in args.only.split(",") if n] or list(RUNS)
    train_dir = Path(args.train_dir)
    started, procs = time.monotonic(), {}
    for name in names:
        log = open(train_dir.with_name(train_dir.name + f"_{name}.log"), "w")  # noqa: SIM115
        flags = [f.replace("LunarLander-v3", args.command_env) for f in RUNS[name]]
        cmd = [sys.executable, str(ROOT / "train_appo.py"), *flags, f"--device={args.device}"]
        cmd += [f"--train_for_seconds={args.seconds}", f"--train_dir={train_dir}", f"--experiment={name}"]
        procs[name] = (subprocess.Popen(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT), log)
    rows = []
    for name, (proc, log) in procs.items():
        try:
            rc = proc.wait(timeout=args.seconds + 240)
        except subprocess.TimeoutExpired:
            proc.kill()
            rc = "timeout"
        log.close()
        text = Path(log.name).read_text(errors="replace")
        steps = re.findall(r"steps (\d+) \| FPS \(10s/1m/5m\) [\d.na]+/[\d.na]+/([\d.na]+)", text)
        errors = [line for line in text.splitlines() if "Error" in line or "error:" in line]
        device_line = re.search(r"device (\S+)", text)
        row = {
            "run": name,
            "exit": rc,
            "device": device_line.group(1) if device_line else "",
            "env_steps": int(steps[-1][0]) if steps else 0,
            "fps_5m": steps[-1][1] if steps else "",
            **tensorboard_counts(train_dir / name / "summaries" / "0"),
            "last_error": errors[-1][-200:] if errors else "",
        }
        rows.append(row)
        print(json.dumps(row), flush=True)
    print(f"wall {time.monotonic() - started:.0f} s for {len(names)} runs side by side, {args.seconds:.0f} s each")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0 if all(r["exit"] == 0 for r in rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
