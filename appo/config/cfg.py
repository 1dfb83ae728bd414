"""The run configuration: one set of dataclasses, the flag parser built from them, presets and the resume merge
(derived values: appo/config/derive.py; validation: appo/config/verify.py).

Every hyperparameter is declared once below with its type, default and a one-line help. Flags are flat
(`--num_workers=16`); the groups only order the help. Precedence, lowest first:
dataclass defaults < env preset (envs/presets.py) < saved cfg.json (resume) < flags typed on this command line.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from appo.config.algorithms import ALGORITHMS, Traits, algorithm_defaults, flag_groups, traits_of
from appo.config.flags import flag as _f
from appo.config.multi_agent import MultiAgentCfg


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
    policy_redraw_every: int = _f(
        1, "a population: each env (each agent of a multi-agent env) draws its policy anew every N of its episodes"
    )
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
    episodic_life: bool = _f(
        True, "Atari: a lost life ends the training episode (no bootstrap past it); reported games run on"
    )
    env_vector: str = _f(
        "auto",
        "auto: a split's envs as one native vector env where the env has one (Atari: ale-py's AtariVectorEnv); "
        "per_env: one gymnasium env each",
    )
    sparse_reward: bool = _f(False, "pay each episode's whole return at its last step, 0 before (the sum is kept)")
    worker_stuck_timeout: float = _f(30.0, "seconds without a heartbeat before an actor worker is replaced")
    worker_start_timeout: float = _f(
        120.0,
        "seconds a starting actor or policy worker may go without start-up progress (imports, each env built), "
        "times processes per core",
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
    lr_schedule: str = _f(
        "constant",
        "constant, linear_decay (to 0 at the end of the run: whichever of train_for_env_steps, "
        "train_for_seconds, train_for_iterations ends it), or kl_adaptive_minibatch / kl_adaptive_epoch (--algo=appo: "
        "divided by 1.5 after a minibatch or epoch whose approximate KL exceeds 2x --lr_schedule_kl_threshold, "
        "multiplied by 1.5 below half of it, within [--lr_adaptive_min, --lr_adaptive_max])",
    )
    lr_schedule_kl_threshold: float = _f(0.008, "the KL target of --lr_schedule=kl_adaptive_*")
    lr_schedule_kl_threshold_final: float = _f(
        0.0,
        "where > 0: the KL target of --lr_schedule=kl_adaptive_* goes linearly from --lr_schedule_kl_threshold to "
        "this over the run's budget (whichever of env steps, seconds, iterations ends it); 0: the target stays",
    )
    lr_adaptive_min: float = _f(1e-6, "the lowest learning rate of --lr_schedule=kl_adaptive_*")
    lr_adaptive_max: float = _f(1e-2, "the highest learning rate of --lr_schedule=kl_adaptive_*")
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
    learner_threads: int = _f(1, "torch threads of each learner process; 0: the cores the run leaves free")
    learner_precision: str = _f(
        "fp32", "the learner's convnets: fp32, bf16 (autocast; weights stay float32), or auto (bf16 where native)"
    )


# The values of --encoder (appo/models/encoders.py builds them; the convnets' architectures: appo/numpy_policy/conv.py).
ENCODERS = ("auto", "mlp", "nature", "simple", "impala")


@dataclass
class ModelCfg:
    encoder_mlp_layers: list[int] = _f([64, 64], "hidden sizes of the MLP encoder")
    encoder: str = _f(
        "auto",
        "auto (images: nature, else mlp), mlp, nature, simple or impala (convnets for 3-D Box images; "
        "appo/models/encoders.py)",
    )
    nonlinearity: str = _f("tanh", "tanh, relu or elu")
    use_rnn: bool = _f(False, "recurrent core after the encoder")
    rnn_type: str = _f("gru", "gru or lstm")
    rnn_size: int = _f(128, "hidden size of the recurrent core")
    recurrence: int = _f(-1, "BPTT chunk length; -1 means rollout")
    normalize_input: bool = _f(True, "running mean/std normalisation of observations")
    normalize_returns: bool = _f(True, "running mean/std normalisation of value targets")
    normalize_images: bool = _f(
        False,
        "running mean/std of every pixel of image observations, standardised before the convnet (Sample Factory's "
        "--normalize_input on images; --algo=appo)",
    )
    initial_log_std: float = _f(0.0, "initial log standard deviation of Gaussian actions")
    policy_init_gain: float = _f(
        0.01, "gain of the policy head's orthogonal initialisation (small: near-uniform first actions)"
    )
    separate_value_trunk: bool = _f(False, "the value head gets its own MLP encoder instead of sharing the policy's")
    value_mlp_layers: list[int] = _f(
        [], "hidden sizes of the separate value trunk (--separate_value_trunk); empty: those of --encoder_mlp_layers"
    )


@dataclass
class MetaCfg:
    task_schedule: str = _f("none", "none, per_episode, per_trial, fixed or curriculum (task envs only)")
    episodes_per_trial: int = _f(2, "episodes of one task per trial; memory is carried across them")
    task_visibility: str = _f("hidden", "hidden (meta-RL: obs + previous action, reward, done) or visible")
    num_train_tasks: int = _f(40, "tasks in the train split (finite families use all their tasks)")
    num_test_tasks: int = _f(10, "held-out tasks in the test split")
    meta_test_interval: int = _f(0, "env steps between meta-tests on the held-out tasks; 0 disables")
    num_arms: int = _f(5, "arms K of --env=bandit and --env=gaussian_bandit (>= 2)")
    mdp_states: int = _f(10, "states of --env=tabular_mdp")
    mdp_actions: int = _f(5, "actions of --env=tabular_mdp")
    mdp_episode_steps: int = _f(10, "steps of a --env=tabular_mdp episode (--max_episode_steps > 0 overrides it)")


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
        "train_return",
        "train_return (average of the last 100 episodes), eval_return (latest eval / meta-test) or true_objective"
        " (average of the last 100 episodes' info['true_objective'], which the env reports: a win rate, say)",
    )
    policy_hparams: str = _f("", 'JSON: starting hyperparameters per policy, e.g. {"1": {"learning_rate": 0}}')


@dataclass
class RayCfg:
    ray_address: str = _f("", "--backend=ray: a running cluster (auto, or HEAD:6379); empty: a private instance here")
    ray_worker_cpus: float = _f(1.0, "--backend=ray: CPUs each actor worker reserves on its Ray node")
    ray_max_restarts: int = _f(100, "--backend=ray: restarts of each actor worker before the run fails; -1: no limit")
    ray_object_store_mb: int = _f(0, "--backend=ray: object store of the private instance, MB; 0: Ray's default")


@dataclass
class TrackingCfg:
    with_wandb: bool = _f(False, "mirror the summaries into Weights & Biases, a run per policy (.[wandb] extra)")
    wandb_project: str = _f("appo", "--with_wandb: the wandb project")
    wandb_group: str = _f("", "--with_wandb: the group of the run's wandb runs; empty: the experiment name")
    wandb_tags: str = _f("", "--with_wandb: comma-separated tags of the wandb runs")


@dataclass
class Cfg(
    RunCfg,
    SamplingCfg,
    LearningCfg,
    *flag_groups(),
    ModelCfg,
    MetaCfg,
    EvalCfg,
    MultiAgentCfg,
    PbtCfg,
    RayCfg,
    TrackingCfg,
):  # type: ignore[misc]
    """The whole configuration of a run: every flag, flat (each algorithm's own flags included)."""

    @property
    def traits(self) -> Traits:
        """What the engine needs to know of the run's algorithm, as plain values (appo/config/algorithms/)."""
        return traits_of(self)

    # What appo.envs needs to know of the run's algorithm (appo.envs imports nothing else of appo).
    @property
    def command_dims(self) -> int:
        """Command inputs the run's policy takes (0: none); appo/envs/reward_conditioning.py appends them."""
        return self.traits.command_dims

    @property
    def command_follows(self) -> str:
        """How the command moves during an episode ("" holds; Traits.command_follows lists the others)."""
        return self.traits.command_follows


GROUPS: list[tuple[str, type]] = [
    ("run", RunCfg),
    ("sampling", SamplingCfg),
    ("learning", LearningCfg),
    *[(f"algorithm: {group.__name__.removesuffix('Cfg').lower()}", group) for group in flag_groups()],
    ("model", ModelCfg),
    ("meta", MetaCfg),
    ("evaluation", EvalCfg),
    ("multi-agent", MultiAgentCfg),
    ("population-based training", PbtCfg),
    ("ray", RayCfg),
    ("experiment tracking", TrackingCfg),
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


def build_parser(
    prog: str = "train_appo.py", extra: type | None = None, description: str | None = None
) -> argparse.ArgumentParser:
    """Argument parser generated from the dataclasses; defaults are suppressed so that the parsed
    namespace holds exactly the flags typed on the command line (resume depends on that)."""
    parser = argparse.ArgumentParser(
        prog=prog, description=description, argument_default=argparse.SUPPRESS, allow_abbrev=False
    )
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
    flags. Presets are tuned for PPO: another algorithm takes only their task settings (envs/presets.py TASK_KEYS),
    then its own defaults of shared flags (SAC's --batch_size=256)."""
    from appo.envs.presets import env_preset  # envs/ knows its envs; cfg does not

    env_name = explicit.get("env") or (saved or {}).get("env") or Cfg.env
    algo = explicit.get("algo") or (saved or {}).get("algo") or Cfg.algo
    values: dict[str, Any] = {}
    env_steps = explicit.get("train_for_env_steps") or (saved or {}).get("train_for_env_steps")
    values.update(env_preset(env_name, algo, env_steps, (saved or {}) | explicit))
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
    return cfg_from_flags(vars(build_parser(prog, extra).parse_args(argv)), cls)


def cfg_from_flags(explicit: dict[str, Any], cls: type = Cfg) -> Cfg:
    """The cfg of the flags typed (`explicit`), merged with the preset and (on resume) the saved cfg.json."""
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
    defaults = Cfg()
    for key, value in saved.items():
        default = getattr(defaults, key)
        if not _same_kind(value, default):
            _usage_error(f"{path}: {key} is {value!r}, where it takes a value like {default!r}; fix or remove it")
    return saved


def _same_kind(value: Any, default: Any) -> bool:
    """Whether a cfg.json value can stand for a setting whose default is `default` (a JSON number for a float, a
    list for a tuple; None where the default is None)."""
    if default is None or value is None:
        return default is None or value is None
    if isinstance(default, bool) or isinstance(value, bool):
        return isinstance(default, bool) and isinstance(value, bool)
    if isinstance(default, float):
        return isinstance(value, (int, float))
    if isinstance(default, (list, tuple)):
        return isinstance(value, (list, tuple))
    return isinstance(value, type(default))
