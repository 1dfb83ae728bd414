"""The run configuration: one set of dataclasses, the flag parser built from them, presets, resume merge,
derived values and validation.

Every hyperparameter is declared once below with its type, default and a one-line help. Flags are flat
(`--num_workers=16`); the groups only order the help. Precedence, lowest first:
dataclass defaults < env preset (envs/presets.py) < saved cfg.json (resume) < flags typed on this command line.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import re
import sys
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from appo.algorithms import ALGORITHMS, algorithm_defaults, algorithm_spec, flag_groups
from appo.flags import flag as _f


@dataclass
class RunCfg:
    env: str = _f("ant_dir", "env name: a project env (envs/), a gymnasium id, or module.path:ClassName")
    experiment: str = _f("default", "run name; everything lands in train_dir/experiment/")
    train_dir: str = _f("./train_dir", "root folder of all runs")
    seed: int = _f(0, "random seed of envs and torch")
    device: str = _f("auto", "torch device of policy workers and learners: auto, cpu, cuda, cuda:N")
    train_for_env_steps: int = _f(10_000_000_000, "stop once every policy has trained on this many env steps")
    train_for_seconds: float = _f(1e10, "stop after this many seconds of this session")
    train_for_iterations: int = _f(
        0, "stop once every policy's train/version (learner iterations) reaches this; 0: none"
    )
    save_every_sec: float = _f(120.0, "seconds between regular checkpoints")
    keep_checkpoints: int = _f(3, "regular checkpoints kept per policy (plus the best)")
    report_interval: float = _f(5.0, "seconds between status lines and tensorboard writes")
    serial_mode: bool = _f(False, "run every component in the driver process (debugging, determinism)")
    backend: str = _f(
        "local", "local (a process per component) or ray (actor workers as Ray actors: pip install -e '.[ray]')"
    )
    sampler_only: bool = _f(False, "benchmark: collect experience but skip training")
    log_level: str = _f("info", "debug, info, warning or error")


@dataclass
class SamplingCfg:
    num_workers: int = _f(2, "actor worker processes")
    num_envs_per_worker: int = _f(8, "envs stepped by each actor worker")
    worker_num_splits: int = _f(2, "groups each worker's envs are split into (2 = double buffering)")
    rollout: int = _f(64, "T: env steps of one trajectory slot")
    num_policies: int = _f(1, "policies trained in this run (population)")
    policy_workers_per_policy: int = _f(
        1, "policy worker processes per policy (shared: in all); none run when actor workers act themselves"
    )
    numpy_inference: bool = _f(True, "on the CPU, act in numpy (MLP, GRU, LSTM: same function, cheaper than torch)")
    actor_inference: bool = _f(True, "each actor worker acts for its own envs (numpy, CPU); no policy worker processes")
    shared_policy_workers: bool = _f(
        True, "several policies: every policy worker serves all of them (one request per split and step)"
    )
    max_episode_steps: int = _f(0, "episode step limit; 0 keeps the env's own")
    set_workers_cpu_affinity: bool = _f(True, "pin actor workers to cores round-robin")
    force_envs_single_thread: bool = _f(True, "limit BLAS/OpenMP threads inside envs to one")
    decorrelate_experience_max_seconds: float = _f(0.0, "random warm-up stepping per worker at start")
    reward_scale: float = _f(1.0, "rewards are multiplied by this before learning")
    reward_clip: float = _f(0.0, "rewards are clipped to +-this before learning; 0 disables")
    sparse_reward: bool = _f(False, "pay each episode's whole return at its last step, 0 before (the sum is kept)")
    worker_stuck_timeout: float = _f(30.0, "seconds without a heartbeat before an actor worker is replaced")
    worker_start_timeout: float = _f(
        120.0, "seconds a started actor or policy worker may take to its first heartbeat (env construction)"
    )
    stall_timeout: float = _f(300.0, "seconds without any env step trained before the run stops with an error")
    max_env_errors: int = _f(10, "consecutive failures of one env (rebuilt each time) before the run fails")


@dataclass
class LearningCfg:
    algo: str = _f("appo", f"training algorithm (appo/algorithms): {', '.join(ALGORITHMS)}")
    batch_size: int = _f(1024, "minibatch: env steps per SGD step")
    num_batches_per_epoch: int = _f(1, "minibatches per epoch; an iteration trains on their sum")
    num_epochs: int = _f(1, "passes over each iteration's experience")
    gamma: float = _f(0.99, "discount")
    value_bootstrap: bool = _f(True, "bootstrap from V(s) at time-limit truncation instead of treating it as death")
    max_grad_norm: float = _f(4.0, "global gradient norm clip; 0 disables")
    learning_rate: float = _f(1e-4, "Adam learning rate")
    lr_schedule: str = _f("constant", "constant or linear_decay (to 0 at train_for_env_steps)")
    adam_eps: float = _f(1e-6, "Adam epsilon")
    adam_beta1: float = _f(0.9, "Adam beta1")
    adam_beta2: float = _f(0.999, "Adam beta2")
    async_rl: bool = _f(True, "collect while training (off: synchronous PPO, zero policy lag)")
    collect_ahead: bool = _f(
        False, "with --async_rl=False: collect the next iteration while the learner trains (policy lag at most 1)"
    )
    max_policy_lag: int = _f(100, "drop experience more than this many policy versions old")
    num_minibatches_to_accumulate: int = _f(2, "iterations of experience that may wait for the learner")
    learner_world_size: int = _f(1, "data-parallel learner processes per policy (DDP; gloo on CPU, nccl on GPUs)")
    learner_devices: str = _f("", "device of each learner rank, comma-separated (cuda:0,cuda:0); empty: one each")
    learner_threads: int = _f(
        1, "torch threads of each learner process; more only where the learner is the bottleneck and cores idle (SAC)"
    )


@dataclass
class ModelCfg:
    encoder_mlp_layers: list[int] = _f([64, 64], "hidden sizes of the MLP encoder")
    nonlinearity: str = _f("tanh", "tanh, relu or elu")
    use_rnn: bool = _f(False, "recurrent core after the encoder")
    rnn_type: str = _f("gru", "gru or lstm")
    rnn_size: int = _f(128, "hidden size of the recurrent core")
    recurrence: int = _f(-1, "BPTT chunk length; -1 means rollout")
    normalize_input: bool = _f(True, "running mean/std normalisation of observations")
    normalize_returns: bool = _f(True, "running mean/std normalisation of value targets")
    initial_log_std: float = _f(0.0, "initial log standard deviation of Gaussian actions")
    separate_value_trunk: bool = _f(False, "the value head gets its own MLP encoder instead of sharing the policy's")


@dataclass
class MetaCfg:
    task_schedule: str = _f("none", "none, per_episode, per_trial, fixed or curriculum (task envs only)")
    episodes_per_trial: int = _f(2, "episodes of one task per trial; memory is carried across them")
    task_visibility: str = _f("hidden", "hidden (meta-RL: obs + previous action, reward, done) or visible")
    num_train_tasks: int = _f(40, "tasks in the train split (finite families use all their tasks)")
    num_test_tasks: int = _f(10, "held-out tasks in the test split")
    meta_test_interval: int = _f(0, "env steps between meta-tests on the held-out tasks; 0 disables")


@dataclass
class EvalCfg:
    eval_interval: int = _f(0, "env steps between evaluations with deterministic actions; 0 disables")
    eval_episodes: int = _f(5, "episodes per evaluation (plain envs; task envs run one trial per test task)")
    save_best_metric: str = _f("train", "best checkpoint by train return or by eval return")


@dataclass
class PbtCfg:
    with_pbt: bool = _f(False, "population-based training of the --num_policies policies")
    pbt_period_env_steps: int = _f(5_000_000, "a policy's env steps between its PBT decisions")
    pbt_start_mutation: int = _f(20_000_000, "a policy's env steps before its first PBT decision")
    pbt_replace_fraction: float = _f(0.3, "share of the population that counts as best, and as worst")
    pbt_mutation_rate: float = _f(0.15, "probability of each hyperparameter being perturbed at a decision")
    pbt_replace_reward_gap: float = _f(0.1, "relative objective gap (to the better one) needed to replace a policy")
    pbt_replace_reward_gap_absolute: float = _f(1e-6, "absolute objective gap needed to replace a policy")
    pbt_perturb_min: float = _f(1.05, "smallest factor a perturbed hyperparameter is multiplied or divided by")
    pbt_perturb_max: float = _f(1.5, "largest such factor")
    pbt_target_objective: str = _f(
        "train_return", "train_return (average of the last 100 episodes) or eval_return (latest eval / meta-test)"
    )
    policy_hparams: str = _f("", 'JSON: starting hyperparameters per policy, e.g. {"1": {"learning_rate": 0}}')


@dataclass
class RayCfg:
    ray_address: str = _f("", "--backend=ray: a running cluster (auto, or HEAD:6379); empty: a private instance here")
    ray_worker_cpus: float = _f(1.0, "--backend=ray: CPUs each actor worker reserves on its Ray node")
    ray_max_restarts: int = _f(100, "--backend=ray: restarts of each actor worker before the run fails; -1: no limit")
    ray_object_store_mb: int = _f(0, "--backend=ray: object store of the private instance, MB; 0: Ray's default")


@dataclass
class Cfg(RunCfg, SamplingCfg, LearningCfg, *flag_groups(), ModelCfg, MetaCfg, EvalCfg, PbtCfg, RayCfg):  # type: ignore[misc]
    """The whole configuration of a run: every flag, flat (each algorithm's own flags included)."""


GROUPS: list[tuple[str, type]] = [
    ("run", RunCfg),
    ("sampling", SamplingCfg),
    ("learning", LearningCfg),
    *[(f"algorithm: {group.__name__.removesuffix('Cfg').lower()}", group) for group in flag_groups()],
    ("model", ModelCfg),
    ("meta", MetaCfg),
    ("evaluation", EvalCfg),
    ("population-based training", PbtCfg),
    ("ray", RayCfg),
]
# Flags that only steer this session and are never taken from a saved cfg.json on resume.
SESSION_FLAGS = {"train_for_seconds", "serial_mode", "log_level", "device", "learner_devices", "backend", "ray_address"}


def _str2bool(value: str) -> bool:
    lowered = value.lower()
    if lowered in ("true", "1", "yes", "on"):
        return True
    if lowered in ("false", "0", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected True or False, got {value!r}")


def build_parser(prog: str = "train_appo.py", extra: type | None = None) -> argparse.ArgumentParser:
    """Argument parser generated from the dataclasses; defaults are suppressed so that the parsed
    namespace holds exactly the flags typed on the command line (resume depends on that)."""
    parser = argparse.ArgumentParser(prog=prog, argument_default=argparse.SUPPRESS, allow_abbrev=False)
    groups = list(GROUPS) + ([("enjoy", extra)] if extra is not None else [])
    seen: set[str] = set()
    for title, group_cls in groups:
        group = parser.add_argument_group(title)
        for f in fields(group_cls):
            if f.name in seen:
                continue
            seen.add(f.name)
            default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
            help_text = f"{f.metadata.get('help', '')} (default: {default})"
            flag = f"--{f.name}"
            if isinstance(default, bool):
                group.add_argument(flag, type=_str2bool, nargs="?", const=True, metavar="BOOL", help=help_text)
            elif isinstance(default, list):
                item = float if default and isinstance(default[0], float) else int  # a list's items: its default's
                group.add_argument(flag, type=item, nargs="+", help=help_text)
            else:
                group.add_argument(flag, type=type(default), help=help_text)
    return parser


def cfg_to_dict(cfg: Cfg) -> dict[str, Any]:
    return dataclasses.asdict(cfg)


def make_cfg(overrides: dict[str, Any], cls: type = Cfg) -> Cfg:
    """A cfg from defaults plus `overrides`; unknown keys raise ValueError naming them."""
    names = {f.name for f in fields(cls)}
    unknown = sorted(set(overrides) - names)
    if unknown:
        raise ValueError(f"unknown config keys: {', '.join(unknown)}")
    return cls(**overrides)


def merge_cfg(explicit: dict[str, Any], saved: dict[str, Any] | None, cls: type = Cfg) -> Cfg:
    """Apply the precedence order: defaults < env preset < the algorithm's defaults < saved cfg.json < explicit
    flags. Presets are tuned for PPO; an algorithm's own defaults of shared flags (SAC's --batch_size=256) win."""
    from envs.presets import env_preset  # envs/ knows its envs; cfg does not

    env_name = explicit.get("env") or (saved or {}).get("env") or Cfg.env
    algo = explicit.get("algo") or (saved or {}).get("algo") or Cfg.algo
    values: dict[str, Any] = {}
    values.update(env_preset(env_name))
    values.update(algorithm_defaults(algo))
    if saved:
        names = {f.name for f in fields(cls)}
        values.update({k: v for k, v in saved.items() if k in names and k not in SESSION_FLAGS})
    values.update(explicit)
    return make_cfg(values, cls)


def experiment_dir(cfg: Cfg) -> Path:
    return Path(cfg.train_dir) / cfg.experiment


def parse_cfg(argv: list[str] | None = None, prog: str = "train_appo.py", cls: type = Cfg) -> Cfg:
    """Parse the command line, merge with the preset and (on resume) the saved cfg.json."""
    extra = cls if cls is not Cfg else None
    namespace = build_parser(prog, extra).parse_args(argv)
    explicit = vars(namespace)
    probe = Cfg(**{k: v for k, v in explicit.items() if k in ("train_dir", "experiment")})
    saved_path = experiment_dir(probe) / "cfg.json"
    saved = read_saved_cfg(saved_path) if saved_path.exists() else None
    return merge_cfg(explicit, saved, cls)


def _usage_error(message: str) -> None:
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(2)


def read_saved_cfg(path: Path) -> dict[str, Any]:
    """A run's cfg.json, checked: readable JSON, and only keys this version of appo knows."""
    try:
        saved = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        _usage_error(f"{path}: unreadable saved config ({exc}); remove it or pick another --experiment")
    if not isinstance(saved, dict):
        _usage_error(f"{path}: not a config object; remove it or pick another --experiment")
    unknown = sorted(set(saved) - {f.name for f in fields(Cfg)})
    if unknown:
        _usage_error(
            f"{path}: written by an incompatible appo version (unknown settings: {', '.join(unknown)}); "
            "pick another --experiment or remove those keys"
        )
    return saved


@dataclass(frozen=True)
class Derived:
    """Values computed from the cfg in one place, never stored as flags."""

    num_envs_total: int
    envs_per_split: int
    num_splits_total: int
    samples_per_iteration: int  # env steps one training iteration consumes
    trajectories_per_iteration: int
    minibatches_per_epoch: int
    slot_groups_per_split: int
    num_slots: int
    recurrence: int


def derive(cfg: Cfg) -> Derived:
    envs_per_split = cfg.num_envs_per_worker // max(cfg.worker_num_splits, 1)
    num_splits_total = cfg.num_workers * cfg.worker_num_splits
    num_envs_total = cfg.num_workers * cfg.num_envs_per_worker
    samples = cfg.batch_size * cfg.num_batches_per_epoch
    minibatches = cfg.num_batches_per_epoch
    steps_per_round = max(num_envs_total * cfg.rollout, 1)  # one rollout of every env
    if cfg.async_rl:
        # One group being filled, plus room for `num_minibatches_to_accumulate` iterations waiting.
        groups = 1 + math.ceil(cfg.num_minibatches_to_accumulate * samples / steps_per_round)
    else:
        # Synchronous PPO: every env fills `groups` rollouts with the same weights, then waits for the
        # new ones. An iteration is rounded up to whole rounds so that no sample is ever stale; the
        # minibatch keeps its size and the number of minibatches grows with it.
        groups = max(math.ceil(samples / steps_per_round), 1)
        samples = groups * steps_per_round
        minibatches = max(round(samples / cfg.batch_size), 1)
        if cfg.collect_ahead:
            # A second iteration's groups, filled with the weights being trained on while the learner trains.
            # The learner releases an iteration's groups only after training on it, so the actors are never
            # more than one iteration ahead: every sample is trained on at most one version after its own.
            groups *= 2
    if cfg.num_policies > 1:
        # Envs of one group may run different policies, and a group is refilled only once every learner has
        # released its part. A learner short of a batch can therefore hold as many groups as it has
        # trajectories; with more groups than all learners together can hold short of a batch, some group is
        # always free (no deadlock). The price is memory, and with --async_rl=False some experience is a
        # version old when trained on.
        needed = max(samples // max(cfg.rollout, 1), 1)
        accumulate = cfg.num_minibatches_to_accumulate if cfg.async_rl else 1 + cfg.collect_ahead
        groups = 1 + math.ceil(cfg.num_policies * accumulate * needed / max(num_splits_total, 1))
    return Derived(
        num_envs_total=num_envs_total,
        envs_per_split=envs_per_split,
        num_splits_total=num_splits_total,
        samples_per_iteration=samples,
        trajectories_per_iteration=max(samples // max(cfg.rollout, 1), 1),
        minibatches_per_epoch=minibatches,
        slot_groups_per_split=groups,
        num_slots=num_splits_total * groups * envs_per_split,
        recurrence=cfg.rollout if cfg.recurrence == -1 else cfg.recurrence,
    )


def _positive(cfg: Cfg, names: list[str]) -> list[str]:
    return [f"--{n}={getattr(cfg, n)}: must be > 0" for n in names if getattr(cfg, n) <= 0]


def verify(cfg: Cfg) -> list[str]:
    """Every problem with the cfg, one line each naming the flag, its value and what would be valid."""
    errors = _positive(
        cfg,
        ["num_workers", "num_envs_per_worker", "worker_num_splits", "rollout", "num_policies", "batch_size"]
        + ["num_batches_per_epoch", "num_epochs", "policy_workers_per_policy", "learning_rate", "rnn_size"]
        + ["keep_checkpoints", "report_interval", "train_for_env_steps", "train_for_seconds"]
        + ["episodes_per_trial", "num_test_tasks", "eval_episodes", "worker_stuck_timeout", "max_env_errors"]
        + ["worker_start_timeout"]
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
    choices = {"nonlinearity": ("tanh", "relu", "elu"), "rnn_type": ("gru", "lstm")}
    choices |= {"lr_schedule": ("constant", "linear_decay"), "log_level": ("debug", "info", "warning", "error")}
    choices |= {"task_schedule": ("none", "per_episode", "per_trial", "fixed", "curriculum")}
    choices |= {"task_visibility": ("hidden", "visible"), "save_best_metric": ("train", "eval")}
    for name, valid in choices.items():
        if getattr(cfg, name) not in valid:
            errors.append(f"--{name}={getattr(cfg, name)}: must be one of {', '.join(valid)}")
    if d.recurrence <= 0 or cfg.rollout % d.recurrence:
        errors.append(f"--recurrence={cfg.recurrence}: must be -1 or divide --rollout={cfg.rollout}")
    if not 0.0 <= cfg.gamma <= 1.0:
        errors.append(f"--gamma={cfg.gamma}: must be in [0, 1]")
    try:
        errors += algorithm_spec(cfg.algo).verify(cfg)
    except ValueError as exc:  # an unknown --algo
        errors.append(str(exc))
    if cfg.save_best_metric == "eval" and cfg.eval_interval <= 0 and cfg.meta_test_interval <= 0:
        errors.append("--save_best_metric=eval: needs --eval_interval > 0 (or --meta_test_interval for task envs)")
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
    errors += verify_learner_ranks(cfg, d) + verify_backend(cfg)
    from appo.pbt import verify_pbt

    return errors + verify_pbt(cfg)


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


def verify_or_exit(cfg: Cfg) -> None:
    """Print every problem on its own line to stderr and exit 2 (the usage-error status)."""
    errors = verify(cfg)
    if errors:
        for line in errors:
            print(f"error: {line}", file=sys.stderr)
        raise SystemExit(2)


def learner_devices(cfg: Cfg) -> list[str]:
    """The device of each learner rank: --learner_devices; else the learners' device (--device) for one rank,
    and for several cuda:N, cuda:N+1, ... from it on a GPU, the CPU for every rank otherwise."""
    if cfg.learner_devices:
        return [d.strip() for d in cfg.learner_devices.split(",")]
    device, size = resolve_device(cfg), cfg.learner_world_size
    if size > 1 and device.startswith("cuda"):
        first = int(device.partition(":")[2] or 0)
        return [f"cuda:{first + r}" for r in range(size)]
    return [device] * size


def verify_learner_ranks(cfg: Cfg, d: Derived) -> list[str]:
    """--learner_world_size and --learner_devices: one line per problem."""
    size = cfg.learner_world_size
    flag = f"--learner_world_size={size}"
    if size < 1:
        return [f"{flag}: must be >= 1"]
    errors = []
    if cfg.learner_threads < 1:
        errors.append(f"--learner_threads={cfg.learner_threads}: must be >= 1")
    if size > 1 and cfg.serial_mode:
        errors.append(f"{flag}: --serial_mode runs one learner in the driver process; use 1")
    if size > 1 and cfg.algo in ALGORITHMS:
        from appo.algorithms import algorithm_class

        consumes = algorithm_class(cfg.algo).consumes
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


def resolve_device(cfg: Cfg) -> str:
    if cfg.device != "auto":
        return cfg.device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"
