"""Multi-agent benchmarks: throughput against the single-agent engine, self-play learning on paddle_duel, and
cooperative learning on mpe2's simple_spread_v3 against a scripted policy.

    python benchmarks/multi_agent.py throughput [--repeats 3] [--seconds 40] [--warmup 15] [extra train_appo flags]
    python benchmarks/multi_agent.py selfplay [--seeds 0 1 2] [--minutes 25] [--games 200] [extra train_appo flags]
    python benchmarks/multi_agent.py spread [--seeds 0 1 2] [--steps 60000000] [--games 200] [--value_input team]
                                            [extra train_appo flags]
    python benchmarks/multi_agent.py value_throughput [--repeats 3] [--seconds 40] [--warmup 15]

throughput: training agent steps per second (perf/fps: every row of the trajectory tensors is an agent) of
paddle_duel's two agents (one game step moves both) against its single-agent twin, PaddleDuelVsScripted (the same
game step, one learning agent against the scripted tracker), with the same flags, runs alternating, medians of
`--repeats`. The ratio is what the multi-agent path keeps of the single-agent engine's rate per agent step.

selfplay: for each seed, train paddle_duel by self-play with a pool of past selves for `--minutes`, then play the
final policy against the scripted tracker for `--games` games (deterministic actions, alternating sides; the
evaluation enjoy.py and `appo.load_policy(...).evaluate` run) and report its win rate; with its win and draw rates
against its pool (selfplay/pool_win_rate, selfplay/pool_draw_rate) early and late in the run. Prints a table; the
runs stay under --out for enjoy.py.

spread: for each seed, train one policy shared by simple_spread_v3's three agents (each on its own observation;
rewards as mpe2 gives them: local_ratio 0.5, 25 steps) with the env's preset (MAPPO's recipe: envs/multi_agent/
family.py) and the value `--value_input` names (team: MAPPO's; local: each agent's own, the independent-value run)
for `--steps` agent steps, then play `--games` games with deterministic actions and report the mean return per
agent, beside the scripted policy `spread_scripted` on the same reset seeds: each agent heads for its own landmark,
landmarks given out greedily by distance (the nearest agent-landmark pair first, as every agent computes from its
own observation), with a damped bang-bang controller. The training return (the last tenth of the run's summaries)
and both figures are also given on MAPPO's scale (appo/tools/reward_scales.py); the curves stay in the runs.

value_throughput: training agent steps per second of simple_spread_v3 with its preset, with a team value against
local values (the same run otherwise), runs alternating, medians of `--repeats`.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from throughput import appo_fps  # noqa: E402

SINGLE = "appo.envs.multi_agent.paddle_duel:PaddleDuelVsScripted"
# Self-play settings: the engine's defaults but a larger batch, two epochs, a higher learning rate and more
# exploration, and a pool of 8 past selves spread over the run (the first snapshot, then gaps that double), met in
# half the games.
SELFPLAY_FLAGS = [
    "--num_workers=2",
    "--num_envs_per_worker=8",
    "--rollout=32",
    "--batch_size=1024",
    "--num_epochs=2",
    "--num_batches_per_epoch=2",
    "--learning_rate=3e-4",
    "--exploration_loss_coeff=0.01",
    "--selfplay_pool=8",
    "--selfplay_snapshot_every=250",
    "--selfplay_pool_prob=0.5",
    "--selfplay_pool_keep=spread",
]


SPREAD = "mpe2.simple_spread_v3:parallel_env"
SPREAD_EVAL_SEED = 100_000
SPREAD_GAIN = 0.2  # the controller's velocity damping, the best of 0.15-0.4 on 50 games (seeds 1000-1049)


def spread_scripted(obs: np.ndarray) -> int:
    """simple_spread_v3's scripted agent, from its own observation (18: own velocity, own position, the three
    landmarks and the two other agents relative to it, communication): landmarks go to agents greedily by distance
    (the closest free pair first), then a move along the axis where its target, less SPREAD_GAIN times its velocity,
    is farthest (0 stay, 1 -x, 2 +x, 3 -y, 4 +y)."""
    landmarks = obs[4:10].reshape(3, 2)
    agents = np.vstack([np.zeros(2), obs[10:14].reshape(2, 2)])  # itself first, all relative to itself
    distance = np.linalg.norm(landmarks[None, :, :] - agents[:, None, :], axis=2)
    free_agents, free_landmarks = {0, 1, 2}, {0, 1, 2}
    target = landmarks[int(np.argmin(distance[0]))]
    for flat in np.argsort(distance, axis=None):
        a, lm = divmod(int(flat), 3)
        if a in free_agents and lm in free_landmarks:
            if a == 0:
                target = landmarks[lm]
                break
            free_agents.discard(a)
            free_landmarks.discard(lm)
    want = target - SPREAD_GAIN * obs[0:2]
    axis = int(np.argmax(np.abs(want)))
    if abs(want[axis]) < 0.02:
        return 0
    return (2 if want[0] > 0 else 1) if axis == 0 else (4 if want[1] > 0 else 3)


def alternating_rates(runs: dict[str, tuple[str, list[str]]], args: argparse.Namespace) -> list[float]:
    """Training agent steps/s of each run (name -> env, flags), the runs alternating `--repeats` times; prints their
    table (medians, min-max) and returns the medians in the runs' order."""
    rates: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(args.repeats):
        for name, (env, flags) in runs.items():
            rates[name].append(appo_fps(env, args.seconds, args.warmup, flags, False))
    print("| run | training agent steps/s, median (min-max) |")
    print("|---|---|")
    for name, values in rates.items():
        print(f"| {name} | {statistics.median(values):.0f} ({min(values):.0f}-{max(values):.0f}) |")
    return [statistics.median(values) for values in rates.values()]


