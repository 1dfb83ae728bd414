"""Multi-agent games for the tests of appo/envs/multi_agent.py and appo/sampling/agent_split.py, in PettingZoo's
Parallel API by shape (duck-typed, no pettingzoo import): used directly, or as --env=tests.support.agent_games:Name.

`LeaveJoinGame`: three agents "a", "b", "c". "a" and "b" play from the reset; "c" joins after `join_after` steps (it
is in the observations and `agents` that step returns, and acts from the next step); "a" terminates at step
`a_leaves` while the others play on; at step `length` "b" is truncated and "c" terminates, which ends the game.
Everything is deterministic: an agent's observation is [step, agent number, its last action (-1 before its first),
game number], its reward `action + step / 4 + agent number` (exact in float32). The timings depend on the `index`
the game is built with and on its game number, so games of one split end at different steps and the game lengths
change from game to game.

`StateGame` adds PettingZoo's global state (`state()`, `state_space`). `BrokenGame` breaks the contract at step
`at_step` on demand: "missing" leaves live agent "b" out of the rewards, terminations and truncations; "nan" gives
"b" a NaN reward; "spaces" gives "c" another observation space from then on; "raise" raises a RuntimeError (an env
that crashes, not one that breaks the contract). `UnequalSpacesGame` gives "c" more actions than the others from the
start. The factories below build broken games for --env (`missing_agent_game`, `nan_reward_game`,
`changing_spaces_game`)."""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces

AGENTS = ("a", "b", "c")
OBS = spaces.Box(-1000.0, 1000.0, (4,), np.float32)
ACTIONS = spaces.Discrete(3)


class LeaveJoinGame:
    """Agents leave early and join late (see the module docstring)."""

    metadata = {"name": "leave_join"}

    def __init__(self, index: int = 0, render_mode: str | None = None, **_: Any) -> None:
        self.index = int(index)
        self.render_mode = render_mode
        self.possible_agents = list(AGENTS)
        self.agents: list[str] = []
        self.games = -1
        self.steps = 0
        self.last = dict.fromkeys(AGENTS, -1)

    # The timings of the current game (a function of the game's index and number only).
    @property
    def join_after(self) -> int:
        return 1 + (self.index + self.games) % 2

    @property
    def a_leaves(self) -> int:
        return 3 + self.index % 2

    @property
    def length(self) -> int:
        return 5 + (self.index + self.games) % 3

    def observation_space(self, agent: str) -> spaces.Space:
        return OBS

    def action_space(self, agent: str) -> spaces.Space:
        return ACTIONS

    def _obs(self, agent: str) -> np.ndarray:
        return np.array([self.steps, AGENTS.index(agent), self.last[agent], self.games], dtype=np.float32)

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        self.games += 1
        self.steps = 0
        self.last = dict.fromkeys(AGENTS, -1)
        self.agents = ["a", "b"]
        return {agent: self._obs(agent) for agent in self.agents}, {agent: {} for agent in self.agents}

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        if set(actions) != set(self.agents):
            raise ValueError(f"leave_join: actions for {sorted(actions)}, agents in the game are {self.agents}")
        self.steps += 1
        s = self.steps
        rewards, terms, truncs = {}, {}, {}
        for agent in self.agents:
            self.last[agent] = int(actions[agent])
            rewards[agent] = float(actions[agent]) + s / 4 + AGENTS.index(agent)
            terms[agent] = (agent == "a" and s == self.a_leaves) or (agent == "c" and s >= self.length)
            truncs[agent] = agent == "b" and s >= self.length
        obs = {agent: self._obs(agent) for agent in self.agents}  # ended agents get their last observation too
        self.agents = [agent for agent in self.agents if not (terms[agent] or truncs[agent])]
        if s == self.join_after and self.agents:
            self.agents.append("c")
            obs["c"] = self._obs("c")
        return obs, rewards, terms, truncs, {agent: {} for agent in obs}

    def render(self) -> np.ndarray:
        return np.zeros((8, 8, 3), np.uint8)

    def close(self) -> None:
        pass


class StateGame(LeaveJoinGame):
    """LeaveJoinGame with PettingZoo's global state: [step, game number, agents in the game, game index, each
    agent's last action] (7 values), what --value_input=state reads."""

    state_space = spaces.Box(-1000.0, 1000.0, (7,), np.float32)

    def state(self) -> np.ndarray:
        last = [self.last[a] for a in AGENTS]
        return np.array([self.steps, self.games, len(self.agents), self.index, *last], dtype=np.float32)


