"""The flags of MAML-TRPO (`--algo=maml_trpo`: Finn et al. 2017 with a TRPO meta-step), the defaults it changes
for shared flags, and their checks. Torch-free: appo/config/cfg.py builds the flat Cfg from every registered group.
Defaults follow pytorch-maml-rl's configs (2d-navigation, halfcheetah-dir, ant-dir)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from appo.config.flags import flag, single_policy_errors


@dataclass
class MamlCfg:
    meta_batch_size: int = flag(0, "MAML: tasks per meta-iteration; 0: 20 for navigation2d, 40 for other envs")
    fast_batch_size: int = flag(20, "MAML: episodes per task and phase (train with theta, validation with theta')")
    num_inner_steps: int = flag(1, "MAML: vanilla policy gradient steps of the adaptation")
    fast_lr: float = flag(0.0, "MAML: step size of each adaptation step; 0: 0.1 / --num_inner_steps")
    first_order: bool = flag(False, "MAML: first-order meta-gradient (the inner gradient taken as a constant)")
    max_kl: float = flag(1e-2, "MAML-TRPO: bound on the mean KL of a meta-step")
    cg_iters: int = flag(10, "MAML-TRPO: conjugate gradient iterations")
    cg_damping: float = flag(1e-5, "MAML-TRPO: damping added to the KL's Hessian-vector product")
    ls_max_steps: int = flag(15, "MAML-TRPO: backtracking line search steps")
    ls_backtrack_ratio: float = flag(0.8, "MAML-TRPO: step shrink factor of each line search step")
    meta_test_steps: int = flag(3, "MAML: adaptation steps measured by the meta-test (returns after 0..N steps)")
    maml_mlp_layers: list[int] = flag([64, 64], "MAML: hidden sizes of the Gaussian MLP policy")
    maml_nonlinearity: str = flag("tanh", "MAML: tanh or relu")
    maml_init_log_std: float = flag(0.0, "MAML: initial log standard deviation of the actions")


# Shared flags whose default differs for MAML-TRPO (above env presets, below cfg.json and typed flags): GAE with
# lambda 1 (Monte Carlo advantages against the linear baseline), no meta-RL schedule or memory (the task is
# learned by adaptation), and --meta_test_interval counted in meta-iterations.
MAML_DEFAULTS = {
    "gamma": 0.99,
    "gae_lambda": 1.0,
    "task_schedule": "none",
    "use_rnn": False,
    "num_train_tasks": 1000,
    "num_test_tasks": 20,
    "meta_test_interval": 10,
    "save_every_sec": 60.0,
}

MAML_PBT_RANGES: dict[str, tuple[float, float, str]] = {}  # --with_pbt is refused

NAVIGATION_META_BATCH, DEFAULT_META_BATCH = 20, 40


def meta_batch_size(cfg: Any) -> int:
    """The run's tasks per meta-iteration (--meta_batch_size, or its env's default)."""
    if cfg.meta_batch_size > 0:
        return int(cfg.meta_batch_size)
    return NAVIGATION_META_BATCH if cfg.env == "navigation2d" else DEFAULT_META_BATCH


# One adaptation step of 0.1 is MAML's navigation setting; with more steps the same total is spread over them (two
# steps of 0.1 drifted on navigation2d: post-adaptation -34.3 over iterations 30-39 of one seed, where two of 0.05
# reached -12.5, as one step of 0.1 does), so --num_inner_steps works as typed.
ONE_STEP_LR = 0.1


def inner_lr(c: Any) -> float:
    """The step size of each adaptation step: --fast_lr, or where it is 0, 0.1 / --num_inner_steps."""
    return float(c.fast_lr) if c.fast_lr > 0 else ONE_STEP_LR / max(int(c.num_inner_steps), 1)


def verify_maml(c: Any) -> list[str]:
    """MAML-TRPO's flag errors (and engine options it does not support), one line each."""
    errors = [
        f"--{name}={getattr(c, name)}: must be > 0"
        for name in ("fast_batch_size", "num_inner_steps", "max_kl", "cg_iters", "ls_max_steps")
        if getattr(c, name) <= 0
    ]
    for name in ("meta_batch_size", "meta_test_steps", "cg_damping"):
        if getattr(c, name) < 0:
            errors.append(f"--{name}={getattr(c, name)}: must be >= 0")
    if not c.fast_lr >= 0:
        errors.append(f"--fast_lr={c.fast_lr}: must be > 0, or 0 for 0.1 / --num_inner_steps")
    if not 0 < c.ls_backtrack_ratio < 1:
        errors.append(f"--ls_backtrack_ratio={c.ls_backtrack_ratio}: must be in (0, 1)")
    if not 0 <= c.gae_lambda <= 1:
        errors.append(f"--gae_lambda={c.gae_lambda}: must be in [0, 1]")
    if c.maml_nonlinearity not in ("tanh", "relu"):
        errors.append(f"--maml_nonlinearity={c.maml_nonlinearity}: must be one of tanh, relu")
    if not c.maml_mlp_layers or min(c.maml_mlp_layers) <= 0:
        errors.append(f"--maml_mlp_layers={c.maml_mlp_layers}: must be one or more sizes > 0")
    if c.meta_test_interval < 0:
        errors.append(f"--meta_test_interval={c.meta_test_interval}: must be >= 0 (meta-iterations; 0: at the end)")
    errors += single_policy_errors(c)
    for name in ("actor_inference", "numpy_inference"):
        if not getattr(c, name):
            errors.append(f"--{name}=False: --algo=maml_trpo acts in the actor workers (numpy); use True")
    if c.task_schedule != "none":
        errors.append(f"--task_schedule={c.task_schedule}: --algo=maml_trpo draws its tasks itself; use none")
    return errors