def throughput(args: argparse.Namespace, extra: list[str]) -> None:
    runs = {"paddle_duel (2 agents)": ("paddle_duel", extra), "single-agent twin": (SINGLE, extra)}
    multi, single = alternating_rates(runs, args)
    print(f"ratio (2 agents / single agent, per agent step): {multi / single:.2f}")


def value_throughput(args: argparse.Namespace, extra: list[str]) -> None:
    runs = {f"simple_spread_v3, --value_input={v}": (SPREAD, [f"--value_input={v}", *extra]) for v in ("team", "local")}
    team, local = alternating_rates(runs, args)
    print(f"ratio (team / local): {team / local:.2f}")


def early_and_late(run: Path, tag: str) -> tuple[float, float]:
    """Policy 0's `tag` averaged over the run's first and last tenth of summaries (NaN where it has none)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run / "summaries" / "0"), size_guidance={"scalars": 0})
    acc.Reload()
    if tag not in acc.Tags()["scalars"]:
        return float("nan"), float("nan")
    events = acc.Scalars(tag)
    tenth = max(len(events) // 10, 1)
    return statistics.mean(e.value for e in events[:tenth]), statistics.mean(e.value for e in events[-tenth:])


def selfplay(args: argparse.Namespace, extra: list[str]) -> None:
    import appo

    out = args.out or Path(tempfile.mkdtemp(prefix="appo_selfplay_"))
    rows = []
    for seed in args.seeds:
        name = f"paddle_duel_s{seed}"
        cmd = [sys.executable, "train_appo.py", "--env=paddle_duel", f"--experiment={name}", f"--train_dir={out}"]
        cmd += [f"--seed={seed}", f"--train_for_seconds={args.minutes * 60}", *SELFPLAY_FLAGS, *extra]
        subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        policy = appo.load_policy(out / name)
        returns = policy.evaluate(episodes=args.games, seed=100_000)
        wins = sum(r > 0 for r in returns) / len(returns)
        pool = [early_and_late(out / name, f"selfplay/pool_{what}") for what in ("win_rate", "draw_rate")]
        rows.append((seed, wins, *pool[0], *pool[1]))
        print(f"seed {seed}: {wins:.1%} of {args.games} games won against the tracker", flush=True)
    print(f"\nruns: {out}\n")
    print("| seed | win rate vs tracker | against the pool: win rate, first tenth -> last | draw rate, the same |")
    print("|---|---|---|---|")
    for seed, wins, early, late, draws_early, draws_late in rows:
        print(f"| {seed} | {wins:.1%} | {early:.2f} -> {late:.2f} | {draws_early:.2f} -> {draws_late:.2f} |")
    print(f"median win rate: {statistics.median(r[1] for r in rows):.1%} ({args.minutes} min per run)")


def spread(args: argparse.Namespace, extra: list[str]) -> None:
    import appo
    from appo.envs.multi_agent.multi_agent import run_game
    from appo.tools.reward_scales import mappo_spread_score

    out = args.out or Path(tempfile.mkdtemp(prefix="appo_spread_"))
    rows = []
    scripted = None
    for seed in args.seeds:
        name = f"simple_spread_{args.value_input}_s{seed}"
        cmd = [sys.executable, "train_appo.py", f"--env={SPREAD}", f"--experiment={name}", f"--train_dir={out}"]
        cmd += [f"--seed={seed}", f"--train_for_env_steps={args.steps}", f"--value_input={args.value_input}", *extra]
        started = time.monotonic()
        subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        minutes = (time.monotonic() - started) / 60
        policy = appo.load_policy(out / name)
        env = policy.make_env()
        learned = statistics.mean(policy.evaluate(env, episodes=args.games, seed=SPREAD_EVAL_SEED))
        if scripted is None:  # deterministic: the same on every seed's env
            act = lambda obs, _reset: np.array([[spread_scripted(o)] for o in obs])  # noqa: E731
            scripted = statistics.mean(run_game(env, act, SPREAD_EVAL_SEED + i)[0] for i in range(args.games))
        env.close()
        training = early_and_late(out / name, "episode/return_mean")[1]
        rows.append((seed, training, learned, minutes))
        print(f"seed {seed}: {learned:.2f} per agent (scripted {scripted:.2f}), {minutes:.1f} min", flush=True)
    print(f"\nruns: {out} (--value_input={args.value_input})\n")
    print(
        f"| seed | training return per agent (MAPPO's scale) | {args.games} games, deterministic (MAPPO's scale) "
        "| scripted, same games | training minutes |"
    )
    print("|---|---|---|---|---|")
    for seed, training, learned, minutes in rows:
        print(
            f"| {seed} | {training:.2f} ({mappo_spread_score(training):.0f}) | {learned:.2f} "
            f"({mappo_spread_score(learned):.0f}) | {scripted:.2f} | {minutes:.1f} |"
        )
    median = statistics.median(r[1] for r in rows)
    print(
        f"median training return: {median:.2f} per agent ({mappo_spread_score(median):.0f} on MAPPO's scale, which "
        f"converges near -120); scripted {scripted:.2f} ({args.steps} agent steps)"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="what", required=True)
    tp = sub.add_parser("throughput")
    tp.add_argument("--repeats", type=int, default=3)
    tp.add_argument("--seconds", type=float, default=40.0)
    tp.add_argument("--warmup", type=float, default=15.0)
    sp = sub.add_parser("selfplay")
    sp.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    sp.add_argument("--minutes", type=float, default=25.0)
    sp.add_argument("--games", type=int, default=200)
    sp.add_argument("--out", type=Path, default=None)
    ss = sub.add_parser("spread")
    ss.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ss.add_argument("--steps", type=int, default=60_000_000)  # MAPPO's 20M env steps
    ss.add_argument("--games", type=int, default=200)
    ss.add_argument("--value_input", choices=["team", "local"], default="team")
    ss.add_argument("--out", type=Path, default=None)
    vt = sub.add_parser("value_throughput")
    vt.add_argument("--repeats", type=int, default=3)
    vt.add_argument("--seconds", type=float, default=40.0)
    vt.add_argument("--warmup", type=float, default=15.0)
    args, extra = parser.parse_known_args()
    modes = {"throughput": throughput, "selfplay": selfplay, "spread": spread, "value_throughput": value_throughput}
    modes[args.what](args, extra)
    return 0


if __name__ == "__main__":
    sys.exit(main())
