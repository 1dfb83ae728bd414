"""One game of a multi-agent env (appo/envs/multi_agent.py AgentEnv) played by a policy, for evaluations, enjoy.py
and `load_policy(...).evaluate`: what `run_episode` does for single-agent envs.

Where the env brings a scripted opponent (`scripted_policy(obs) -> action`: paddle_duel's tracker), the policy plays
one agent against it, the agent's row alternating with the game's seed (left in even games, right in odd ones), and
the game's return is that agent's: a win-rate-like figure a user can read. Otherwise the policy plays every agent
(self-play, or a cooperative team) and the return is the mean over the agents that played."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from appo.protocol.buffers import obs_dtype


def run_game(
    env: Any,
    act: Callable[[np.ndarray, np.ndarray | None], Any],
    seed: int | None = None,
    on_frame: Callable[[], None] | None = None,
) -> tuple[float, int, dict]:
    """Play one game from reset to its end; (return, length, info) as `run_episode` returns them. info holds every
    agent's return (`agent_returns`) and, against a scripted opponent, which row the policy played (`policy_row`)."""
    k = env.num_agents
    opponent = env.opponent
    policy_rows = np.ones(k, dtype=bool)
    if opponent is not None:
        policy_rows[:] = False
        policy_rows[(seed or 0) % k] = True
    obs, active = env.reset(seed=seed)
    if on_frame is not None:
        on_frame()
    stored = obs_dtype(env.observation_space)
    returns = np.zeros(k)
    played = active.copy()
    length = 0
    reset = np.ones(k, dtype=bool)  # rows whose agent starts (recurrent state zero)
    while True:
        actions = np.zeros((k, *_action_shape(env)), dtype=np.int64 if _discrete(env) else np.float32)
        mine = np.flatnonzero(policy_rows)
        chosen = np.asarray(act(np.asarray(obs[mine], dtype=stored), reset[mine]))
        actions[mine] = chosen.reshape(len(mine), *_action_shape(env))
        for j in np.flatnonzero(~policy_rows & active):
            actions[j] = opponent(obs[j])
        obs, rewards, _, _, after, over, infos = env.step(_env_actions(env, actions), active)
        returns += rewards
        reset = after & ~active
        played |= after
        active = after
        length += 1
        if on_frame is not None:
            on_frame()
        if over:
            info = {"agent_returns": returns.tolist(), "infos": infos}
            if opponent is not None:
                row = int(mine[0])
                info["policy_row"] = row
                return float(returns[row]), length, info
            return float(returns[played].mean()), length, info


def _discrete(env: Any) -> bool:
    return not hasattr(env.action_space, "low")


def _action_shape(env: Any) -> tuple[int, ...]:
    return (1,) if _discrete(env) else tuple(env.action_space.shape)


def _env_actions(env: Any, actions: np.ndarray) -> np.ndarray:
    """Rows' actions as AgentEnv.step takes them: Box actions clipped to the space."""
    if _discrete(env):
        return actions
    return np.clip(actions, env.action_space.low, env.action_space.high)
