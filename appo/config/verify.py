"""A run's cfg checked as a whole: every problem one line naming the flag, its value and what would be valid."""

from __future__ import annotations

import os
import re
import sys

from appo.config.algorithms import ALGORITHMS, algorithm_config
from appo.config.cfg import ENCODERS, Cfg
from appo.config.derive import Derived, derive, learner_devices
from appo.config.pbt import verify_pbt
from appo.config.trunk import value_trunk_errors

LR_SCHEDULES = ("constant", "linear_decay", "kl_adaptive_minibatch", "kl_adaptive_epoch")


def _positive(cfg: Cfg, names: list[str]) -> list[str]:
    return [f"--{n}={getattr(cfg, n)}: must be > 0" for n in names if getattr(cfg, n) <= 0]


def _family_sizes(cfg: Cfg) -> list[str]:
    """The sizes of the bandit and tabular-MDP families (envs/meta/bandits.py, envs/meta/tabular_mdp.py)."""
    errors = [f"--num_arms={cfg.num_arms}: a bandit needs at least 2 arms"] if cfg.num_arms < 2 else []
    return errors + _positive(cfg, ["mdp_states", "mdp_actions", "mdp_episode_steps"])


def _selfplay(cfg: Cfg) -> list[str]:
    errors = []
    if cfg.selfplay_pool < 0:
        errors.append(f"--selfplay_pool={cfg.selfplay_pool}: must be >= 0 (0: no pool)")
    if cfg.selfplay_snapshot_every < 1:
        errors.append(f"--selfplay_snapshot_every={cfg.selfplay_snapshot_every}: must be >= 1")
    if not 0.0 <= cfg.selfplay_pool_prob <= 1.0:
        errors.append(f"--selfplay_pool_prob={cfg.selfplay_pool_prob}: must be in [0, 1]")
    if cfg.doom_damage_reward < 0:
        errors.append(f"--doom_damage_reward={cfg.doom_damage_reward}: must be >= 0 (0: frags and deaths alone)")
    return errors


def verify(cfg: Cfg) -> list[str]:
    """Every problem with the cfg, one line each naming the flag, its value and what would be valid."""
    errors = _positive(
        cfg,
        ["num_workers", "num_envs_per_worker", "worker_num_splits", "rollout", "num_policies", "batch_size"]
        + ["num_batches_per_epoch", "num_epochs", "policy_workers_per_policy", "learning_rate", "rnn_size"]
        + ["keep_checkpoints", "report_interval", "train_for_env_steps", "train_for_seconds"]
        + ["episodes_per_trial", "num_test_tasks", "eval_episodes", "worker_stuck_timeout", "max_env_errors"]
        + ["worker_start_timeout", "policy_redraw_every"]
        + ["stall_timeout"],
    )
    if errors:
        return errors
    d = derive(cfg)
    if cfg.num_envs_per_worker % cfg.worker_num_splits:
        errors.append(
            f"--num_envs_per_worker={cfg.num_envs_per_worker}: must be a multiple of "
            f"--worker_num_splits={cfg.worker_num_splits}"
        )
    if cfg.batch_size % cfg.rollout:
        errors.append(f"--batch_size={cfg.batch_size}: must be a multiple of --rollout={cfg.rollout}")
    choices = {"nonlinearity": ("tanh", "relu", "elu"), "rnn_type": ("gru", "lstm"), "encoder": ENCODERS}
    choices["env_vector"] = ("auto", "per_env")
    choices |= {"lr_schedule": LR_SCHEDULES, "log_level": ("debug", "info", "warning", "error")}
    choices |= {"task_schedule": ("none", "per_episode", "per_trial", "fixed", "curriculum")}
    choices |= {"task_visibility": ("hidden", "visible"), "save_best_metric": ("train", "eval")}
    choices["selfplay_pool_keep"] = ("recent", "spread")
    choices["value_input"] = ("local", "team", "state")
    choices["learner_precision"] = ("fp32", "bf16", "auto")
    for name, valid in choices.items():
        if getattr(cfg, name) not in valid:
            errors.append(f"--{name}={getattr(cfg, name)}: must be one of {', '.join(valid)}")
    errors += _lr_schedule(cfg)
    if d.recurrence <= 0 or cfg.rollout % d.recurrence:
        errors.append(f"--recurrence={cfg.recurrence}: must be -1 or divide --rollout={cfg.rollout}")
    if not 0.0 <= cfg.gamma <= 1.0:
        errors.append(f"--gamma={cfg.gamma}: must be in [0, 1]")
    try:
        errors += algorithm_config(cfg.algo).verify(cfg)
    except ValueError as exc:  # an unknown --algo
        errors.append(str(exc))
    if cfg.save_best_metric == "eval" and cfg.eval_interval <= 0 and cfg.meta_test_interval <= 0:
        errors.append("--save_best_metric=eval: needs --eval_interval > 0 (or --meta_test_interval for task envs)")
    errors += _family_sizes(cfg) + value_trunk_errors(cfg)
    errors += _selfplay(cfg) + _pixel_statistics(cfg)
    if cfg.train_for_iterations < 0:
        errors.append(f"--train_for_iterations={cfg.train_for_iterations}: must be >= 0 (0: no limit)")
    if cfg.max_policy_lag < 0:
        errors.append(f"--max_policy_lag={cfg.max_policy_lag}: must be >= 0")
    if cfg.num_minibatches_to_accumulate < 1:
        errors.append(f"--num_minibatches_to_accumulate={cfg.num_minibatches_to_accumulate}: must be >= 1")
    if not (cfg.device in ("auto", "cpu", "cuda") or cfg.device.startswith("cuda:")):
        errors.append(f"--device={cfg.device}: must be auto, cpu, cuda or cuda:N")
    if not cfg.experiment or "/" in cfg.experiment:
        errors.append(f"--experiment={cfg.experiment!r}: must be a non-empty name without '/'")
    errors += verify_learner_ranks(cfg, d) + verify_backend(cfg) + verify_tracking(cfg)

    return errors + verify_pbt(cfg)


