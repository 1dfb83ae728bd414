"""The flags of multi-agent runs: self-play against a pool of past selves, and what each agent's observation carries
(envs/multi_agent/multi_agent.py, appo/learning/snapshot_pool.py)."""

from __future__ import annotations

from dataclasses import dataclass

from appo.config.flags import flag as _f


@dataclass
class MultiAgentCfg:
    selfplay_pool: int = _f(
        0, "multi-agent envs: frozen past snapshots of each policy kept as opponents; 0: agents play the policy itself"
    )
    selfplay_snapshot_every: int = _f(200, "learner versions (train/version) between snapshots into the pool")
    selfplay_pool_prob: float = _f(0.5, "share of games whose opponents are a pool snapshot (once the pool has one)")
    selfplay_pool_keep: str = _f(
        "recent",
        "which snapshots a full pool keeps: recent (the last --selfplay_pool; a new one replaces the oldest) or "
        "spread (spaced over the whole run: a new one replaces the snapshot whose loss leaves the smallest gap, "
        "never the first)",
    )
    doom_damage_reward: float = _f(
        0.0,
        "Doom matches (doom_duel, doom_deathmatch_bots): reward per point of damage a player deals, less as much per "
        "point it takes, added to its frags minus deaths in training games only; 0: frags and deaths alone",
    )
    obs_agent_id: bool = _f(
        False,
        "multi-agent envs: append a one-hot of the agent (its row, in possible_agents' order) to its observation, so "
        "that agents sharing a policy can take different roles",
    )
    value_input: str = _f(
        "local",
        "multi-agent envs, what the value function reads: local (the agent's own observation, through the policy's "
        "trunk), team (every agent's observation in possible_agents' order, then the agent's one-hot and the game's "
        "clock: MAPPO's centralised value) or state (the env's global state(), then the one-hot and clock); the "
        "policy reads only its "
        "own observation either way",
    )
