"""The VizDoom scenarios appo trains (`--env=doom_<scenario>`): the single-player scenarios bundled with vizdoom, each
with the buttons its .cfg makes available and the action set the policy chooses from.

An action set is a product of axes, as Sample Factory's Doom action spaces are (a Tuple of Discretes: turn, move,
attack ...): each axis is "none" or one of its buttons, and the policy picks one joint action (one Discrete, since
the engine takes Box and Discrete actions), so turning while moving forward and firing is one choice among
3 x 3 x 2. A scenario whose buttons form one axis (basic: left, right, attack) picks one button or none per step.

Rewards stay the game's own (the .cfg's living reward, kills, the scenario's scripts): returns read in the units
published for each scenario; the preset's --reward_scale says how much smaller the learner sees them."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

TURN = ("TURN_LEFT", "TURN_RIGHT")
MOVE = ("MOVE_FORWARD", "MOVE_BACKWARD")
FORWARD = ("MOVE_FORWARD",)
STRAFE = ("MOVE_LEFT", "MOVE_RIGHT")
ATTACK = ("ATTACK",)


@dataclass(frozen=True)
class Scenario:
    """A bundled scenario: its .cfg (in vizdoom's scenarios folder), the axes of its action set (each a tuple of the
    .cfg's buttons, pressed one at a time or none), and the reward scale its preset trains with."""

    cfg: str
    axes: tuple[tuple[str, ...], ...]
    reward_scale: float = 1.0

    def actions(self, buttons: list[str]) -> list[list[float]]:
        """Every joint action as the list of button values the game takes (its `buttons`, in the .cfg's order):
        the product of the axes' choices, "none" first on each axis (so action 0 presses nothing)."""
        index = {b: i for i, b in enumerate(buttons)}
        missing = sorted({b for axis in self.axes for b in axis} - set(index))
        if missing:
            raise ValueError(f"{self.cfg}: buttons {', '.join(missing)} are not among its available buttons")
        out = []
        for choice in itertools.product(*[(None, *axis) for axis in self.axes]):
            values = [0.0] * len(buttons)
            for button in choice:
                if button is not None:
                    values[index[button]] = 1.0
            out.append(values)
        return out


SCENARIOS: dict[str, Scenario] = {
    # Kill the monster in front: +101 a hit, -5 a missed shot, -1 a tic; 300 tics.
    "basic": Scenario("basic.cfg", (("MOVE_LEFT", "MOVE_RIGHT", "ATTACK"),), reward_scale=0.01),
    # Turn and shoot the monsters that close in: +1 a kill, -1 for dying.
    "defend_the_center": Scenario("defend_the_center.cfg", (TURN, ATTACK)),
    "defend_the_line": Scenario("defend_the_line.cfg", (TURN, ATTACK)),
    # Stay alive on an acid floor by picking up medkits: +1 a tic alive (at most 2,100).
    "health_gathering": Scenario("health_gathering.cfg", (TURN, FORWARD), reward_scale=0.01),
    "health_gathering_supreme": Scenario("health_gathering_supreme.cfg", (TURN, FORWARD), reward_scale=0.01),
    # Find the vest in a maze: +1 on reaching it, -0.0001 a tic.
    "my_way_home": Scenario("my_way_home.cfg", (TURN, FORWARD, STRAFE)),
    # Run the corridor to the vest past shooting monsters: +dx towards it, -100 for dying.
    "deadly_corridor": Scenario("deadly_corridor.cfg", (TURN, MOVE, STRAFE, ATTACK), reward_scale=0.01),
    # Dodge fireballs: +1 a tic alive.
    "take_cover": Scenario("take_cover.cfg", (STRAFE,), reward_scale=0.01),
    # Hit a moving target with a rocket: +1 a hit, -0.001 a tic.
    "predict_position": Scenario("predict_position.cfg", (TURN, ATTACK)),
    # Kill as many monsters as possible in an arena: +1 a kill.
    "deathmatch": Scenario("deathmatch.cfg", (TURN, MOVE, STRAFE, ATTACK)),
}


def scenario_names() -> list[str]:
    """The env names of the scenarios: doom_<scenario>."""
    return [f"doom_{name}" for name in SCENARIOS]