class BrokenGame(LeaveJoinGame):
    """A LeaveJoinGame that breaks the contract at step `at_step` (see the module docstring)."""

    def __init__(self, fault: str, at_step: int = 2, **kwargs: Any) -> None:
        if fault not in ("missing", "nan", "spaces", "raise"):
            raise ValueError(f"unknown fault {fault!r}")
        super().__init__(**kwargs)
        self.fault, self.at_step = fault, at_step
        self.total = 0

    def observation_space(self, agent: str) -> spaces.Space:
        if self.fault == "spaces" and agent == "c" and self.total >= self.at_step:
            return spaces.Box(-1000.0, 1000.0, (5,), np.float32)
        return OBS

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        if self.fault == "raise" and self.total + 1 == self.at_step:
            self.total += 1
            raise RuntimeError("leave_join: raised on purpose")
        obs, rewards, terms, truncs, infos = super().step(actions)
        self.total += 1
        if self.total == self.at_step and self.fault == "missing":
            for table in (rewards, terms, truncs):
                del table["b"]
        if self.total == self.at_step and self.fault == "nan":
            rewards["b"] = float("nan")
        return obs, rewards, terms, truncs, infos


class UnequalSpacesGame(LeaveJoinGame):
    """Agent "c" has four actions, the others three."""

    def action_space(self, agent: str) -> spaces.Space:
        return spaces.Discrete(4) if agent == "c" else ACTIONS


class MixedActionsGame(LeaveJoinGame):
    """Agent "c" acts with a Box, the others with Discrete actions: no one action space pads both."""

    def action_space(self, agent: str) -> spaces.Space:
        return spaces.Box(-1.0, 1.0, (2,), np.float32) if agent == "c" else ACTIONS


def missing_agent_game(**kwargs: Any) -> BrokenGame:
    return BrokenGame("missing", **kwargs)


def nan_reward_game(**kwargs: Any) -> BrokenGame:
    return BrokenGame("nan", **kwargs)


def changing_spaces_game(**kwargs: Any) -> BrokenGame:
    return BrokenGame("spaces", **kwargs)


class SfStyleGame:
    """Sample Factory's multi-agent contract (appo/envs/sf_agents.py): two agents, lists in and out, an episode of
    `length` steps that ends for both at once and resets itself (the observations step returns then are the next
    episode's first); agent 1 is inactive (info["is_active"] False) from step `sleep` to step `wake` - 1 of every
    episode. An agent's observation is [step, agent, episode, its last action]; its reward is its action plus the step
    over 4. With `desync`, agent 0's episode ends at step 2 alone (which the adapter refuses). `resets` counts calls
    of reset()."""

    num_agents = 2
    is_multiagent = True
    observation_space = OBS
    action_space = spaces.Discrete(2)

    def __init__(self, length: int = 6, sleep: int = 2, wake: int = 4, desync: bool = False, **_: Any) -> None:
        self.length, self.sleep, self.wake, self.desync = length, sleep, wake, desync
        self.episode, self.steps, self.resets = -1, 0, 0
        self.last = [-1, -1]

    def _start(self) -> tuple[list, list]:
        self.episode += 1
        self.steps = 0
        self.last = [-1, -1]
        return self._obs(), self._infos()

    def _obs(self) -> list[np.ndarray]:
        return [np.array([self.steps, i, self.episode, self.last[i]], dtype=np.float32) for i in range(2)]

    def _infos(self) -> list[dict]:
        return [{}, {"is_active": not self.sleep <= self.steps < self.wake}]

    def reset(self, seed: int | None = None) -> tuple[list, list]:
        self.resets += 1
        return self._start()

    def step(self, actions: list) -> tuple[list, list, list, list, list]:
        self.steps += 1
        self.last = [int(a) for a in actions]
        rewards = [float(a) + self.steps / 4 for a in self.last]
        done = self.steps >= self.length
        terms = [done or (self.desync and i == 0 and self.steps == 2) for i in range(2)]
        truncs = [False, False]
        if done:
            obs, infos = self._start()
        else:
            obs, infos = self._obs(), self._infos()
        return obs, rewards, terms, truncs, infos

    def close(self) -> None:
        pass


def desync_sf_game(**kwargs: Any) -> SfStyleGame:
    return SfStyleGame(desync=True, **kwargs)
