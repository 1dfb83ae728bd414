"""Many agents in one env: a PettingZoo Parallel env (or any object with its contract: `possible_agents`, `agents`,
`observation_space(agent)`, `action_space(agent)`, `reset`, `step` over dicts keyed by agent) as the engine steps it.

`AgentEnv` gives every possible agent a fixed row (the order of `possible_agents`), and the engine gives every row a
slot of the shared trajectory tensors: an actor worker's split holds whole games, `agents_per_env` consecutive rows
each (appo/sampling/agent_split.py). Per step it takes one action per row and returns arrays over the rows:

- `active`: the row's agent is in the game (it acted at this step, or, after a reset, acts at the next). Agents that
  leave early (terminated or truncated while others play on) and agents that have not joined yet are inactive:
  their rows get reward 0, a zero observation, and their steps are masked out of training (`valid`).
- the game is over once no agent is left (`agents` empty, or every agent ended at this step): the caller resets it.
- `max_episode_steps` > 0 (--max_episode_steps, for envs given as module:Class) truncates every agent still in
  the game at that step of the game.

One policy (or population) serves every row, which self-play needs: agents with different spaces are padded to one
observation and one action space, with the agent's kind in the observation (envs/multi_agent/agent_spaces.py). A
Discrete observation space is given to the model one-hot (a Box of 0.0/1.0). Contract errors name the agent: a live
agent missing from a step's returns, a NaN reward, a space that changed after start-up.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np

from appo.envs.common.episode_end import TRUE_OBJECTIVE
from appo.envs.multi_agent.agent_spaces import AgentEnvError, SharedSpaces
from appo.envs.multi_agent.team_value import TeamInput, TeamObsSpace

__all__ = ["AgentEnv", "AgentEnvError", "is_parallel_env", "run_game"]


def is_parallel_env(env: Any) -> bool:
    """Whether `env` has PettingZoo's Parallel API (and is not a gymnasium Env)."""
    return (
        not isinstance(env, gym.Env)
        and hasattr(env, "possible_agents")
        and callable(getattr(env, "observation_space", None))
        and callable(getattr(env, "action_space", None))
    )


