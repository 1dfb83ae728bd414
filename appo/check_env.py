"""`python -m appo.check_env --env=NAME [--steps N] [--max_episode_steps N] [--seed N]`: try an env the way a run's
actor workers will, before training on it (docs/custom_envs.md).

The env is built as the workers build it (the run's cfg of defaults and the env's preset, `make_run_env`), in this
process and in a freshly spawned one (the workers are spawned processes that build their envs from --env), its
spaces are checked against what the engine trains on, and it is reset and stepped `--steps` times with random
actions, resetting as episodes end. Every problem found is one line naming the env and what would be valid, and the
exit status is 1; otherwise one `ok:` line names the spaces and the exit status is 0. Notes (no episode ended, a
reset that ignores its seed, no frames for enjoy.py's videos) do not fail the check. The checks themselves:
appo/tools/env_checks.py.

From Python, `check(name)` returns the problems, the notes and the summary line, for an env class of one's own
script or notebook as well."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from appo.driver.supported_spaces import describe, first_line, space_problems
from appo.tools import env_checks
from appo.tools.env_checks import EnvProblem, Findings

DESCRIPTION = "Try an env the way appo's actor workers will: build it, check its spaces, reset and step it."


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m appo.check_env", description=DESCRIPTION, allow_abbrev=False)
    parser.add_argument(
        "--env",
        required=True,
        help="what train_appo.py's --env takes: a project env, a gymnasium id or module.path:ClassName",
    )
    parser.add_argument("--steps", type=int, default=1000, help="random steps to take (default: 1000)")
    parser.add_argument(
        "--max_episode_steps", type=int, default=0, help="train_appo.py's flag: a time limit; 0 keeps the env's own"
    )
    parser.add_argument("--seed", type=int, default=0, help="the seed of the first reset and of the actions")
    return parser


def _step(name: str, cfg: Any, env: Any, steps: int, seed: int, found: Findings) -> None:
    """Reset and step the env, recording what goes wrong (one line) and the notes."""
    from appo.envs.multi_agent.agent_spaces import AgentEnvError

    multi_agent = bool(getattr(env, "is_multi_agent", False))
    stepper = env_checks.step_agents if multi_agent else env_checks.step_single
    try:
        first = stepper(env, steps, seed, found)
    except EnvProblem as exc:
        found.problems.append(f"--env={name}: {exc}")
        return
    except AgentEnvError as exc:  # the contract AgentEnv checks (a live agent missing, a NaN reward): its own line
        found.problems.append(str(exc).strip().splitlines()[0])
        return
    except Exception as exc:  # noqa: BLE001 (any failure is the finding)
        what = "reset()" if found.steps == 0 else f"step() at step {found.steps + 1}"
        found.problems.append(f"--env={name}: {what} raised {first_line(exc)}")
        return
    if found.episodes == 0 and steps > 0:
        found.notes.append(
            f"--env={name}: no episode ended in {found.steps} random steps; fine for a task without an end, else "
            "give it a time limit (--max_episode_steps=N, or truncated=True from step)"
        )
    try:
        seeding = env_checks.seed_note(name, cfg, first, seed)
    except Exception as exc:  # noqa: BLE001
        seeding = f"--env={name}: a second env, built to compare first observations, raised {first_line(exc)}"
    found.notes += [note for note in (seeding, env_checks.render_note(name, cfg)) if note is not None]


def _summary(name: str, env: Any, found: Findings) -> str:
    obs, act = describe(getattr(env, "observation_space", None)), describe(getattr(env, "action_space", None))
    if getattr(env, "is_multi_agent", False):
        rows = f"{env.num_agents} agents, a row each: observations {obs}, actions {act}"
    else:
        rows = f"observations {obs}, actions {act}"
    episodes = f"{found.episodes} episode{'' if found.episodes == 1 else 's'}"
    return f"ok: --env={name}: {rows}; {episodes} in {found.steps} random steps"


def check(name: str, steps: int = 1000, max_episode_steps: int = 0, seed: int = 0) -> tuple[list[str], list[str], str]:
    """Check `--env=name` as the actor workers will use it: (problems, notes, the `ok:` line: empty where there are
    problems), one line each; the env trains as it is where there are no problems. Never raises for the env's
    faults."""
    from appo.tools.evaluate import has_display, prepare_headless

    prepare_headless(has_display())  # as enjoy.py does: offscreen frames for the render check, no X server asked for
    found = Findings()
    try:
        cfg = env_checks.worker_cfg(name, max_episode_steps, seed)
        env = env_checks.build_env(cfg)
    except (Exception, SystemExit) as exc:  # noqa: BLE001 (any failure is the finding)
        return [env_checks.build_problem(name, exc)], [], ""
    try:
        found.problems += space_problems(name, cfg, env)
        if not found.problems:
            _step(name, cfg, env, steps, seed, found)
        summary = _summary(name, env, found)
    finally:
        try:
            env.close()
        except Exception as exc:  # noqa: BLE001
            found.problems.append(f"--env={name}: close() raised {first_line(exc)}")
    spawned = env_checks.spawn_problem(name, max_episode_steps, seed)
    if spawned is not None:
        found.problems.append(spawned)
    return found.problems, found.notes, "" if found.problems else summary


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.steps < 0 or args.max_episode_steps < 0:
        build_parser().error("--steps and --max_episode_steps take 0 or more")
    problems, notes, summary = check(args.env, args.steps, args.max_episode_steps, args.seed)
    for line in problems:
        print(f"error: {line}", flush=True)
    for line in notes:
        print(f"note: {line}", flush=True)
    if problems:
        return 1
    print(summary, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
