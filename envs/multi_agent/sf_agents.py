"""Sample Factory's multi-agent env contract, seen as a PettingZoo Parallel env so that `AgentEnv`
(appo/envs/multi_agent.py) serves it like any other: an env built for Sample Factory 2 runs as `--env=module:Class`.

Sample Factory's contract: the env has `num_agents` > 1 (or `is_multiagent` True) and one `observation_space` and
one `action_space` (attributes) that every agent shares; `reset(seed=...)` returns a list of observations and a list
of infos, one per agent; `step(actions)` takes a list of actions and returns lists of observations, rewards,
terminations, truncations and infos; the env resets itself when its episode ends, so the observations that step
returns are then the next episode's first ones; `info["is_active"]` False marks an agent out of the game (Sample
Factory ignores its experience).

As a Parallel env (`SfAgents`): agents are named `agent_0` .. `agent_{n-1}`. An episode that ends for every agent at
once ends the game; the observations the env returned with it (its next episode's, Sample Factory's envs keep no
final observation) are the next `reset()`'s unless that reset asks for a seed. An agent whose info turns
`is_active` False leaves the game at that step (terminated: a dead agent), one that turns True again joins; an
inactive agent is sent a zero action, as Sample Factory does not read it. An episode that ends for some agents while
others play on has no Parallel equivalent here (Sample Factory resets those agents on their own): it stops the run
with one line naming the agent, as other contract errors do."""

from __future__ import annotations

from typing import Any

import numpy as np

from appo.envs.multi_agent.multi_agent import AgentEnvError


def is_sf_multi_agent(env: Any) -> bool:
    """Whether `env` follows Sample Factory's multi-agent contract (and not PettingZoo's Parallel API)."""
    if hasattr(env, "possible_agents") or callable(getattr(env, "observation_space", None)):
        return False
    agents = getattr(env, "num_agents", 1)
    flag = getattr(env, "is_multiagent", None)
    return bool(flag) if flag is not None else isinstance(agents, int) and agents > 1


class SfAgents:
    """A Sample Factory multi-agent env with PettingZoo's Parallel API (see the module docstring)."""

    def __init__(self, env: Any, name: str = "env") -> None:
        self.env, self.name = env, name
        self.possible_agents = [f"agent_{i}" for i in range(int(env.num_agents))]
        self.agents: list[str] = []
        self.metadata = getattr(env, "metadata", {})
        self.render_mode = getattr(env, "render_mode", None)
        self._idle = np.zeros(env.action_space.shape, dtype=env.action_space.dtype)  # an inactive agent's action
        self._next: tuple[Any, Any] | None = None  # the next episode's start, from the env's own reset

    def observation_space(self, agent: str) -> Any:
        return self.env.observation_space

    def action_space(self, agent: str) -> Any:
        return self.env.action_space

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        if self._next is not None and seed is None:
            obs, infos = self._next
        else:
            obs, infos = self.env.reset(seed=seed)
        self._next = None
        self.agents = [a for a, info in zip(self.possible_agents, infos, strict=True) if _active(info)]
        return {a: obs[self._index(a)] for a in self.agents}, {a: dict(infos[self._index(a)]) for a in self.agents}

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        full = [actions.get(a, self._idle) for a in self.possible_agents]
        obs, rewards, terms, truncs, infos = self.env.step(full)
        live = list(self.agents)
        ended = {a: bool(terms[self._index(a)]) or bool(truncs[self._index(a)]) for a in live}
        over = bool(live) and all(ended.values())
        if not over and any(ended.values()):
            agent = next(a for a in live if ended[a])
            raise AgentEnvError(
                f"--env={self.name}: {agent!r}'s episode ended while other agents play on; Sample Factory-style envs "
                "are taken when every agent's episode ends at once (an agent may leave with info['is_active'] False)"
            )
        out = {k: {} for k in ("obs", "rewards", "terms", "truncs", "infos")}
        for a in live:
            i = self._index(a)
            left = not over and not _active(infos[i])  # out of the game from this step on
            out["obs"][a], out["rewards"][a], out["infos"][a] = obs[i], float(rewards[i]), dict(infos[i])
            out["terms"][a] = bool(terms[i]) or left
            out["truncs"][a] = bool(truncs[i]) and not left
        if over:
            self._next = (obs, infos)
            self.agents = []
        else:
            joining = [a for a in self.possible_agents if a not in live and _active(infos[self._index(a)])]
            for a in joining:
                out["obs"][a], out["infos"][a] = obs[self._index(a)], dict(infos[self._index(a)])
            self.agents = [a for a in self.possible_agents if a in joining or (a in live and not out["terms"][a])]
        return out["obs"], out["rewards"], out["terms"], out["truncs"], out["infos"]

    def _index(self, agent: str) -> int:
        return int(agent.rsplit("_", 1)[1])

    def render(self) -> Any:
        return self.env.render()

    def close(self) -> None:
        self.env.close()


def _active(info: Any) -> bool:
    return not isinstance(info, dict) or bool(info.get("is_active", True))
