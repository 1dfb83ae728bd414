"""What a run's driver does before any process exists (`prepare`: verify, folders, cfg.json, logging, spaces), and
the budgets that end every run loop (the engine's, appo/driver/runner.py, and the meta-gradient loop, appo/maml/):
/dev/shm room for the run's shared tensors, checkpoints that fit the cfg's model, and a run resumed with its budget
already spent (it trains nothing: a finished run's checkpoints stay as they are)."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import sys
from typing import Any

from appo.config.cfg import Cfg, cfg_to_dict, experiment_dir
from appo.config.derive import derive
from appo.config.verify import verify_or_exit
from appo.driver.run_lock import hold_run_dir
from appo.driver.supported_spaces import space_rule_problems
from appo.envs import UnknownEnvError, make_run_env, make_task_assigner
from appo.envs.multi_agent.multi_agent import AgentEnvError
from appo.models.registry import make_model
from appo.protocol.buffers import shared_bytes
from appo.protocol.processes import process_title, set_process_title
from appo.protocol.wiring import queue_bytes
from appo.utils.logging import init_logging, log
from appo.utils.paths import cfg_path, checkpoint_dir, log_path, stale_temporary_files, write_text_atomic

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def budget_spent(cfg: Cfg, env_steps: int, version: int, elapsed: float) -> str | None:
    """Which of the run's budgets is spent (env steps trained by every policy, seconds of this session, learner
    iterations: train/version), as the reason the run stops; None while none is. Every run loop stops by it."""
    if env_steps >= cfg.train_for_env_steps:
        return f"reached {cfg.train_for_env_steps} env steps" + (" per policy" if cfg.num_policies > 1 else "")
    if elapsed >= cfg.train_for_seconds:
        return f"ran {cfg.train_for_seconds:g} s"
    if cfg.train_for_iterations > 0 and version >= cfg.train_for_iterations:
        return f"reached {cfg.train_for_iterations} iterations (train/version)"
    return None


def check_checkpoints(cfg: Cfg, spaces: tuple[Any, Any]) -> tuple[int, int] | None:
    """On resume, the newest readable checkpoint of every policy must fit this cfg's model; otherwise exit 2
    before anything starts (a learner failing later would leave a half-started run). Returns the fewest env steps
    and versions among those checkpoints, or None while some policy has none."""
    from appo.learning.checkpoint import list_checkpoints, load_latest

    try:
        template = make_model(cfg, *spaces)
    except ValueError as exc:  # spaces the algorithm's model cannot serve (SAC on discrete actions)
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    counters: list[tuple[int, int]] = []
    for policy_id in range(cfg.num_policies):
        ckpt_dir = checkpoint_dir(experiment_dir(cfg), policy_id)
        loaded = load_latest(ckpt_dir)
        if loaded is None:
            files = list_checkpoints(ckpt_dir)
            if files:  # starting afresh would overwrite the run's history: its best checkpoint, its old ones
                print(
                    f"error: {ckpt_dir}: none of its {len(files)} checkpoints loads (newest {files[-1].name}); "
                    f"restore them, or move them away to start policy {policy_id} afresh",
                    file=sys.stderr,
                )
                raise SystemExit(2) from None
            continue
        state, path = loaded
        if "env_steps" in state and "version" in state:
            counters.append((int(state["env_steps"]), int(state["version"])))
        try:
            template.load_state_dict(state["model"])
        except (KeyError, RuntimeError) as exc:
            first = str(exc).strip().splitlines()
            detail = next((line.strip() for line in first if "size mismatch" in line or "Missing" in line), first[0])
            print(
                f"error: {path}: does not fit the model of this cfg ({detail}); use the run's own settings or "
                "another --experiment",
                file=sys.stderr,
            )
            raise SystemExit(2) from None
    if len(counters) < cfg.num_policies:
        return None
    return min(c[0] for c in counters), min(c[1] for c in counters)


def multi_agent_problem(cfg: Cfg, multi_agent: bool) -> str | None:
    """Why this run cannot train its env, as one line naming the flag (None: it can): a multi-agent env trains with
    the PPO family on plain runs; --selfplay_pool, --obs_agent_id and --value_input (other than local) need one."""
    if not multi_agent:
        if cfg.obs_agent_id:
            return f"--obs_agent_id: needs a multi-agent env (--env={cfg.env} has one agent)"
        if cfg.value_input != "local":
            return f"--value_input={cfg.value_input}: needs a multi-agent env (--env={cfg.env} has one agent)"
        return f"--selfplay_pool={cfg.selfplay_pool}: needs a multi-agent env" if cfg.selfplay_pool > 0 else None
    if cfg.algo != "appo":
        return f"--algo={cfg.algo}: multi-agent envs (--env={cfg.env}) train with --algo=appo"
    if cfg.task_schedule != "none":
        return f"--task_schedule={cfg.task_schedule}: multi-agent envs (--env={cfg.env}) take none"
    return None


def check_shared_memory(cfg: Cfg, spaces: tuple[Any, Any], derived: Any = None, shm: str = "/dev/shm") -> None:
    """Refuse to start (exit 2) when /dev/shm cannot hold the run's shared tensors and queues: otherwise a
    worker would die with SIGBUS mid-run (Docker's default /dev/shm is 64 MB)."""
    if cfg.serial_mode or not os.path.isdir(shm):
        return
    need = shared_bytes(cfg, derived or derive(cfg), *spaces) + queue_bytes(cfg.num_workers, cfg.num_policies)
    free = shutil.disk_usage(shm).free
    if need * 1.1 > free:
        print(
            f"error: {shm} has {free / 2**20:.0f} MB free, this run needs about {need * 1.1 / 2**20:.0f} MB: "
            "enlarge it (e.g. docker --shm-size) or lower --num_workers, --num_envs_per_worker or --rollout",
            file=sys.stderr,
        )
        raise SystemExit(2)


def spent_at_resume(cfg: Cfg, spaces: tuple[Any, Any]) -> tuple[str | None, int]:
    """The budget the run's checkpoints have already spent (env steps or iterations; a time budget is this
    session's), after checking that they fit, None for a new run or one with training left; and the env steps they
    hold (0 for a new run)."""
    counters = check_checkpoints(cfg, spaces)
    if counters is None:
        return None, 0
    return budget_spent(cfg, *counters, elapsed=0.0), counters[0]


def prepare(cfg: Cfg) -> tuple[Any, Any, Any, int, str | None]:
    """Everything before any process exists: verify, folders, cfg.json, logging, spaces, the number of train
    tasks, and the budget a resumed run's checkpoints have already spent (None: there is training to do)."""
    verify_or_exit(cfg)
    try:
        env = make_run_env(cfg)
    except (UnknownEnvError, AgentEnvError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    spaces = (env.observation_space, env.action_space)
    multi_agent = bool(getattr(env, "is_multi_agent", False))
    agents = int(getattr(env, "num_agents", 1)) if multi_agent else 1
    problem = multi_agent_problem(cfg, multi_agent) or next(iter(space_rule_problems(cfg.env, env)), None)
    if problem:
        env.close()
        print(f"error: {problem}", file=sys.stderr)
        raise SystemExit(2)
    assigner = make_task_assigner(cfg, env, 0)
    num_tasks = len(assigner.tasks) if assigner is not None else 0  # train tasks the control channel may name
    env.close()
    check_shared_memory(cfg, spaces, derive(cfg, agents, multi_agent))
    spent, resumed_steps = spent_at_resume(cfg, spaces)
    exp_dir = experiment_dir(cfg)
    try:
        exp_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # a file in the way, no permission, a read-only disk
        print(
            f"error: --train_dir={cfg.train_dir}: cannot make the run folder {exp_dir} ({exc.strerror})",
            file=sys.stderr,
        )
        raise SystemExit(2) from None
    hold_run_dir(exp_dir)  # one driver per run directory (appo/driver/run_lock.py): released as run() returns
    for stale in stale_temporary_files(exp_dir):  # a killed run's interrupted writes: no process writes them now
        stale.unlink(missing_ok=True)
    write_text_atomic(cfg_path(exp_dir), json.dumps(cfg_to_dict(cfg), indent=2) + "\n")
    init_logging(cfg.log_level, log_path(exp_dir), "driver")
    set_process_title(process_title(cfg, "driver"))
    if spent:
        log.info("nothing to train: the run's checkpoints have %s; raise that budget to train on", spent)
    derived = dataclasses.replace(derive(cfg, agents, multi_agent), resumed_steps=resumed_steps)
    return exp_dir, spaces, derived, num_tasks, spent
