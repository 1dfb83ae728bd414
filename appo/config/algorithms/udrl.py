"""The flags of the reward-conditioned algorithms (`--algo=udrl`: Upside-Down RL, Srivastava et al. 2019), the
defaults they change for shared flags, and their checks. Torch-free: appo/config/cfg.py builds the flat Cfg from every
registered algorithm's group."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from appo.config.flags import flag, single_policy_errors

UDRL_COMMAND_DIMS = 2  # the command UDRL's policy takes: (desired return-to-go, desired horizon)


@dataclass
class UdrlCfg:
    command_scale: list[float] = flag(
        [0.025, 0.01],
        "scale of the command in the policy's input: UDRL (return-to-go, horizon), RCP (return or advantage)",
    )
    command_mlp_layers: list[int] = flag(
        [128, 128, 128], "UDRL/RCP: width of the gated state x command layer, then the relu layers after it"
    )
    command_state_activation: str = flag(
        "tanh", "UDRL/RCP: activation of the state's layer before the command's sigmoid gates it: tanh or sigmoid"
    )
    udrl_buffer_episodes: int = flag(500, "UDRL: whole episodes kept in the replay, the best by return")
    udrl_sample_unit: str = flag(
        "step", "UDRL: training samples drawn uniformly over all steps (step) or over episodes then steps (episode)"
    )
    udrl_last_few: int = flag(75, "UDRL: best episodes the exploration command is computed from")
    max_command_return: float = flag(
        math.inf, "UDRL (and RCP-R's followed command): cap of the desired return; inf: none (LunarLander: 320)"
    )
    udrl_warmup_episodes: int = flag(50, "UDRL/RCP: episodes of uniform random actions before the first update")
    udrl_episodes_per_iteration: int = flag(20, "UDRL/RCP: new episodes per iteration (updates + a new command)")
    udrl_updates_per_iteration: int = flag(100, "UDRL: gradient updates per iteration (--batch_size samples each)")
    udrl_eval_every: int = flag(10, "UDRL/RCP: iterations between greedy evaluations with the current command; 0: none")
    udrl_eval_episodes: int = flag(5, "UDRL/RCP: episodes of each greedy evaluation (in the learner process)")
    command_return: float = flag(math.nan, "enjoy.py: desired return to play; nan: the checkpoint's command")
    command_horizon: float = flag(math.nan, "enjoy.py: desired horizon to play; nan: the checkpoint's command")


# Shared flags whose default differs for UDRL (applied above env presets, below cfg.json and typed flags): the
# paper's Adam rate, batch and gradient clip; batch_size is the number of samples of one update.
# The behaviour function and sampling follow the open LunarLander implementation: the state's layer is
# tanh, not a second sigmoid, and training steps are drawn uniformly from all the buffer's steps. On
# LunarLander-v3, 12 minutes, two seeds side by side on 2 cores (docs/results.md, UDRL and RCP): last 10 iterations'
# mean return +110.9 and +49.2, best-75 buffer +277.1 and +207.0; with sigmoid and episode-then-step sampling
# (seed 0) -61.6.
UDRL_DEFAULTS = {
    "learning_rate": 3.5e-4,
    "batch_size": 768,
    "max_grad_norm": 100.0,
    "num_batches_per_epoch": 1,
    "num_epochs": 1,
}

UDRL_PBT_RANGES: dict[str, tuple[float, float, str]] = {}  # --with_pbt is refused


def verify_udrl(c: Any) -> list[str]:
    """UDRL's flag errors (and engine options it does not support), one line each."""
    errors = [
        f"--{name}={getattr(c, name)}: must be > 0"
        for name in ("udrl_buffer_episodes", "udrl_last_few", "udrl_updates_per_iteration")
        if getattr(c, name) <= 0
    ]
    if math.isnan(c.max_command_return) or c.max_command_return == -math.inf:
        errors.append(f"--max_command_return={c.max_command_return}: must be a number (any sign) or inf (no cap)")
    if c.udrl_sample_unit not in ("episode", "step"):
        errors.append(f"--udrl_sample_unit={c.udrl_sample_unit}: must be episode or step")
    if c.udrl_last_few > c.udrl_buffer_episodes:
        errors.append(f"--udrl_last_few={c.udrl_last_few}: must be <= --udrl_buffer_episodes={c.udrl_buffer_episodes}")
    return errors + verify_command_policy(c, UDRL_COMMAND_DIMS)


def verify_command_policy(c: Any, dims: int) -> list[str]:
    """The flag errors common to the reward-conditioned algorithms (and engine options they do not support)."""
    errors = [
        f"--{name}={getattr(c, name)}: must be > 0"
        for name in ("udrl_episodes_per_iteration", "udrl_eval_episodes")
        if getattr(c, name) <= 0
    ]
    for name in ("udrl_warmup_episodes", "udrl_eval_every"):
        if getattr(c, name) < 0:
            errors.append(f"--{name}={getattr(c, name)}: must be >= 0")
    if c.command_state_activation not in ("sigmoid", "tanh"):
        errors.append(f"--command_state_activation={c.command_state_activation}: must be sigmoid or tanh")
    if len(c.command_scale) != dims or min(c.command_scale) <= 0:
        errors.append(f"--command_scale={c.command_scale}: must be {dims} numbers > 0 for --algo={c.algo}")
    if not c.command_mlp_layers or min(c.command_mlp_layers) <= 0:
        errors.append(f"--command_mlp_layers={c.command_mlp_layers}: must be one or more sizes > 0")
    errors += single_policy_errors(c)
    if c.task_schedule != "none":
        errors.append(f"--task_schedule={c.task_schedule}: --algo={c.algo} needs --task_schedule=none")
    if c.reward_scale != 1.0 or c.reward_clip != 0.0:
        errors.append(
            f"--reward_scale={c.reward_scale} --reward_clip={c.reward_clip}: --algo={c.algo} needs 1 and 0 "
            "(commands are in the env's reward units)"
        )
    return errors