def _pixel_statistics(cfg: Cfg) -> list[str]:
    if cfg.normalize_images and cfg.algo != "appo":
        return [f"--normalize_images: only --algo=appo's learner keeps pixel statistics, not --algo={cfg.algo}"]
    return []


def _lr_schedule(cfg: Cfg) -> list[str]:
    errors = []
    in_bounds = 0.0 < cfg.lr_adaptive_min <= cfg.learning_rate <= cfg.lr_adaptive_max
    if cfg.lr_schedule.startswith("kl_adaptive") and not in_bounds:
        errors.append(
            f"--learning_rate={cfg.learning_rate}: with --lr_schedule={cfg.lr_schedule} must lie within "
            f"[--lr_adaptive_min={cfg.lr_adaptive_min}, --lr_adaptive_max={cfg.lr_adaptive_max}]"
        )
    if cfg.lr_schedule_kl_threshold_final < 0:
        errors.append(
            f"--lr_schedule_kl_threshold_final={cfg.lr_schedule_kl_threshold_final}: must be > 0 (the KL target at "
            "the end of the run) or 0 (the target stays)"
        )
    if cfg.lr_schedule_kl_threshold <= 0:
        errors.append(f"--lr_schedule_kl_threshold={cfg.lr_schedule_kl_threshold}: must be > 0")
    return errors


def verify_backend(cfg: Cfg) -> list[str]:
    """--backend and the Ray flags: one line per problem."""
    if cfg.backend not in ("local", "ray"):
        return [f"--backend={cfg.backend}: must be local or ray"]
    if cfg.backend != "ray":
        return []
    errors = []
    if cfg.serial_mode:
        errors.append("--backend=ray: --serial_mode runs everything in one process; use one or the other")
    if not (cfg.actor_inference and cfg.numpy_inference):
        errors.append("--backend=ray: Ray actors act for their own envs; needs --actor_inference and --numpy_inference")
    if cfg.ray_worker_cpus <= 0:
        errors.append(f"--ray_worker_cpus={cfg.ray_worker_cpus}: must be > 0")
    if cfg.ray_max_restarts < -1:
        errors.append(f"--ray_max_restarts={cfg.ray_max_restarts}: must be >= 0, or -1 for no limit")
    import importlib.util

    if importlib.util.find_spec("ray") is None:
        errors.append("--backend=ray: Ray is not installed; pip install -e '.[ray]'")
    return errors


