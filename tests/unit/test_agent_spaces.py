"""envs/multi_agent/agent_spaces.py: agents with different spaces padded to one observation space (flattened, zeros
after, then the agent's kind one-hot) and one action space (the largest Discrete, an action past an agent's range its
action 0; the longest 1-D Box, each agent its first entries clipped to its bounds), and what cannot be padded."""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium import spaces

from appo.envs.multi_agent.agent_spaces import AgentEnvError, SharedSpaces

BOX3 = spaces.Box(-5.0, 5.0, (3,), np.float32)
GRID = spaces.Box(0, 255, (2, 2), np.uint8)
CELL = spaces.Discrete(5, start=1)


def test_equal_spaces_stay_as_they_are_and_a_discrete_observation_is_one_hot() -> None:
    same = SharedSpaces({"a": BOX3, "b": BOX3}, {"a": spaces.Discrete(2), "b": spaces.Discrete(2)})
    assert not same.padded and same.observation_space == BOX3 and same.action_space == spaces.Discrete(2)
    cells = SharedSpaces({"a": CELL, "b": CELL}, {"a": spaces.Discrete(2), "b": spaces.Discrete(2)})
    row = np.zeros(5, np.float32)
    cells.write_obs("b", 3, row)
    assert cells.observation_space.shape == (5,) and row.tolist() == [0, 0, 1, 0, 0]


def test_different_observations_are_flattened_padded_and_marked_with_the_agents_kind() -> None:
    acts = {a: spaces.Discrete(3) for a in "abcd"}
    shared = SharedSpaces({"a": BOX3, "b": CELL, "c": GRID, "d": BOX3}, acts)
    assert shared.padded and shared.kinds == 3 and shared.observation_space.shape == (5 + 3,)
    assert shared.observation_space.dtype == np.float32 and shared.action_space == spaces.Discrete(3)
    rows = np.zeros((4, 8), np.float32)
    shared.write_obs("a", np.array([1.5, -2, 3], np.float32), rows[0])
    shared.write_obs("b", 5, rows[1])
    shared.write_obs("c", np.array([[1, 2], [3, 4]], np.uint8), rows[2])
    shared.write_obs("d", np.zeros(3, np.float32), rows[3])
    np.testing.assert_array_equal(
        rows,
        [
            [1.5, -2, 3, 0, 0, 1, 0, 0],
            [0, 0, 0, 0, 1, 0, 1, 0],
            [1, 2, 3, 4, 0, 0, 0, 1],
            [0, 0, 0, 0, 0, 1, 0, 0],
        ],
    )


def test_discrete_actions_pad_to_the_largest_and_box_actions_to_the_longest() -> None:
    obs = {"a": BOX3, "b": BOX3}
    discrete = SharedSpaces(obs, {"a": spaces.Discrete(2), "b": spaces.Discrete(6)})
    assert discrete.action_space == spaces.Discrete(6)
    assert [discrete.env_action("a", np.array([k])) for k in (0, 1, 2, 5)] == [0, 1, 0, 0]
    assert [discrete.env_action("b", np.array([k])) for k in (0, 5)] == [0, 5]
    small, wide = spaces.Box(-2.0, 2.0, (1,), np.float32), spaces.Box(0.0, 3.0, (3,), np.float32)
    box = SharedSpaces(obs, {"a": small, "b": wide})
    assert box.action_space.shape == (3,)
    assert box.action_space.low.tolist() == [-2, 0, 0] and box.action_space.high.tolist() == [3, 3, 3]
    np.testing.assert_array_equal(box.env_action("a", np.array([2.5, 1, 1], np.float32)), [2.0])
    np.testing.assert_array_equal(box.env_action("b", np.array([-1, 1, 2.5], np.float32)), [0, 1, 2.5])


