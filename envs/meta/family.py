"""The meta-RL task families (envs/meta/tasks.py): MuJoCo robots with a task each (ant_dir, half_cheetah_vel, ...),
navigation2d, the RL^2 paper's bandits and tabular MDPs, and lunar_lander_wind; their registration, constructor
keywords from the run's flags, and PPO presets (recurrent meta-RL over trials of the hidden task)."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from functools import partial
from typing import Any

import gymnasium as gym

from appo.envs.mujoco.family import MUJOCO_PRESET


def _project_env(module: str, class_name: str, max_episode_steps: int = 0, **kwargs: Any) -> gym.Env:
    """Import `module` (MuJoCo included) only now, build `class_name(**kwargs)` and wrap it in a TimeLimit of
    `max_episode_steps`, or of the class's `default_episode_steps` when that is 0."""
    env = getattr(importlib.import_module(module), class_name)(**kwargs)
    # The instance's length: a family may set it from its constructor's arguments (tabular_mdp's episode_steps).
    steps = max_episode_steps if max_episode_steps > 0 else env.default_episode_steps
    return gym.wrappers.TimeLimit(env, max_episode_steps=steps)


# name -> (module, class). Registering imports none of those modules.
_CLASSES: dict[str, tuple[str, str]] = {
    "ant_dir": ("appo.envs.meta.ant", "AntDirEnv"),
    "ant_dir2d": ("appo.envs.meta.ant", "AntDir2DEnv"),
    "ant_vel": ("appo.envs.meta.ant", "AntVelEnv"),
    "ant_goal": ("appo.envs.meta.ant", "AntGoalEnv"),
    "half_cheetah_vel": ("appo.envs.meta.half_cheetah", "HalfCheetahVelEnv"),
    "half_cheetah_dir": ("appo.envs.meta.half_cheetah", "HalfCheetahDirEnv"),
    "navigation2d": ("appo.envs.meta.navigation2d", "Navigation2DEnv"),
    "bandit": ("appo.envs.meta.bandits", "BanditEnv"),
    "gaussian_bandit": ("appo.envs.meta.bandits", "GaussianBanditEnv"),
    "tabular_mdp": ("appo.envs.meta.tabular_mdp", "TabularMDPEnv"),
    "humanoid_dir": ("appo.envs.meta.humanoid", "HumanoidDirEnv"),
    "lunar_lander_wind": ("appo.envs.meta.lunar_lander_wind", "LunarLanderWindEnv"),
}
ENVS = {name: partial(_project_env, module, class_name) for name, (module, class_name) in _CLASSES.items()}
TASK_FAMILIES = tuple(_CLASSES)

# Families whose size comes from the run's flags: cfg key -> constructor keyword (envs.env_kwargs).
_BANDIT_KEYS = {"num_arms": "num_arms"}
CFG_KEYS: dict[str, dict[str, str]] = {
    "bandit": _BANDIT_KEYS,
    "gaussian_bandit": _BANDIT_KEYS,
    "tabular_mdp": {"mdp_states": "num_states", "mdp_actions": "num_actions", "mdp_episode_steps": "episode_steps"},
}


# The MuJoCo families train like their base robots.
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
    # Actions in [-1, 1] (envs/meta/navigation2d.py): std ~0.37 as the MuJoCo preset.
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


# Meta-RL defaults of the task families: hidden tasks, trials of two episodes on one task with the GRU
# state carried across them (RL^2), and a meta-test on the held-out tasks every 50k env steps.
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


RL2_TABLE_ENVS = ("bandit", "gaussian_bandit", "tabular_mdp")


def preset(env_name: str, env_steps: int | None, given: Mapping[str, Any]) -> dict[str, Any] | None:
    """PPO's preset of a task family (the RL^2 tables' slots follow a trial's length from `given`); None for any
    other env."""
    if env_name in MUJOCO_PROJECT_ENVS:
        return MUJOCO_PRESET | META_PRESET | (ANT_META_PRESET if env_name.startswith("ant_") else {})
    if env_name == "navigation2d":
        return NAVIGATION2D_PRESET | META_PRESET
    if env_name == "lunar_lander_wind":  # the meta settings only (untuned): PPO's defaults otherwise
        return dict(META_PRESET)
    if env_name in RL2_TABLE_ENVS[:2]:  # bandits: a pull is an episode
        out = META_PRESET | RL2_TABLE_PRESET | {"num_test_tasks": 1000}
        return out | rl2_whole_trial_slots(given.get("episodes_per_trial") or out["episodes_per_trial"])
    if env_name == "tabular_mdp":
        # gamma 0.99: with gamma 1 and 2 epochs of 1,280 a run stayed at random play (about 100) for 1.8M env
        # steps; with 0.99 and the preset's steps it rose, slowly (101 -> 105 in 600k). Far from the paper's 156.
        return META_PRESET | RL2_TABLE_PRESET | {"num_train_tasks": 1000, "num_test_tasks": 200, "gamma": 0.99}
    return None
