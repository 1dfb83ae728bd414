"""What a centralised value reads (--value_input): the input of every row of a game besides its own observation.

MAPPO (Yu et al. 2021) trains one shared policy on each agent's own observation and a value over the whole team. Here
the value input of row i of a game is

- `team`: every row's observation of the game (flattened, in possible_agents' order, zeros for an agent out of the
  game, padded as the rows are: envs/multi_agent/agent_spaces.py), then the one-hot of row i, then the game's clock;
- `state`: the env's global state (PettingZoo's `state()`, flattened), then the one-hot of row i and the clock.

The one-hot makes each row's value its own (two agents of one team can be worth different amounts in one state). The
clock (the game's steps since its reset) is there because the value has no memory: in games of a fixed length whose
observations carry no time (mpe2's, 25 steps) the value of a state depends on the steps left, which a recurrent
policy tracks in its state but a feed-forward value cannot see (MAPPO's value is recurrent for the same reason).
The rows of one game then share everything but the one-hot, whichever policy (a population's member, a self-play
pool's snapshot) plays each of them. The input travels with the row's observation space (`TeamObsSpace`), so every
process that builds a model from the run's spaces builds the same value trunk, and the trajectory tensors get a
`team_obs` field of that width (appo/protocol/buffers.py), filled by the actor workers (appo/sampling/agent_split.py).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from appo.envs.multi_agent.agent_spaces import AgentEnvError

VALUE_INPUTS = ("local", "team", "state")


class TeamObsSpace(gym.spaces.Box):
    """A row's observation space (a Box, as the rows' shared space is) that also names what its value reads:
    `team_space`, a float32 Box of the team input's width, and `value_input` ("team" or "state")."""

    def __init__(self, obs_space: gym.spaces.Box, team_size: int, value_input: str) -> None:
        super().__init__(obs_space.low, obs_space.high, obs_space.shape, obs_space.dtype)
        self.team_space = gym.spaces.Box(-np.inf, np.inf, (int(team_size),), np.float32)
        self.value_input = value_input

    def __repr__(self) -> str:
        return f"{super().__repr__()} (value input {self.value_input}: {self.team_space.shape[0]} values)"


def team_space_of(obs_space: gym.Space) -> gym.spaces.Box | None:
    """The team input's space where the run's rows carry one (a centralised value), else None."""
    return getattr(obs_space, "team_space", None)


class TeamInput:
    """The value input of a game's k rows (see the module docstring) for `env` (the Parallel env) whose rows share
    `obs_space`. One-line AgentEnvError where the env cannot give it."""

    def __init__(self, env: Any, obs_space: gym.Space, k: int, value_input: str, name: str) -> None:
        self.env, self.k, self.kind = env, k, value_input
        if hasattr(obs_space, "dict_space"):
            raise AgentEnvError(
                f"--value_input={value_input}: --env={name} has Dict observations; a centralised value is built for "
                "flat (1-D) ones"
            )
        if value_input == "state":
            state_space = getattr(env, "state_space", None)
            if not callable(getattr(env, "state", None)) or not isinstance(state_space, gym.spaces.Box):
                raise AgentEnvError(
                    f"--value_input=state: --env={name} has no global state (PettingZoo's state() and state_space); "
                    "--value_input=team reads every agent's observation instead"
                )
            width = int(np.prod(state_space.shape))
        elif len(obs_space.shape) != 1:
            raise AgentEnvError(
                f"--value_input=team: --env={name} has {obs_space.shape} observations; the team input concatenates "
                "flat (1-D) ones (--value_input=state reads the env's global state, where it has one)"
            )
        else:
            width = k * int(obs_space.shape[0])
        self.shared_size = width
        self.size = width + k + 1

    def shared(self, obs: np.ndarray) -> np.ndarray:
        """[shared_size]: the part of the input every row of the game shares: the observation rows `obs` [k, D]
        flattened, or the env's global state now (call right after the reset or step)."""
        if self.kind == "state":
            return np.asarray(self.env.state(), dtype=np.float32).reshape(-1)
        return np.asarray(obs, dtype=np.float32).reshape(-1)

    def rows(self, obs: np.ndarray, clock: int) -> np.ndarray:
        """[k, size]: the value input of each row, from the game's current observation rows `obs` [k, D] (an absent
        agent's row zero) or, for `state`, the env's state now (call right after the reset or step), and `clock`,
        the game's steps since its reset."""
        out = np.empty((self.k, self.size), dtype=np.float32)
        fill_rows(out, self.shared(obs)[None], np.array([clock], dtype=np.float32), self.k)
        return out


def fill_rows(out: np.ndarray, shared: np.ndarray, clocks: np.ndarray, k: int) -> None:
    """Write the value inputs of G games' k rows each into `out` [G * k, size]: each game's shared part `shared`
    [G, S] on its every row, then the row's one-hot within its game, then the game's clock `clocks` [G]."""
    width = shared.shape[1]
    out[:, :width] = np.repeat(shared, k, axis=0)
    out[:, width : width + k] = np.tile(np.eye(k, dtype=np.float32), (shared.shape[0], 1))
    out[:, -1] = np.repeat(clocks, k)
