"""Multi-agent returns on the scales other libraries publish, written once.

appo reports a multi-agent env's return per agent: each agent's own rewards summed over its episode, averaged over
the agents (`episode/return_mean`). Libraries differ (users of EPyMARL, MARLlib and Sample Factory have each asked
which scale a figure is on), so a figure is only comparable on the same scale:

- per team: the agents' returns summed (N x the per-agent return);
- MAPPO's (Yu et al. 2021, marlbenchmark/on-policy) on the MPE spread task: its env pays every agent the team's sum
  of rewards, and each agent's own reward is -(sum over landmarks of the nearest agent's distance) minus 1 for
  every agent it collides with, itself included (so -1 per agent per step however it plays); the logged score is
  one agent's episode return, i.e. the team total over the episode. mpe2's simple_spread_v3 (PettingZoo's MPE)
  pays each agent 0.5 x that global distance term + 0.5 x its own collisions with the others (local_ratio 0.5), so
  over an episode of T steps with N agents:

      MAPPO score = 2 N x (per-agent return) - N T        (3 agents, 25 steps: 6 x return - 75)

  which holds for local_ratio 0.5 only (any other ratio mixes the two terms differently: the per-agent return alone
  no longer determines the score). tests/unit/test_reward_scales.py plays an episode through both definitions.
- EPyMARL's (uoe-agents/epymarl) on any PettingZoo env: with its default `common_reward=True` and
  `reward_scalarisation="sum"` its wrapper sums the agents' rewards of each step into one team reward, and the
  logged return is that summed over the episode: the team's return, N x the per-agent return. (The 2021 EPyMARL
  paper's MPE figures came from its own fork of the particle envs, whose rewards differ from mpe2's: they are not on
  this scale.)
"""

from __future__ import annotations

# The envs whose MAPPO score follows from appo's per-agent return, with the local_ratio that conversion needs.
MAPPO_SPREAD_ENVS = ("mpe2.simple_spread_v3:parallel_env", "pettingzoo.mpe.simple_spread_v3:parallel_env")
SPREAD_LOCAL_RATIO = 0.5


def team_return(per_agent_return: float, agents: int) -> float:
    """The team's return: every agent's summed."""
    return per_agent_return * agents


def mappo_spread_score(per_agent_return: float, agents: int = 3, steps: int = 25) -> float:
    """MAPPO's logged score on the spread task of an episode whose per-agent return (mpe2, local_ratio 0.5) is
    `per_agent_return`, with `agents` agents over `steps` steps (the module docstring derives it)."""
    return 2 * agents * per_agent_return - agents * steps


def epymarl_return(per_agent_return: float, agents: int) -> float:
    """EPyMARL's logged return (common reward, summed) of a PettingZoo episode: the team's return."""
    return team_return(per_agent_return, agents)


def on_scales(env: str, per_agent_return: float, agents: int, steps: int) -> dict[str, float]:
    """A per-agent return on every scale known for `env`: per agent, per team, EPyMARL's (a PettingZoo env through its
    wrapper with the default common reward) and MAPPO's where it applies."""
    out = {
        "per_agent": per_agent_return,
        "per_team": team_return(per_agent_return, agents),
        "epymarl": epymarl_return(per_agent_return, agents),
    }
    if env in MAPPO_SPREAD_ENVS:
        out["mappo"] = mappo_spread_score(per_agent_return, agents, steps)
    return out
