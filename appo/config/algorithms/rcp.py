"""The flags of `--algo=rcp_r|rcp_a` (Reward-Conditioned Policies, Kumar, Peng and Levine 2019), the defaults they
change for shared flags (and for the reward-conditioned flags in appo/config/algorithms/udrl.py),
and their checks.
Torch-free."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from appo.config.algorithms.udrl import verify_command_policy
from appo.config.flags import flag

RCP_COMMAND_DIMS = 1  # the desired return (RCP-R) or advantage (RCP-A)


@dataclass
class RcpCfg:
    rcp_replay_transitions: int = flag(100_000, "RCP: transitions the FIFO replay holds (whole episodes, oldest out)")
    rcp_updates_per_iteration: int = flag(1000, "RCP: gradient updates per iteration (--batch_size samples each)")
    rcp_beta: float = flag(1.0, "RCP: temperature of the weights min(exp(standardised target / beta), max)")
    rcp_max_weight: float = flag(20.0, "RCP: cap of the exponential weights")
    rcp_lambda: float = flag(0.95, "RCP-A: lambda of the TD(lambda) targets of the value function")
    rcp_value_layers: list[int] = flag([64, 64], "RCP-A: hidden sizes of the value function (relu)")
    # LunarLander-v3, 15 min, seeds 0/1 (docs/results.md, UDRL and RCP), last 10 iterations' return: conditioning on
    # the episode with weights from Z_0 75.5/83.5, from each step's Z_t 151.4/149.9.
    rcp_weight_by: str = flag(
        "return_to_go",
        "RCP-R: what the exponential weights are computed from: target (the conditioning target, as the paper's "
        "objective) or return_to_go (each step's own discounted return-to-go, whatever it is conditioned on)",
    )
    # Same runs: the command following (Z - r) / gamma (step) -140.6/-233.9: past a shortfall the command grows by
    # 1/gamma a step, far beyond any label; holding the episode's target (episode) does not.
    rcp_condition: str = flag(
        "episode",
        "RCP-R: the target of a step, which acting conditions on too: episode (its episode's discounted return; the "
        "command holds) or step (its own discounted return-to-go; the command follows (Z - reward) / gamma)",
    )


def rcp_r_command_follows(c: Any) -> str:
    """How RCP-R's command moves during an episode: as its labels do (--rcp_condition)."""
    return "discounted_return_to_go" if c.rcp_condition == "step" else ""


# Shared flags (and reward-conditioned flags) whose default differs for RCP: Adam 1e-3, batch 256, the gated 2x64
# network, a one-dimensional command (RCP-R: discounted return, RCP-A: advantage), gradients not clipped.
RCP_R_DEFAULTS = {
    "learning_rate": 1e-3,
    "batch_size": 256,
    "max_grad_norm": 0.0,
    "num_batches_per_epoch": 1,
    "num_epochs": 1,
    "command_mlp_layers": [64, 64],
    "command_state_activation": "sigmoid",  # the network RCP was built and run with; not measured against tanh
    "command_scale": [0.025],
}
RCP_A_DEFAULTS = RCP_R_DEFAULTS | {"command_scale": [0.1]}

RCP_PBT_RANGES: dict[str, tuple[float, float, str]] = {}  # --with_pbt is refused


def verify_rcp(c: Any) -> list[str]:
    """RCP's flag errors (and engine options it does not support), one line each."""
    errors = [
        f"--{name}={getattr(c, name)}: must be > 0"
        for name in ("rcp_replay_transitions", "rcp_updates_per_iteration", "rcp_beta", "rcp_max_weight")
        if getattr(c, name) <= 0
    ]
    if not 0.0 <= c.rcp_lambda <= 1.0:
        errors.append(f"--rcp_lambda={c.rcp_lambda}: must be in [0, 1]")
    if c.rcp_weight_by not in ("target", "return_to_go"):
        errors.append(f"--rcp_weight_by={c.rcp_weight_by}: must be target or return_to_go")
    if c.rcp_condition not in ("episode", "step"):
        errors.append(f"--rcp_condition={c.rcp_condition}: must be episode or step")
    if not c.rcp_value_layers or min(c.rcp_value_layers) <= 0:
        errors.append(f"--rcp_value_layers={c.rcp_value_layers}: must be one or more sizes > 0")
    return errors + verify_command_policy(c, RCP_COMMAND_DIMS)
