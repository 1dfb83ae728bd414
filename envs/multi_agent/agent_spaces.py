"""One observation space and one action space for every agent of a multi-agent env, what one policy (or a population)
over all of a game's rows needs.

Agents with the same spaces keep them (a Discrete observation becomes its one-hot Box, a Dict of Boxes its packed
bytes as a single-agent env's: envs/common/packed_obs.py). Agents with different
spaces are padded to one, the recipe of parameter sharing over heterogeneous agents (Terry et al. 2020, "Revisiting
parameter sharing in multi-agent deep RL"; PettingZoo's SuperSuit wrappers do the same), rather than grouped with a
policy each: one policy then still serves every row, so self-play, a population mixed within games and the pool of
past selves work unchanged, and every row of the trajectory tensors keeps one shape.

- Observations: each agent's observation flattened (a Discrete one one-hot), zeros after it up to the longest, then a
  one-hot of the agent's kind (its pair of spaces, numbered by first appearance in `possible_agents`), so that the
  policy knows which agent it plays: a float32 Box of width max(flat size) + kinds. Dict observations cannot be
  padded (one-line error).
- Actions: Discrete spaces (starting at 0) become the largest, an action past an agent's own range being its action
  0; 1-D Box spaces become the longest (each entry's bounds the widest of the agents that have it), an agent taking
  the first entries of the action, clipped to its own bounds. Discrete and Box actions in one env: one-line error.
  Agents with one Discrete space that starts elsewhere (gymnasium's `Discrete(n, start=k)`) share `Discrete(n)`: the
  policy picks an index 0..n-1, and the agent takes index + k.

`--obs_agent_id` (any multi-agent env with flat observations) appends a one-hot of the agent's row to every
observation, after the rest: agents that share a policy can then take roles by index (EPyMARL's `obs_agent_id`),
which symmetric observations alone do not allow (mpe2's simple_spread lists the landmarks in one order for every
agent, so "agent k covers landmark k" needs k).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from appo.envs.common.packed_obs import PackedObsSpace


class AgentEnvError(RuntimeError):
    """A multi-agent env broke its contract, or its agents' spaces cannot be made one; the message names the agent
    (one line)."""


class SharedSpaces:
    """`observation_space` and `action_space` of every row, with `write_obs` and `env_action` converting one agent's
    observation and action between its own spaces and the shared ones (see the module docstring)."""

    def __init__(
        self,
        obs_spaces: dict[str, gym.Space],
        act_spaces: dict[str, gym.Space],
        name: str = "",
        agent_ids: bool = False,
    ) -> None:
        self.obs_spaces, self.act_spaces, self.name = obs_spaces, act_spaces, name
        agents = list(obs_spaces)
        self.index = {agent: i for i, agent in enumerate(agents)}
        # Read at every step (write_obs): each agent's Discrete start where its observations are one-hot, else None.
        self.one_hot_start = {
            a: int(space.start) if isinstance(space, gym.spaces.Discrete) else None for a, space in obs_spaces.items()
        }
        pairs: list[tuple[gym.Space, gym.Space]] = []
        self.kind: dict[str, int] = {}
        for agent in agents:
            pair = (obs_spaces[agent], act_spaces[agent])
            if pair not in pairs:
                pairs.append(pair)
            self.kind[agent] = pairs.index(pair)
        self.kinds = len(pairs)
        self.padded = self.kinds > 1
        self.packed: PackedObsSpace | None = None  # same Dict spaces for every agent: their packed bytes
        first = agents[0]
        if not self.padded:
            raw = obs_spaces[first]
            if isinstance(raw, gym.spaces.Dict):  # packed into bytes, as a single-agent env's (envs/common)
                if agent_ids:
                    raise AgentEnvError(
                        f"--obs_agent_id: --env={name} has Dict observations; an agent's one-hot is appended to flat "
                        "(1-D) observations only"
                    )
                self.packed = PackedObsSpace(raw, name)
            self.observation_space: gym.Space = (
                gym.spaces.Box(0.0, 1.0, (int(raw.n),), np.float32) if isinstance(raw, gym.spaces.Discrete) else raw
            )
            if self.packed is not None:
                self.observation_space = self.packed
            own = act_spaces[first]
            # A Discrete space is 0-based to the policy (`env_action` adds the agent's start).
            self.action_space: gym.Space = (
                gym.spaces.Discrete(int(own.n)) if isinstance(own, gym.spaces.Discrete) else own
            )
        else:
            self.flat = {agent: self._flat_size(agent) for agent in agents}
            self.width = max(self.flat.values())
            self.observation_space = gym.spaces.Box(-np.inf, np.inf, (self.width + self.kinds,), np.float32)
            self.action_space = self._padded_action_space(agents)
        # Read at every step (env_action): each agent's Discrete actions as (n, start), None for Box actions.
        self.discrete_actions = {
            a: (int(space.n), int(space.start)) if isinstance(space, gym.spaces.Discrete) else None
            for a, space in act_spaces.items()
        }
        self.agent_ids = agent_ids
        if agent_ids:  # --obs_agent_id: the agent's one-hot after the rest
            base = self.observation_space
            if len(base.shape) != 1:
                raise AgentEnvError(
                    f"--obs_agent_id: agent {first!r} of --env={name} has observations of shape {base.shape}; "
                    "an agent's one-hot is appended to flat (1-D) observations only"
                )
            self.id_at = base.shape[0]
            low = np.concatenate([np.broadcast_to(base.low, base.shape), np.zeros(len(agents))]).astype(np.float32)
            high = np.concatenate([np.broadcast_to(base.high, base.shape), np.ones(len(agents))]).astype(np.float32)
            self.observation_space = gym.spaces.Box(low, high, (self.id_at + len(agents),), np.float32)

    def _flat_size(self, agent: str) -> int:
        space = self.obs_spaces[agent]
        if isinstance(space, gym.spaces.Discrete):
            return int(space.n)
        if isinstance(space, gym.spaces.Box):
            return int(np.prod(space.shape))
        raise AgentEnvError(
            f"--env={self.name}: agent {agent!r} has observations {space}: agents with different spaces are padded "
            "to one, which needs Box or Discrete observations"
        )

    def _padded_action_space(self, agents: list[str]) -> gym.Space:
        spaces = [self.act_spaces[a] for a in agents]
        if all(isinstance(s, gym.spaces.Discrete) and int(s.start) == 0 for s in spaces):
            return gym.spaces.Discrete(max(int(s.n) for s in spaces))
        if all(isinstance(s, gym.spaces.Box) and len(s.shape) == 1 for s in spaces):
            size = max(s.shape[0] for s in spaces)
            # Every entry is the longest space's, so each gets bounds (an unbounded one stays unbounded).
            low, high = np.full(size, np.inf, np.float32), np.full(size, -np.inf, np.float32)
            for s in spaces:
                n = s.shape[0]
                low[:n], high[:n] = np.minimum(low[:n], s.low), np.maximum(high[:n], s.high)
            return gym.spaces.Box(low, high, (size,), np.float32)
        odd = next((a for a in agents if not _paddable_action(self.act_spaces[a])), None)
        odd = odd or next(a for a in agents if type(self.act_spaces[a]) is not type(spaces[0]))
        raise AgentEnvError(
            f"--env={self.name}: agent {odd!r} has actions {self.act_spaces[odd]} and agent {agents[0]!r} "
            f"{self.act_spaces[agents[0]]}: agents with different spaces are padded to one, which needs all "
            "Discrete actions (from 0) or all 1-D Box actions"
        )

    def write_obs(self, agent: str, value: Any, row: np.ndarray) -> None:
        """Agent `agent`'s observation into its (zeroed) row of the shared observation space."""
        if self.agent_ids:
            row[self.id_at + self.index[agent]] = 1.0
            row = row[: self.id_at]
        start = self.one_hot_start[agent]
        if start is not None:
            row[int(value) - start] = 1.0
        elif self.padded:
            row[: self.flat[agent]] = np.asarray(value, dtype=np.float32).reshape(-1)
        elif self.packed is not None:
            row[...] = self.packed.pack(value)
        else:
            row[...] = value
        if self.padded:
            row[self.width + self.kind[agent]] = 1.0

    def env_action(self, agent: str, action: np.ndarray) -> Any:
        """A row's action as agent `agent` takes it: an int for Discrete (the row's index 0..n-1 plus the space's
        start; an index past the agent's range its first action), the float vector for Box."""
        action = np.asarray(action)
        if action.dtype.kind in "iu":
            index = int(action.reshape(-1)[0])
            n, start = self.discrete_actions[agent]
            return start + (index if index < n else 0)
        if not self.padded:
            return action
        own = self.act_spaces[agent]
        return np.clip(action.reshape(-1)[: own.shape[0]], own.low, own.high).astype(own.dtype)


def _paddable_action(space: gym.Space) -> bool:
    return (isinstance(space, gym.spaces.Discrete) and int(space.start) == 0) or (
        isinstance(space, gym.spaces.Box) and len(space.shape) == 1
    )