@pytest.mark.parametrize(
    ("obs", "acts", "said"),
    [
        ({"a": BOX3, "b": spaces.Dict({"x": BOX3})}, {"a": spaces.Discrete(2), "b": spaces.Discrete(2)}, "'b' has obs"),
        ({"a": BOX3, "b": BOX3}, {"a": spaces.Discrete(2), "b": spaces.Box(-1, 1, (2,))}, "'b' has actions Box"),
        ({"a": BOX3, "b": BOX3}, {"a": spaces.Discrete(2), "b": spaces.Discrete(3, start=1)}, "'b' has actions"),
        ({"a": BOX3, "b": BOX3}, {"a": spaces.Discrete(2), "b": spaces.MultiDiscrete([2, 2])}, "'b' has actions"),
    ],
)
def test_what_cannot_be_padded_is_one_line_naming_the_agent(obs, acts, said) -> None:
    with pytest.raises(AgentEnvError) as raised:
        SharedSpaces(obs, acts, "game")
    message = str(raised.value)
    assert message.startswith(f"--env=game: agent {said}") and "\n" not in message, message


def test_agent_ids_append_each_agents_one_hot_after_its_observation() -> None:
    acts = {a: spaces.Discrete(2) for a in "abc"}
    same = SharedSpaces({a: BOX3 for a in "abc"}, acts, agent_ids=True)
    assert same.observation_space.shape == (3 + 3,) and same.observation_space.dtype == np.float32
    assert same.observation_space.low.tolist() == [-5, -5, -5, 0, 0, 0]
    rows = np.zeros((3, 6), np.float32)
    for i, agent in enumerate("abc"):
        same.write_obs(agent, np.full(3, i + 1, np.float32), rows[i])
    np.testing.assert_array_equal(rows, [[1, 1, 1, 1, 0, 0], [2, 2, 2, 0, 1, 0], [3, 3, 3, 0, 0, 1]])
    padded = SharedSpaces({"a": BOX3, "b": CELL}, {"a": spaces.Discrete(2), "b": spaces.Discrete(2)}, agent_ids=True)
    row = np.zeros(5 + 2 + 2, np.float32)
    padded.write_obs("b", 2, row)
    assert padded.observation_space.shape == (9,) and row.tolist() == [0, 1, 0, 0, 0, 0, 1, 0, 1]
    with pytest.raises(AgentEnvError, match=r"^--obs_agent_id: agent 'a' of --env=g has observations of shape"):
        SharedSpaces({"a": GRID, "b": GRID}, {"a": spaces.Discrete(2), "b": spaces.Discrete(2)}, "g", agent_ids=True)


def test_an_unbounded_box_action_entry_stays_unbounded_when_padded() -> None:
    free = spaces.Box(-np.inf, np.inf, (2,), np.float32)
    shared = SharedSpaces({"a": BOX3, "b": BOX3}, {"a": spaces.Box(-1.0, 1.0, (1,), np.float32), "b": free})
    assert shared.action_space.low.tolist() == [-np.inf, -np.inf]
    assert shared.action_space.high.tolist() == [np.inf, np.inf]


def test_agents_with_one_dict_space_share_its_packed_bytes() -> None:
    """Dict observations (an image and a vector: Doom's) packed into a uint8 row, as a single-agent env's are, and
    taken apart again to what each agent saw; no agent one-hot can be appended to bytes (one line)."""
    dict_space = spaces.Dict(
        {"screen": spaces.Box(0, 255, (4, 6, 3), np.uint8), "vars": spaces.Box(-np.inf, np.inf, (2,), np.float32)}
    )
    acts = {a: spaces.Discrete(3) for a in "ab"}
    shared = SharedSpaces({a: dict_space for a in "ab"}, acts, "doomish")
    space = shared.observation_space
    assert space.dtype == np.uint8 and space.shape == (4 * 6 * 3 + 2 * 4,) and space.dict_space == dict_space
    rows = np.zeros((2, *space.shape), np.uint8)
    seen = {a: dict_space.sample() for a in "ab"}
    for i, agent in enumerate("ab"):
        shared.write_obs(agent, seen[agent], rows[i])
    for i, agent in enumerate("ab"):
        back = space.unpack(rows[i])
        np.testing.assert_array_equal(back["screen"], seen[agent]["screen"])
        np.testing.assert_array_equal(back["vars"], seen[agent]["vars"])
    with pytest.raises(AgentEnvError, match=r"^--obs_agent_id: --env=doomish has Dict observations"):
        SharedSpaces({a: dict_space for a in "ab"}, acts, "doomish", agent_ids=True)
