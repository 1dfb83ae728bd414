"""Wrappers for reward-conditioned policies (`--algo=udrl|rcp_r|rcp_a`) and sparse-reward variants of any env.

SparseReward (`--sparse_reward`): the whole episode return is paid at the episode's last step (terminated or
truncated) and 0 before it; the sum over the episode is unchanged.

CommandObservation: appends the scaled command (desired return-to-go and, for UDRL, desired horizon) to every
observation, so the policy acting in an actor worker and the learner reading the trajectory see the same input.
The command of an episode is given at its start as `reset(options={"command": [R, H]})` (in a run: the actor's
EnvRunner, from the control channel's command table, appo/protocol/control.py), else it is the wrapper's default
(`set_default_command`: enjoy.py's --command_return/--command_horizon). During the episode it moves as the labels
the policy is trained with do, so a state is never acted on with a command it was not trained with:
- UDRL: return-to-go -= reward (at most --max_command_return), horizon -= 1 (never below 1);
- RCP-R (`discount` = gamma): the desired discounted return-to-go Z_{t+1} = (Z_t - reward) / gamma (at most
  --max_command_return), the recursion of the labels Z_t = r_t + gamma Z_{t+1} it is trained with;
- RCP-A (`follow=False`): the desired advantage, the same for every step.
The wrapper chooses nothing: it keeps the command it is given up to date.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np


class SparseReward(gym.Wrapper):
    """Pay the episode's return at its last step, 0 before it."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self.accumulated = 0.0

    def reset(self, **kwargs: Any) -> tuple[Any, dict]:
        self.accumulated = 0.0
        return self.env.reset(**kwargs)

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.accumulated += float(reward)
        if terminated or truncated:
            paid, self.accumulated = self.accumulated, 0.0
            return obs, paid, terminated, truncated, info
        return obs, 0.0, terminated, truncated, info


class CommandObservation(gym.Wrapper):
    """obs -> concat(obs, command * scale); the command is (return-to-go[, horizon]), updated every step."""

    def __init__(
        self,
        env: gym.Env,
        scale: list[float],
        default: list[float] | None = None,
        follow: bool = True,
        cap: float = np.inf,
        discount: float = 1.0,
    ) -> None:
        """`follow`: the command follows what is achieved (UDRL, RCP-R); else it stays as given (RCP-A).
        `cap`: the most return-to-go a followed command asks for (after losses it would grow past what was asked).
        `discount`: the return-to-go is discounted by it (RCP-R: gamma; UDRL: 1)."""
        super().__init__(env)
        if not 0.0 < discount <= 1.0:
            raise ValueError(f"CommandObservation: discount={discount} must be in (0, 1]")
        self.follow, self.cap, self.discount = follow, cap, discount
        space = env.observation_space
        if not isinstance(space, gym.spaces.Box) or len(space.shape) != 1:
            raise ValueError(f"reward-conditioned policies need a flat Box observation space, not {space}")
        self.scale = np.asarray(scale, dtype=np.float32)
        dims = len(self.scale)
        low = np.concatenate([space.low, np.full(dims, -np.inf, np.float32)]).astype(np.float32)
        high = np.concatenate([space.high, np.full(dims, np.inf, np.float32)]).astype(np.float32)
        self.observation_space = gym.spaces.Box(low, high, dtype=np.float32)
        self.default = np.asarray(default if default is not None else [0.0, 1.0][:dims], dtype=np.float64)
        self.command = self.default.copy()

    def set_default_command(self, command: Any) -> None:
        """The command of episodes whose reset gives none (enjoy.py's flags, or the checkpoint's command)."""
        self.default = np.asarray(command, dtype=np.float64)[: len(self.scale)]

    def _obs(self, obs: Any) -> np.ndarray:
        scaled = (self.command * self.scale).astype(np.float32)
        return np.concatenate([np.asarray(obs, dtype=np.float32).reshape(-1), scaled])

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        options = dict(options or {})
        given = options.pop("command", None)
        command = self.default if given is None else np.asarray(given, dtype=np.float64)[: len(self.scale)]
        self.command = command.copy()
        if len(self.command) > 1:
            self.command[1] = max(self.command[1], 1.0)
        obs, info = self.env.reset(seed=seed, options=options or None)
        return self._obs(obs), info

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        if not self.follow:
            return self._obs(obs), reward, terminated, truncated, info
        self.command[0] = min((self.command[0] - float(reward)) / self.discount, self.cap)
        if len(self.command) > 1:
            self.command[1] = max(self.command[1] - 1.0, 1.0)
        return self._obs(obs), reward, terminated, truncated, info
