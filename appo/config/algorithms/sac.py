"""The flags of `--algo=sac` (soft actor-critic with a replay, Haarnoja et al. 2018), the defaults it changes
for shared flags, and its checks. Torch-free: appo/config/cfg.py builds the flat Cfg from every registered
algorithm's group."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from appo.config.flags import flag, single_policy_errors


@dataclass
class SacCfg:
    replay_size: int = flag(1_000_000, "SAC: transitions the replay holds (a ring: the oldest are overwritten)")
    learning_starts: int = flag(
        10_000, "SAC: env steps of uniform random actions before the first update (at most half the run)"
    )
    updates_per_env_step: float = flag(1.0, "SAC: gradient updates per env step (replay ratio), held by throttling")
    publish_every_updates: int = flag(1, "SAC: updates between publishing the actor's weights to actor workers")
    tau: float = flag(0.005, "SAC: Polyak rate of the target critics")
    target_entropy: str = flag("auto", "SAC: entropy the temperature is tuned toward; auto = -(action dims)")
    initial_alpha: float = flag(1.0, "SAC: initial entropy temperature")
    actor_lr: float = flag(3e-4, "SAC: Adam learning rate of the actor")
    critic_lr: float = flag(3e-4, "SAC: Adam learning rate of the twin critics")
    alpha_lr: float = flag(3e-4, "SAC: Adam learning rate of log(alpha)")
    actor_mlp_layers: list[int] = flag([256, 256], "SAC: hidden sizes of the actor (relu)")
    critic_mlp_layers: list[int] = flag([256, 256], "SAC: hidden sizes of each critic (relu)")
    save_replay: bool = flag(False, "SAC: save the replay (atomically) beside each checkpoint, and load it on resume")
    num_replay_shards: int = flag(
        1,
        "SAC with --backend=ray: replay actors, each holding --replay_size / N transitions, filled by the rollout "
        "actors and sampled by the learner (prefetched); 0: the learner keeps the replay, fed through the driver",
    )


# Shared flags whose default differs for SAC: applied above env presets (which are tuned for PPO), below a saved
# cfg.json and typed flags (appo/config/cfg.py merge_cfg). batch_size is SAC's minibatch; gradients are not clipped.
# One env
# per actor worker, short rollouts, one iteration's room to accumulate: the learner (SAC's bottleneck, about 100
# updates/s on 2 cores) needs only that many env steps per second, and every further env only puts more transitions
# in flight between acting and the replay. On LunarLanderContinuous-v3 seed 1 reached
# an evaluation of 200 at 65k env steps with 1 env and weights published every update, against more than 112k with
# 2 workers x 4 envs publishing every 16. The learner trains on the torch threads the actor workers leave free
# (learner_threads below; docs/results.md, SAC: on Pendulum-v1 2 threads gave 163 updates/s against 123 with 1).
SAC_DEFAULTS = {
    "batch_size": 256,
    "max_grad_norm": 0.0,
    "async_rl": True,
    "num_batches_per_epoch": 1,
    "num_epochs": 1,
    "rollout": 16,
    "num_envs_per_worker": 1,
    "worker_num_splits": 1,
    "num_minibatches_to_accumulate": 1,
    "learner_threads": 0,  # the cores the run leaves free (appo/config/derive.py learner_threads)
}

# SAC refuses --with_pbt (verify_sac), so there is nothing for PBT to perturb.
SAC_PBT_RANGES: dict[str, tuple[float, float, str]] = {}


def target_entropy_value(cfg: Any, action_dims: int) -> float:
    """--target_entropy as a number: auto = -|A| (Haarnoja et al. 2018b, section 5)."""
    value = cfg.target_entropy
    return -float(action_dims) if value == "auto" else float(value)


def learning_starts_of(cfg: Any) -> int:
    """Env steps of random acting before updates: --learning_starts, but never more than half the run."""
    return min(cfg.learning_starts, cfg.train_for_env_steps // 2)


def verify_sac(c: Any) -> list[str]:
    """SAC's own flag errors (and the engine options it does not support), one line each."""
    errors = [
        f"--{name}={getattr(c, name)}: must be > 0"
        for name in ("replay_size", "updates_per_env_step", "publish_every_updates", "actor_lr", "critic_lr")
        + ("alpha_lr", "initial_alpha")
        if getattr(c, name) <= 0
    ]
    if c.learning_starts < 0:
        errors.append(f"--learning_starts={c.learning_starts}: must be >= 0")
    if c.num_replay_shards < 0:
        errors.append(f"--num_replay_shards={c.num_replay_shards}: must be >= 0 (0: the replay stays in the learner)")
    if not 0.0 < c.tau <= 1.0:
        errors.append(f"--tau={c.tau}: must be in (0, 1]")
    if c.target_entropy != "auto":
        try:
            float(c.target_entropy)
        except ValueError:
            errors.append(f"--target_entropy={c.target_entropy}: must be auto or a number (e.g. -6)")
    for name in ("actor_mlp_layers", "critic_mlp_layers"):
        if not getattr(c, name) or min(getattr(c, name)) <= 0:
            errors.append(f"--{name}={getattr(c, name)}: must be one or more sizes > 0")
    return errors + single_policy_errors(c, "feed-forward networks")
