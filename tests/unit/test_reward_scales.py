"""The conversion of appo's per-agent returns to MAPPO's spread score, checked on a real mpe2 episode played once and
scored by both reward definitions: mpe2's (what appo trains on) and MAPPO's (marlbenchmark/on-policy's MPE spread:
every agent paid the team's sum, each agent's own reward the global distance term minus 1 per agent it collides
with, itself included)."""

from __future__ import annotations

import numpy as np
import pytest

from appo.tools.reward_scales import epymarl_return, mappo_spread_score, on_scales, team_return

simple_spread_v3 = pytest.importorskip("mpe2.simple_spread_v3")


def mappo_step_reward(env) -> float:  # noqa: ANN001 - an mpe2 parallel env
    """MAPPO's shared reward of the world's current state: the sum over agents of (the global distance term minus 1
    per agent colliding with it, itself included)."""
    world, scenario = env.unwrapped.world, env.unwrapped.scenario
    total = 0.0
    for agent in world.agents:
        own = scenario.global_reward(world)
        own -= sum(1.0 for other in world.agents if scenario.is_collision(other, agent))
        total += own
    return total


@pytest.mark.parametrize("huddle", [False, True], ids=["apart", "huddled"])
def test_mappo_score_is_six_times_the_per_agent_return_minus_75(huddle: bool) -> None:
    """Random play from mpe2's start, and from the agents put on one spot (so that they collide with each other,
    which the two definitions count differently)."""
    env = simple_spread_v3.parallel_env(N=3, local_ratio=0.5, max_cycles=25)
    env.reset(seed=int(huddle))
    if huddle:
        for i, agent in enumerate(env.unwrapped.world.agents):
            agent.state.p_pos[:] = (0.04 * i, 0.0)  # overlapping, not on one point (the physics divides by the gap)
    rng = np.random.default_rng(int(huddle))
    returns = dict.fromkeys(env.possible_agents, 0.0)
    mappo, epymarl, steps, collided = 0.0, 0.0, 0, 0.0
    while env.agents:
        actions = {a: int(rng.integers(env.action_space(a).n)) for a in env.agents}
        _, rewards, _, _, _ = env.step(actions)
        steps += 1
        for agent, reward in rewards.items():
            returns[agent] += reward
        epymarl += float(sum(rewards.values()))  # EPyMARL's common reward: the step's rewards summed
        mappo += mappo_step_reward(env)
        world = env.unwrapped.world
        collided += sum(
            env.unwrapped.scenario.is_collision(a, b) for a in world.agents for b in world.agents if a is not b
        )
    env.close()
    per_agent = sum(returns.values()) / len(returns)
    assert steps == 25
    assert mappo_spread_score(per_agent) == pytest.approx(mappo, abs=1e-6)
    assert mappo_spread_score(per_agent, agents=3, steps=25) == pytest.approx(6 * per_agent - 75)
    assert epymarl_return(per_agent, 3) == pytest.approx(epymarl, abs=1e-6)
    assert on_scales("mpe2.simple_spread_v3:parallel_env", per_agent, 3, 25) == pytest.approx(
        {"per_agent": per_agent, "per_team": team_return(per_agent, 3), "epymarl": epymarl, "mappo": mappo}
    )
    assert (collided > 0) == huddle  # (random play from mpe2's start keeps them apart)


def test_an_env_without_a_known_mappo_scale_gets_per_agent_team_and_epymarl_only() -> None:
    assert on_scales("paddle_duel", -2.0, 2, 100) == {"per_agent": -2.0, "per_team": -4.0, "epymarl": -4.0}