class AgentEnv:
    """A Parallel env with a row per possible agent (see the module docstring). `name`: the --env value; `agent_ids`:
    --obs_agent_id (envs/multi_agent/agent_spaces.py); `value_input`: --value_input, what a centralised value reads
    besides (envs/multi_agent/team_value.py: `team_input` gives it for the rows of the game now)."""

    is_multi_agent = True

    def __init__(
        self, env: Any, name: str = "", max_episode_steps: int = 0, agent_ids: bool = False, value_input: str = "local"
    ) -> None:
        self.env, self.name = env, name
        self.max_episode_steps, self.steps = int(max_episode_steps), 0
        self.games_started = 0  # resets so far: which agent a policy plays against a scripted opponent
        self.agents = list(env.possible_agents)
        self.num_agents = len(self.agents)
        if not self.agents:
            raise AgentEnvError(f"--env={name}: the multi-agent env has no possible_agents")
        obs_spaces = {a: env.observation_space(a) for a in self.agents}
        act_spaces = {a: env.action_space(a) for a in self.agents}
        self.raw_spaces = {a: (obs_spaces[a], act_spaces[a]) for a in self.agents}
        self.spaces = SharedSpaces(obs_spaces, act_spaces, name, agent_ids)
        self.observation_space: gym.Space = self.spaces.observation_space
        self.action_space = self.spaces.action_space
        self.team: TeamInput | None = None
        if value_input != "local":
            self.team = TeamInput(env, self.observation_space, self.num_agents, value_input, name)
            self.observation_space = TeamObsSpace(self.observation_space, self.team.size, value_input)
        self.obs_shape = self.observation_space.shape
        self.obs_dtype = np.dtype(self.observation_space.dtype or np.float32)
        self.metadata = getattr(env, "metadata", {})
        self.render_mode = getattr(env, "render_mode", None)
        self.unwrapped = self
        self.row = {agent: i for i, agent in enumerate(self.agents)}
        # The env's scripted opponent for evaluation, where it has one: a callable from one agent's observation to
        # its action (`run_game` below plays the policy against it).
        self.opponent = getattr(env, "scripted_policy", None)

    # --- the contract, checked ----------------------------------------------------------------------
    def _obs_rows(self, obs: dict[str, Any], active: np.ndarray) -> np.ndarray:
        out = np.zeros((self.num_agents, *self.obs_shape), dtype=self.obs_dtype)
        for agent, value in obs.items():
            i = self._row_of(agent)
            self.spaces.write_obs(agent, value, out[i])
            active[i] = True
        return out

    def _row_of(self, agent: str) -> int:
        if agent not in self.row:
            raise AgentEnvError(f"--env={self.name}: agent {agent!r} is not one of possible_agents {self.agents}")
        return self.row[agent]

    def live(self) -> np.ndarray:
        """[agents] bool: the agents in the game now."""
        live = np.zeros(self.num_agents, dtype=bool)
        for agent in self.env.agents:
            live[self._row_of(agent)] = True
        return live

    def check_spaces(self) -> None:
        """The spaces must stay what they were at start-up."""
        for agent in self.agents:
            if (self.env.observation_space(agent), self.env.action_space(agent)) != self.raw_spaces[agent]:
                raise AgentEnvError(f"--env={self.name}: agent {agent!r} changed its spaces during the run")

    # --- stepping -----------------------------------------------------------------------------------
    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Start a game: the observation of every row (zeros for absent agents) and which rows are active."""
        obs, _ = self.env.reset(seed=seed, options=options)
        self.steps = 0
        self.games_started += 1
        active = np.zeros(self.num_agents, dtype=bool)
        rows = self._obs_rows(obs, active)
        return rows, active & self.live()

    def step(
        self, actions: np.ndarray, active: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, bool, dict[str, dict]]:
        """Step the game with the actions of the `active` rows. Returns the observations the step returned (an
        ended agent's last one; zeros for rows it returned none), rewards, terminated and truncated (of the rows that
        acted), the rows active after the step, whether the game is over, and the infos by agent."""
        k = self.num_agents
        acting = [a for a, on in zip(self.agents, active, strict=True) if on]
        act = {a: self.spaces.env_action(a, actions[self.row[a]]) for a in acting}
        obs, rewards, terms, truncs, infos = self.env.step(act)
        r = np.zeros(k, dtype=np.float32)
        term = np.zeros(k, dtype=bool)
        trunc = np.zeros(k, dtype=bool)
        for agent in acting:
            if agent not in rewards or agent not in terms or agent not in truncs:
                raise AgentEnvError(
                    f"--env={self.name}: step() returned no reward, termination or truncation for live agent {agent!r}"
                )
            value = float(rewards[agent])
            if not math.isfinite(value):
                raise AgentEnvError(f"--env={self.name}: agent {agent!r} got a non-finite reward {value}")
            i = self.row[agent]
            r[i], term[i], trunc[i] = value, bool(terms[agent]), bool(truncs[agent])
        self.steps += 1
        if 0 < self.max_episode_steps <= self.steps:  # the time limit ends every agent still in the game
            trunc |= active & ~term
        after = np.zeros(k, dtype=bool)
        rows = self._obs_rows(obs, after)
        after &= self.live() & ~(term | trunc)
        return rows, r, term, trunc, after, not after.any(), infos

    def team_input(self, obs: np.ndarray) -> np.ndarray:
        """[agents, team width]: what a centralised value reads for each row, given the game's observation rows now
        (right after a reset or a step: a global state and the game's clock are read from the env)."""
        assert self.team is not None, "team_input: the env was built with --value_input=local"
        return self.team.rows(obs, self.steps)

    def objectives(self, infos: dict[str, dict]) -> np.ndarray:
        """Each row's true objective in the infos of a step (info[TRUE_OBJECTIVE] of its agent), NaN where absent."""
        out = np.full(self.num_agents, np.nan)
        for agent, info in infos.items():
            if agent in self.row and isinstance(info, dict) and TRUE_OBJECTIVE in info:
                out[self.row[agent]] = float(info[TRUE_OBJECTIVE])
        return out

    def render(self) -> Any:
        return self.env.render()

    def close(self) -> None:
        self.env.close()


# --- one game played by a policy ------------------------------------------------------------------------------------
# For evaluations, enjoy.py and `load_policy(...).evaluate`: what the evaluator's `run_episode` does for single-agent
# envs. Where the env brings a scripted opponent (`scripted_policy(obs) -> action`: paddle_duel's tracker), the policy
# plays one agent against it, the agent's row alternating with the game's seed (the first agent in even games, the
# second in odd ones; without a seed, with the games the env has started), and the game's return is that agent's: a
# win-rate-like figure a user can read. Otherwise the policy plays every agent (self-play, or a cooperative team)
# and the return is the mean over the agents that played.


def run_game(
    env: Any,
    act: Callable[[np.ndarray, np.ndarray | None], Any],
    seed: int | None = None,
    on_frame: Callable[[], None] | None = None,
) -> tuple[float, int, dict]:
    """Play one game from reset to its end; (return, length, info) as `run_episode` returns them. info holds every
    agent's return (`agent_returns`), each row's true objective (`objectives`, NaN where its env reports none) and,
    against a scripted opponent, which row the policy played (`policy_row`)."""
    k = env.num_agents
    opponent = env.opponent
    policy_rows = np.ones(k, dtype=bool)
    if opponent is not None:
        policy_rows[:] = False
        policy_rows[(env.games_started if seed is None else seed) % k] = True
    obs, active = env.reset(seed=seed)
    if on_frame is not None:
        on_frame()
    returns = np.zeros(k)
    played = active.copy()
    length = 0
    reset = np.ones(k, dtype=bool)  # rows whose agent starts (recurrent state zero)
    while True:
        actions = np.zeros((k, *_action_shape(env)), dtype=np.int64 if _discrete(env) else np.float32)
        mine = np.flatnonzero(policy_rows)
        chosen = np.asarray(act(obs[mine], reset[mine]))
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
            info = {"agent_returns": returns.tolist(), "infos": infos, "objectives": env.objectives(infos).tolist()}
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
