"""VizDoom (`--env=doom_<scenario>`, `pip install -e .[doom]`): the single-player scenarios bundled with vizdoom
(envs/doom/scenarios.py) as gymnasium envs (envs/doom/game.py) whose games die with their process
(envs/doom/launcher.py), the multiplayer matches doom_duel and doom_deathmatch_bots (envs/doom/match.py), and
their PPO preset."""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import Any

import gymnasium as gym

from appo.envs.doom.scenarios import SCENARIOS, scenario_names

PREFIXES = ("doom_",)

# Sample Factory 2's Doom settings (its defaults with sf_examples.vizdoom's overrides): 2 splits, rollout 32, one
# epoch of one minibatch of 1,024, lr 1e-4, gamma 0.99, clip 0.1 (value 0.2), GAE without V-trace, gradient norm 4,
# normalised inputs and returns (its input normalisation covers the screen's pixels: --normalize_images), its policy
# head's initial gain of 1, entropy 0.001, its "simple" ELU convnet and a GRU of 512. 8 envs per worker: the
# 2 x 8 of its published doom_basic throughput. The learner takes 2 threads (torch's default, as Sample Factory's
# learner has): the conv learner bounds the run, as on Atari.
DOOM_PRESET: dict[str, Any] = {
    "num_envs_per_worker": 8,
    "worker_num_splits": 2,
    "rollout": 32,
    "batch_size": 1024,
    "num_batches_per_epoch": 1,
    "num_epochs": 1,
    "learning_rate": 1e-4,
    "gamma": 0.99,
    "ppo_clip_ratio": 0.1,
    "ppo_clip_value": 0.2,
    "with_vtrace": False,
    "max_grad_norm": 4.0,
    "normalize_input": True,
    "normalize_images": True,
    "policy_init_gain": 1.0,
    "normalize_returns": True,
    "exploration_loss_coeff": 0.001,
    "encoder": "simple",
    "nonlinearity": "elu",
    "use_rnn": True,
    "rnn_type": "gru",
    "rnn_size": 512,
    "learner_threads": 2,
}


def _match(name: str, max_episode_steps: int = 0, **kwargs: Any) -> Any:
    """A multiplayer match (envs/doom/match.py), `max_episode_steps` > 0 as its own step limit."""
    from appo.envs.doom.match import DoomMatch

    return DoomMatch(name, max_steps=max_episode_steps, **kwargs)


# The multiplayer matches (multi-agent envs: the engine wraps them in AgentEnv).
ENVS = {name: partial(_match, name) for name in ("doom_duel", "doom_deathmatch_bots")}


def make(name: str, max_episode_steps: int = 0, **kwargs: Any) -> gym.Env:
    """The scenario `name` names (doom_basic, ...); ValueError with one line listing the scenarios for any other."""
    scenario = name[len("doom_") :]
    if scenario not in SCENARIOS:
        raise ValueError(f"--env={name}: no such Doom scenario; known: {', '.join(scenario_names())}")
    try:
        from appo.envs.doom.game import DoomEnv
    except ImportError as exc:
        raise ValueError(f"--env={name}: vizdoom is not installed ({exc}); pip install -e '.[doom]'") from exc
    env: gym.Env = DoomEnv(scenario, **kwargs)
    if max_episode_steps > 0:
        env = gym.wrappers.TimeLimit(env, max_episode_steps=max_episode_steps)
    return env


def training_kwargs(cfg: Any) -> dict[str, Any]:
    """The matches' damage reward (--doom_damage_reward) in the games that collect training experience only: the
    evaluator's and enjoy.py's games pay frags and deaths alone, in the game's own units."""
    damage = float(getattr(cfg, "doom_damage_reward", 0.0))
    return {"damage_reward": damage} if cfg.env in ENVS and damage else {}


def evaluation_kwargs(cfg: Any) -> dict[str, Any]:
    """The evaluator's game (--eval_interval): a duel policy plays one of vizdoom's built-in bots on the duel's own
    map, so its frags per game (eval/true_objective) measure it against a fixed opponent as self-play goes on."""
    return {"players": 1, "bots": 1} if cfg.env == "doom_duel" else {}


def preset(env_name: str, env_steps: int | None, given: Mapping[str, Any]) -> dict[str, Any] | None:
    if env_name == "doom_duel":  # frags and deaths: rewards of 1 already; damage pays a hit before its frag
        return DOOM_PRESET | {"doom_damage_reward": 0.01}
    if env_name in ENVS:
        return dict(DOOM_PRESET)
    scenario = SCENARIOS.get(env_name[len("doom_") :]) if env_name.startswith(PREFIXES) else None
    if scenario is None:
        return None
    return DOOM_PRESET | {"reward_scale": scenario.reward_scale}
