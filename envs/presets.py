"""Per-env default overrides (the second layer of cfg precedence: defaults < preset < cfg.json < flags).

The MuJoCo preset follows Sample Factory's tuned MuJoCo parameters: synchronous PPO with GAE, a small
tanh MLP, input and return normalisation, and a linearly decaying learning rate; plus a smaller initial
action noise than theirs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

MUJOCO_IDS = ("HalfCheetah", "Ant", "Hopper", "Walker2d", "Humanoid", "Swimmer", "Reacher", "InvertedPendulum")
MUJOCO_IDS += ("InvertedDoublePendulum", "Pusher")

MUJOCO_PRESET: dict[str, Any] = {
    # 16 envs per worker (8 per split) keep two cores busy; the 1M figures were taken with them (docs/results.md,
    # MuJoCo at 1M env steps).
    "num_envs_per_worker": 16,
    "worker_num_splits": 2,
    "rollout": 64,
    "batch_size": 1024,
    "num_batches_per_epoch": 4,
    "num_epochs": 2,
    "async_rl": False,
    "with_vtrace": False,
    "gae_lambda": 0.95,
    "gamma": 0.99,
    "ppo_clip_ratio": 0.2,
    "ppo_clip_value": 1.0,
    "value_loss_coeff": 1.3,
    "exploration_loss_coeff": 0.0,
    "max_grad_norm": 3.5,
    "learning_rate": 0.00295,
    "lr_schedule": "linear_decay",
    "encoder_mlp_layers": [64, 64],
    "nonlinearity": "tanh",
    "normalize_input": True,
    "normalize_returns": True,
    "value_bootstrap": True,
    "save_every_sec": 15.0,
    # Start with std ~0.37, not 1 (std 1 saturates a third of the actions in [-1, 1]): HalfCheetah-v5 at 1M, 8 seeds
    # of 8 over 3,000 (median 4,769) against 3 of 8 with std 1 (docs/results.md, MuJoCo at 1M env steps).
    "initial_log_std": -1.0,
}


# Hopper and Walker2d end their episodes when they fall: with std 0.37 or Sample Factory's steps they settled on a
# stable hop or shuffle; from std 1 with 10 epochs of 16 x 256 at 1e-3 (the same 4,096 samples an iteration) they
# find a gait: Hopper-v5 2,642, Walker2d-v5 3,443 at 1M against CleanRL's 2,383 and 2,288 (docs/results.md, MuJoCo
# at 1M env steps, and the settings tried there).
FALLING_ROBOT_PRESET: dict[str, Any] = {
    "initial_log_std": 0.0,
    "learning_rate": 0.001,
    "num_epochs": 10,
    "batch_size": 256,
    "num_batches_per_epoch": 16,
}
MUJOCO_FAMILY_PRESETS: dict[str, dict[str, Any]] = {
    # Hopper's value head on its own trunk: 2,642 over six seeds at 1M against 2,337 shared (docs/results.md, 1M).
    "Hopper": FALLING_ROBOT_PRESET | {"separate_value_trunk": True},
    "Walker2d": FALLING_ROBOT_PRESET,
}

# Runs of LONG_RUN_STEPS env steps or more (--train_for_env_steps) take these changes. Their 10M figures, and the
# settings tried there and not adopted, are in docs/results.md, MuJoCo at 10M env steps.
LONG_RUN_STEPS = 5_000_000
MUJOCO_LONG_RUN_PRESETS: dict[str, dict[str, Any]] = {
    # Walker2d-v5 at 10M, nine seeds: 4,963 training / 5,395 final policy / 5,475 best checkpoint; Sample Factory's
    # steps at std 1, where the 1M preset's small steps kept knocking it off its gait (3,095 at 10M).
    "Walker2d": {
        key: MUJOCO_PRESET[key] for key in ("learning_rate", "num_epochs", "batch_size", "num_batches_per_epoch")
    }
    | {
        "initial_log_std": 0.0,
        # A rate adapted to the KL, its target falling to 0.0005: a linear decay gave 4,514, a constant target
        # 4,552, a target ending at 0.0001 or 0.002 4,588 and 4,243 (docs/results.md, 10M, tried and not adopted).
        "lr_schedule": "kl_adaptive_minibatch",
        "lr_schedule_kl_threshold_final": 0.0005,
        # The value head on its own trunk: one shared trunk gave 4,744 over six seeds (docs/results.md, 10M).
        "separate_value_trunk": True,
    },
    # Humanoid-v5 at 10M: 5,046 over five seeds with the std capped by a ceiling falling to 0.15, 4,584 without;
    # a ceiling falling to 0.05 fell behind (docs/results.md, MuJoCo at 10M env steps).
    "Humanoid": {"std_ceiling_final": 0.15},
    # Hopper-v5 at 10M: 3,207 over five seeds with a floor of 0.1 under the std, 2,732 over six runs without; the
    # separate value trunk of its 1M preset gave 2,345 at 10M (docs/results.md, MuJoCo at 10M env steps).
    "Hopper": {"separate_value_trunk": False, "std_floor": 0.1},
}


# Project meta-task families (envs/__init__.py): the MuJoCo ones train like their base robots.
MUJOCO_PROJECT_ENVS = (
    "ant_dir",
    "ant_dir2d",
    "ant_vel",
    "ant_goal",
    "half_cheetah_vel",
    "half_cheetah_dir",
    "humanoid_dir",  # untuned: the MuJoCo and meta presets as they are (docs/results.md, humanoid_dir)
)

# The Ant families collect the next iteration while the learner trains (--collect_ahead; policy lag at most 1):
# ant_dir trains at 1.18x the synchronous preset's FPS, and at 2M env steps its meta-test was as high or higher in
# every seed tried (docs/results.md, Throughput, the collect-ahead note). Not for half_cheetah_*: its
# learner is the slower side, every sample would be a version old, and half_cheetah_vel seed 1 ended at -20.4 / -20.8
# against -16.4 / -14.1 synchronous.
ANT_META_PRESET: dict[str, Any] = {"collect_ahead": True}

# navigation2d: 2-float observations, 100-step episodes, microseconds per step: a small, cheap setup.
NAVIGATION2D_PRESET: dict[str, Any] = {
    "num_envs_per_worker": 16,
    "rollout": 32,
    "batch_size": 1024,
    "num_batches_per_epoch": 2,
    "num_epochs": 2,
    "learning_rate": 1e-3,
    "with_vtrace": False,
    # Synchronous, as the MuJoCo preset: with --async_rl the learner (busy ~98%) trained on data 4-5 versions old
    # without a correction (GAE, no V-trace): meta-test episodes 0/1 -41.7/-44.3 at 1.5M steps (seed 3) against
    # -12.1/-9.1 synchronous (docs/results.md, navigation2d, tried and not adopted).
    "async_rl": False,
    "exploration_loss_coeff": 0.0,
    # Actions in [-1, 1] (envs/navigation2d.py): std ~0.37 as the MuJoCo preset.
    "initial_log_std": -1.0,
    # Goals drawn from 10,000 (nothing to memorise): every seed adapts at 3M env steps (docs/results.md,
    # navigation2d); with 40, a held-out goal far from all of them was missed (seed 4: -12.1 / -12.4).
    "num_train_tasks": 10_000,
    # A penalty on Gaussian means outside the box: without it the means drifted out, where clipped actions
    # give them no gradient, and runs walked away from every goal (one run in seven: -101.7 / -127.6).
    "bounds_loss_coeff": 1.0,
    # The learning rate decays to 0 at --train_for_env_steps: the late meta-tests stop swinging.
    "lr_schedule": "linear_decay",
}


# Classic control: small, fast envs that the learning tests train on.
CLASSIC_PRESETS: dict[str, dict[str, Any]] = {
    "CartPole": {
        "learning_rate": 0.001,
        "exploration_loss_coeff": 0.01,
        "num_epochs": 2,
        "num_batches_per_epoch": 2,
        "batch_size": 512,
        "rollout": 32,
    },
    # Pendulum never terminates and pays dense costs: a short horizon and many epochs (as rl-zoo's PPO).
    # A decaying learning rate: in a CI run (seed 1, 2 workers) the return fell from -173 to -287 in the last
    # 12k of 300k steps with a constant one; 4 seeds each on a quiet machine ended at -169/-167/-170/-161
    # constant and -159/-159/-149/-164 decaying.
    "Pendulum": {
        "lr_schedule": "linear_decay",
        "with_vtrace": False,
        "async_rl": False,
        "gamma": 0.95,
        "learning_rate": 0.001,
        "num_epochs": 10,
        "batch_size": 512,
        "num_batches_per_epoch": 4,
        "rollout": 32,
        "exploration_loss_coeff": 0.0,
        "ppo_clip_ratio": 0.2,
    },
}


# Meta-RL defaults of the task families: hidden tasks, trials of two episodes on one task with the GRU
# state carried across them (RL^2), and a meta-test on the held-out tasks every 50k env steps.
# Atari (envs/atari.py): CleanRL's ppo_atari settings (synchronous PPO with GAE, 8 envs x 128 steps an iteration
# in 4 minibatches, 4 epochs, clip 0.1 on the policy and the value, entropy 0.01, 2.5e-4 decaying to 0, Adam eps
# 1e-5, gradient norm 0.5, rewards clipped to +-1 for learning, no input or return normalisation); the Nature CNN
# is what --encoder=auto picks for its (4, 84, 84) frames. The learner takes 2 threads: synchronous actor workers
# wait while it trains, and the conv learner bounds the run (Pong, 2 cores, 2 x 8 envs: 388 agent steps/s against
# 227 with one thread; docs/results.md, Pixels).
ATARI_PRESET: dict[str, Any] = {
    "learner_threads": 2,
    "num_envs_per_worker": 4,
    "worker_num_splits": 2,
    "rollout": 128,
    "batch_size": 256,
    "num_batches_per_epoch": 4,
    "num_epochs": 4,
    "async_rl": False,
    "with_vtrace": False,
    "gamma": 0.99,
    "gae_lambda": 0.95,
    "ppo_clip_ratio": 0.1,
    "ppo_clip_value": 0.1,
    "value_loss_coeff": 0.5,
    "exploration_loss_coeff": 0.01,
    "max_grad_norm": 0.5,
    "learning_rate": 0.00025,
    "lr_schedule": "linear_decay",
    "adam_eps": 1e-5,
    "reward_clip": 1.0,
    "normalize_input": False,
    "normalize_returns": False,
}
ATARI_PREFIXES = ("atari_", "ALE/")


META_PRESET: dict[str, Any] = {
    "task_schedule": "per_trial",
    "episodes_per_trial": 2,
    "task_visibility": "hidden",
    "use_rnn": True,
    "rnn_type": "gru",
    "rnn_size": 128,
    "meta_test_interval": 50_000,
}


# The RL^2 paper's bandits and tabular MDPs, trials of its n = 10 pulls / episodes (--episodes_per_trial for the
# other rows): bandits n = 10, k = 5 at 6.65 in 10 minutes, the paper's 6.7 (docs/results.md, Meta-RL: the RL^2
# paper's bandits and MDPs). The generic settings (asynchronous V-trace at 1e-4, 40 train tasks) did not learn a
# 5-armed bandit in 5 minutes (5.6-5.7, random play 5.0); synchronous PPO with GAE on short slots, 4 epochs at 1e-3
# and a larger entropy bonus did. 40 train tasks were memorised (7.0-7.5 on training trials, 6.5 held out), so
# 10,000 (tabular MDPs: 1,000, each task holds 550 values). gamma 1: the paper's measure is the trial's total reward.
# Held-out tasks: enough for the mean to about +-1% (bandits: 1,000 trials of sd about 2.1 at n = 10).
RL2_TABLE_PRESET: dict[str, Any] = {
    "episodes_per_trial": 10,
    "num_train_tasks": 10_000,
    "async_rl": False,
    "with_vtrace": False,
    "gamma": 1.0,
    "learning_rate": 0.001,
    "lr_schedule": "linear_decay",
    "num_epochs": 4,
    "exploration_loss_coeff": 0.01,
    "num_envs_per_worker": 32,
    "rollout": 20,
    "batch_size": 640,
    "num_batches_per_epoch": 2,
    "meta_test_interval": 200_000,
}


def rl2_whole_trial_slots(trial_steps: int) -> dict[str, Any]:
    """A trial longer than RL2_TABLE_PRESET's 20-step slot gets one slot of its own (16 trials a minibatch): the
    GRU then learns across the whole trial instead of five truncated pieces of it. Bandits n = 100, k = 5, seed 0,
    12 minutes (3 runs side by side): 78.0 sampled with 100-step slots, 70.4 with 20-step ones; three seeds, 28
    minutes, six runs at a time: 77.61 (docs/results.md, Meta-RL: the RL^2 paper's bandits and MDPs)."""
    if trial_steps <= RL2_TABLE_PRESET["rollout"]:
        return {}
    return {"rollout": trial_steps, "batch_size": 16 * trial_steps, "num_batches_per_epoch": 4}


RL2_TABLE_ENVS = ("bandit", "gaussian_bandit", "tabular_mdp")

# What a preset says about the env's tasks rather than about training: every algorithm run on the env takes these.
# The rest of every preset here was tuned for PPO (--algo=appo) and is PPO's alone: SAC on Pendulum keeps its own
# gamma 0.99 (rl-zoo's SAC), not the PPO preset's 0.95; an algorithm's defaults are its own (appo/config/algorithms/).
TASK_KEYS = frozenset(
    {"task_schedule", "episodes_per_trial", "task_visibility", "num_train_tasks", "meta_test_interval"}
)


def env_preset(
    env_name: str, algo: str = "appo", env_steps: int | None = None, given: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Defaults that suit `env_name` better than the generic ones for `algo`; empty when there is no preset. The
    presets are PPO's: another algorithm takes only their task settings (TASK_KEYS). A run of `env_steps` (its
    --train_for_env_steps) of LONG_RUN_STEPS or more takes the env's long-run changes. `given`: what the run sets
    itself (flags, a resumed run's cfg.json), which the RL^2 tables' slots follow (a trial's length)."""
    preset = _ppo_preset(env_name)
    if env_steps is not None and env_steps >= LONG_RUN_STEPS:
        preset = preset | MUJOCO_LONG_RUN_PRESETS.get(env_name.split("-")[0], {})
    if env_name in RL2_TABLE_ENVS[:2]:  # bandits: a pull is an episode
        preset |= rl2_whole_trial_slots((given or {}).get("episodes_per_trial") or preset["episodes_per_trial"])
    return preset if algo == "appo" else {k: v for k, v in preset.items() if k in TASK_KEYS}


def _ppo_preset(env_name: str) -> dict[str, Any]:
    if env_name in MUJOCO_PROJECT_ENVS:
        return MUJOCO_PRESET | META_PRESET | (ANT_META_PRESET if env_name.startswith("ant_") else {})
    if env_name == "navigation2d":
        return NAVIGATION2D_PRESET | META_PRESET
    if env_name.startswith(ATARI_PREFIXES):
        return dict(ATARI_PRESET)
    if env_name == "lunar_lander_wind":  # the meta settings only (untuned): PPO's defaults otherwise
        return dict(META_PRESET)
    if env_name in RL2_TABLE_ENVS[:2]:
        return META_PRESET | RL2_TABLE_PRESET | {"num_test_tasks": 1000}
    if env_name == "tabular_mdp":
        # gamma 0.99: with gamma 1 and 2 epochs of 1,280 a run stayed at random play (about 100) for 1.8M env
        # steps; with 0.99 and the preset's steps it rose, slowly (101 -> 105 in 600k). Far from the paper's 156.
        return META_PRESET | RL2_TABLE_PRESET | {"num_train_tasks": 1000, "num_test_tasks": 200, "gamma": 0.99}
    base = env_name.split("-")[0]
    if base in MUJOCO_IDS:
        return MUJOCO_PRESET | MUJOCO_FAMILY_PRESETS.get(base, {})
    return dict(CLASSIC_PRESETS.get(base, {}))