def verify_tracking(cfg: Cfg) -> list[str]:
    """--with_wandb: wandb must import (the run imports it anyway); nothing is imported without the flag."""
    if not cfg.with_wandb:
        return []
    if not cfg.wandb_project:
        return ["--wandb_project='': --with_wandb needs a project name"]
    try:
        import wandb  # noqa: F401
    except ImportError as exc:
        reason = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return [f"--with_wandb: cannot import wandb ({reason}); pip install 'appo[wandb]'"]
    return []


def verify_or_exit(cfg: Cfg) -> None:
    """Print every problem on its own line to stderr and exit 2 (the usage-error status)."""
    errors = verify(cfg)
    if errors:
        for line in errors:
            print(f"error: {line}", file=sys.stderr)
        raise SystemExit(2)


def verify_learner_ranks(cfg: Cfg, d: Derived) -> list[str]:
    """--learner_world_size and --learner_devices: one line per problem."""
    size = cfg.learner_world_size
    flag = f"--learner_world_size={size}"
    if size < 1:
        return [f"{flag}: must be >= 1"]
    errors = []
    if cfg.learner_threads < 0:
        errors.append(f"--learner_threads={cfg.learner_threads}: must be >= 1, or 0 (the cores the run leaves free)")
    if size > 1 and cfg.serial_mode:
        errors.append(f"{flag}: --serial_mode runs one learner in the driver process; use 1")
    if size > 1 and cfg.algo in ALGORITHMS:
        consumes = cfg.traits.consumes
        if consumes != "fresh":
            why = "keeps its own replay" if consumes == "replay" else "takes its meta-step in the driver"
            errors.append(f"{flag}: --algo={cfg.algo} {why} and trains on one learner rank; use 1")
    if size > d.trajectories_per_iteration:
        errors.append(
            f"{flag}: an iteration has {d.trajectories_per_iteration} trajectories (--batch_size x "
            "--num_batches_per_epoch / --rollout); every rank needs at least one"
        )
    if cfg.learner_devices:
        listed = learner_devices(cfg)
        bad = [x for x in listed if x != "cpu" and not re.fullmatch(r"cuda(:\d+)?", x)]
        if bad:
            errors.append(f"--learner_devices={cfg.learner_devices}: {bad[0]!r} is not cpu, cuda or cuda:N")
        elif len(listed) != size:
            errors.append(f"--learner_devices={cfg.learner_devices}: {len(listed)} devices for {flag} ranks")
        elif len({x == "cpu" for x in listed}) > 1:
            errors.append(f"--learner_devices={cfg.learner_devices}: all ranks on the CPU or all on CUDA")
    if errors or (size == 1 and not cfg.learner_devices):
        return errors
    return errors + _missing_learner_devices(cfg, learner_devices(cfg))


def _missing_learner_devices(cfg: Cfg, devices: list[str]) -> list[str]:
    """More GPUs named than exist, or more CPU ranks than cores: one line naming the flag."""
    flag = (
        f"--learner_devices={cfg.learner_devices}"
        if cfg.learner_devices
        else f"--learner_world_size={cfg.learner_world_size}"
    )
    if devices[0] == "cpu":
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        if len(devices) > cores:
            return [f"{flag}: {len(devices)} CPU learner ranks on {cores} cores; use at most {cores}"]
        return []
    import torch

    have = torch.cuda.device_count()
    highest = max(int(x.partition(":")[2] or 0) for x in devices)
    if highest >= have:
        share = "" if cfg.learner_devices else "; ranks may share a GPU: --learner_devices=cuda:0,cuda:0"
        return [f"{flag}: needs cuda:{highest}, this machine has {have} CUDA device(s){share}"]
    return []
