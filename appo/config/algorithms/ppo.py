"""The flags and PBT ranges of `--algo=appo` (PPO with V-trace or GAE targets). Torch-free: appo/config/cfg.py builds
the flat Cfg from every registered algorithm's group."""

from __future__ import annotations

from dataclasses import dataclass

from appo.config.flags import flag


@dataclass
class PpoCfg:
    with_vtrace: bool = flag(True, "V-trace targets (off: GAE)")
    vtrace_rho: float = flag(1.0, "V-trace rho-bar (importance weight clip of the TD error)")
    vtrace_c: float = flag(1.0, "V-trace c-bar (trace cutting)")
    gae_lambda: float = flag(0.95, "GAE lambda")
    ppo_clip_ratio: float = flag(0.1, "PPO policy ratio clip epsilon")
    ppo_clip_value: float = flag(1.0, "PPO value clip (normalised units); 0 disables")
    value_loss_coeff: float = flag(0.5, "weight of the value loss")
    value_huber_delta: float = flag(
        0.0, "Huber value loss: errors beyond this (normalised units) count linearly (MAPPO: 10); 0: squared error"
    )
    exploration_loss_coeff: float = flag(0.003, "weight of the entropy bonus")
    exploration_schedule: str = flag(
        "constant", "the entropy bonus over the run: constant, or linear_decay (to 0 as --lr_schedule's linear_decay)"
    )
    normalize_advantage: bool = flag(True, "normalise advantages per minibatch")
    kl_loss_coeff: float = flag(
        0.0,
        "weight of a KL(current || before the iteration) loss on the policy (Sample Factory's MuJoCo setting: 0.1)",
    )
    ppo_target_kl: float = flag(
        0.0,
        "where > 0: an iteration stops its remaining minibatch updates once a minibatch's approximate KL from the "
        "behaviour policy exceeds 1.5x this (after at least one update; Spinning Up's and Stable-Baselines3's early "
        "stop). 0: every epoch runs",
    )
    std_ceiling_final: float = flag(
        0.0,
        "where > 0: a ceiling on the Gaussian policy's std that falls log-linearly from exp(--initial_log_std) to this "
        "over the run's budget (whichever of env steps, seconds, iterations ends it); below it the std is learned as "
        "before. 0: no ceiling",
    )
    std_floor: float = flag(
        0.0,
        "where > 0: the lowest std a Gaussian policy may have, all run long (above it the std is learned as before; "
        "a ceiling from --std_ceiling_final wins where the two cross). 0: no floor",
    )
    bounds_loss_coeff: float = flag(
        0.0, "weight of a penalty on Gaussian means outside the action box (squared excess in half-ranges)"
    )


# What PBT may perturb, with its range and kind ("scale": multiplied/divided; "discount": 1 - value is).
PPO_PBT_RANGES: dict[str, tuple[float, float, str]] = {
    "learning_rate": (1e-6, 1e-2, "scale"),
    "exploration_loss_coeff": (1e-5, 0.1, "scale"),
    "ppo_clip_ratio": (0.02, 0.5, "scale"),
    "ppo_clip_value": (0.05, 10.0, "scale"),
    "value_loss_coeff": (0.05, 5.0, "scale"),
    "max_grad_norm": (0.1, 20.0, "scale"),
    "gamma": (0.9, 0.9999, "discount"),
    "gae_lambda": (0.8, 0.999, "discount"),
}


def verify_ppo(cfg: object) -> list[str]:
    """PPO's own flag errors, one line each."""
    errors = []
    if not 0.0 <= cfg.gae_lambda <= 1.0:  # type: ignore[attr-defined]
        errors.append(f"--gae_lambda={cfg.gae_lambda}: must be in [0, 1]")  # type: ignore[attr-defined]
    if cfg.exploration_schedule not in ("constant", "linear_decay"):  # type: ignore[attr-defined]
        errors.append(f"--exploration_schedule={cfg.exploration_schedule}: must be constant or linear_decay")  # type: ignore[attr-defined]
    if cfg.std_ceiling_final < 0:  # type: ignore[attr-defined]
        errors.append(f"--std_ceiling_final={cfg.std_ceiling_final}: must be >= 0 (0: no ceiling)")  # type: ignore[attr-defined]
    if cfg.std_floor < 0:  # type: ignore[attr-defined]
        errors.append(f"--std_floor={cfg.std_floor}: must be >= 0 (0: no floor)")  # type: ignore[attr-defined]
    if cfg.kl_loss_coeff < 0:  # type: ignore[attr-defined]
        errors.append(f"--kl_loss_coeff={cfg.kl_loss_coeff}: must be >= 0")  # type: ignore[attr-defined]
    if cfg.ppo_target_kl < 0:  # type: ignore[attr-defined]
        errors.append(f"--ppo_target_kl={cfg.ppo_target_kl}: must be >= 0 (0: no early stop)")  # type: ignore[attr-defined]
    return errors
