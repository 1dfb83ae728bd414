"""paddle_duel: a two-player Pong on vector observations, for multi-agent self-play. Pure python/numpy.

It exists to prove self-play: two agents, "left" and "right", play one rally per game, and a shared policy
learns by playing itself; `scripted_action` (a ball tracker) is the fixed opponent that evaluation measures
progress against, through `play_games`. The env follows the PettingZoo Parallel API by shape (duck-typed,
pettingzoo is not imported): `possible_agents`, `agents`, `observation_space(agent)`, `action_space(agent)`,
`reset(seed, options) -> (obs, infos)`, `step(actions) -> (obs, rewards, terminations, truncations, infos)`.

Court: x in [-1, 1] with the left paddle's face at x = -1 and the right one's at x = +1, y in [-1, 1] with
walls at y = +-1 that reflect the ball. Paddles have half-height `paddle_half` and move `paddle_speed` per
step (action 0 stay, 1 up (+y), 2 down (-y)). A ball that reaches a paddle's plane within the paddle bounces
off, its angle turned by `deflect` times the hit's offset from the paddle's centre (-1 at the bottom edge, +1 at
the top), as in Pong, and kept within `max_angle` of the horizontal; its speed grows by `speedup` per hit up to
`max_ball_speed`. An edge hit thus gives a steep shot that a slow tracker cannot reach; the incoming angle is
kept (a centre hit reflects the ball) so that two trackers do not settle into a flat rally that never ends,
and the speed-up is steep enough that two players who both predict the ball still end their rallies well
within `max_steps` (two ball predictors drew 57 of 200 games with a 10% speed-up capped at 0.16, none with
these defaults).
A ball that passes a paddle ends the game: +1 to the winner, -1 to the loser, both terminate; `max_steps`
truncates it as a draw (reward 0). The serve (from the centre line, towards a random side, at a random angle
and height) comes from the reset seed.

Defaults tuned so that over 200 games the tracker against itself splits ~50/50 with no draws, random play wins
~4% against it, and a hand-written policy that predicts the ball and hits it with the paddle's edge wins >90%.

Observation (float32, 7): ball x, ball y, ball vx, ball vy (velocities times `VEL_SCALE`), own paddle y,
opponent paddle y, fraction of `max_steps` elapsed, in the agent's OWN frame: the right agent's view is
mirrored (x -> -x, vx -> -vx) so that every agent sees itself on the left at x = -1, facing +x; y is not
mirrored, so "up" means the same for both and one policy plays either side."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from appo.envs.common.episode_end import TRUE_OBJECTIVE

AGENTS = ("left", "right")
VEL_SCALE = 10.0  # observed velocity = VEL_SCALE * court units per step
STAY, UP, DOWN = 0, 1, 2
_MOVE = (0.0, 1.0, -1.0)


class PaddleDuelEnv:
    """Two-paddle Pong, one rally per game (see the module docstring)."""

    metadata = {"render_modes": ["rgb_array"], "name": "paddle_duel"}

    @staticmethod
    def scripted_policy(obs: np.ndarray) -> int:
        """The evaluation opponent (the engine's evaluations play a policy against it): `scripted_action`."""
        return scripted_action(obs)

    def __init__(
        self,
        max_steps: int = 400,
        render_mode: str | None = None,
        paddle_speed: float = 0.035,
        paddle_half: float = 0.2,
        ball_speed: float = 0.05,
        speedup: float = 1.2,
        max_ball_speed: float = 0.6,
        max_angle_deg: float = 60.0,
        deflect_deg: float = 45.0,
        serve_angle_deg: float = 30.0,
    ) -> None:
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"paddle_duel renders only 'rgb_array' (got render_mode={render_mode!r})")
        if max_steps <= 0:
            raise ValueError(f"max_steps must be > 0 (got {max_steps})")
        self.render_mode = render_mode
        self.max_steps = int(max_steps)
        self.paddle_speed, self.paddle_half = float(paddle_speed), float(paddle_half)
        self.ball_speed, self.speedup, self.max_ball_speed = float(ball_speed), float(speedup), float(max_ball_speed)
        self.max_angle, self.deflect = math.radians(max_angle_deg), math.radians(deflect_deg)
        self.serve_angle = math.radians(serve_angle_deg)
        self.possible_agents = list(AGENTS)
        self.agents: list[str] = []
        v = max(self.ball_speed, self.max_ball_speed) * VEL_SCALE
        low = np.array([-1, -1, -v, -v, -1, -1, 0], dtype=np.float32)
        high = np.array([1, 1, v, v, 1, 1, 1], dtype=np.float32)
        self._observation_space = spaces.Box(low, high, dtype=np.float32)
        self._action_space = spaces.Discrete(3)
        self._rng = np.random.default_rng()
        self.set_state(0.0, 0.0, self.ball_speed, 0.0, 0.0, 0.0)
        self._steps = 0

    def observation_space(self, agent: str) -> spaces.Box:
        return self._observation_space

    def action_space(self, agent: str) -> spaces.Discrete:
        return self._action_space

    def set_state(self, x: float, y: float, vx: float, vy: float, left_y: float, right_y: float) -> None:
        """Place the ball and the paddles (court frame); used by reset and by tests."""
        self._x, self._y, self._vx, self._vy = float(x), float(y), float(vx), float(vy)
        self._left_y, self._right_y = float(left_y), float(right_y)

    def state(self) -> np.ndarray:
        """The global state, court frame: (ball x, ball y, ball vx, ball vy, left paddle y, right paddle y),
        float64, so that `set_state(*env.state())` restores it exactly."""
        return np.array((self._x, self._y, self._vx, self._vy, self._left_y, self._right_y))

    @property
    def unwrapped(self) -> PaddleDuelEnv:
        return self

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        side, angle, height = self._rng.random(3)
        angle = (2.0 * angle - 1.0) * self.serve_angle
        direction = 1.0 if side < 0.5 else -1.0
        vx, vy = direction * self.ball_speed * math.cos(angle), self.ball_speed * math.sin(angle)
        self.set_state(0.0, height - 0.5, vx, vy, 0.0, 0.0)
        self._steps = 0
        self.agents = list(AGENTS)
        return self._observations(), {a: {} for a in AGENTS}

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        if not self.agents:
            raise RuntimeError("paddle_duel: the game is over; call reset()")
        self._steps += 1
        limit = 1.0 - self.paddle_half
        step = self.paddle_speed
        self._left_y = min(limit, max(-limit, self._left_y + step * _MOVE[int(actions.get("left", STAY))]))
        self._right_y = min(limit, max(-limit, self._right_y + step * _MOVE[int(actions.get("right", STAY))]))
        winner = self._move_ball()
        over = winner is not None
        truncated = not over and self._steps >= self.max_steps
        obs = self._observations()
        reward_left = 0.0 if winner is None else (1.0 if winner == "left" else -1.0)
        rewards = {"left": reward_left, "right": -reward_left}
        terms = {a: over for a in AGENTS}
        truncs = {a: truncated for a in AGENTS}
        infos: dict[str, dict] = {a: {} for a in AGENTS}
        if over or truncated:
            for a in AGENTS:
                infos[a]["winner"] = winner
                infos[a][TRUE_OBJECTIVE] = float(winner == a)  # PBT's objective: the win rate
            self.agents = []
        return obs, rewards, terms, truncs, infos

    def _move_ball(self) -> str | None:
        """Advance the ball one step: walls reflect it, a paddle returns it or lets it through. Returns the
        winner's name once the ball has passed a paddle, else None."""
        x, y, vx, vy = self._x + self._vx, self._y + self._vy, self._vx, self._vy
        if y > 1.0:
            y, vy = 2.0 - y, -vy
        elif y < -1.0:
            y, vy = -2.0 - y, -vy
        winner = None
        if abs(x) >= 1.0:
            face = 1.0 if x > 0 else -1.0
            y_hit = y - vy * (x - face) / vx  # where the ball crossed the paddle's plane
            y_hit = min(1.0, max(-1.0, y_hit))
            paddle_y = self._right_y if face > 0 else self._left_y
            offset = (y_hit - paddle_y) / self.paddle_half
            if abs(offset) <= 1.0:
                speed = min(self.max_ball_speed, math.hypot(vx, vy) * self.speedup)
                angle = math.atan2(vy, abs(vx)) + offset * self.deflect
                angle = min(self.max_angle, max(-self.max_angle, angle))
                vx, vy = -face * speed * math.cos(angle), speed * math.sin(angle)
                x, y = face, y_hit
            else:
                winner = "left" if face > 0 else "right"
                x = face
        self._x, self._y, self._vx, self._vy = x, y, vx, vy
        return winner

    def _observations(self) -> dict[str, np.ndarray]:
        x, y, vx, vy = self._x, self._y, self._vx * VEL_SCALE, self._vy * VEL_SCALE
        t = self._steps / self.max_steps
        return {
            "left": np.array((x, y, vx, vy, self._left_y, self._right_y, t), dtype=np.float32),
            "right": np.array((-x, y, -vx, vy, self._right_y, self._left_y, t), dtype=np.float32),
        }

    def render(self, size: int = 84) -> np.ndarray | None:
        """The court as uint8 (size, size, 3): paddles white at the edges, the ball yellow; y up."""
        if self.render_mode != "rgb_array":
            return None
        frame = np.zeros((size, size, 3), dtype=np.uint8)

        def row(y: float) -> int:
            return min(size - 1, max(0, round((1.0 - y) / 2.0 * (size - 1))))

        half = max(1, round(self.paddle_half / 2.0 * (size - 1)))
        for col, py in ((slice(0, 2), self._left_y), (slice(size - 2, size), self._right_y)):
            r = row(py)
            frame[max(0, r - half) : r + half + 1, col] = 255
        bc = min(size - 2, max(0, round((self._x + 1.0) / 2.0 * (size - 1))))
        br = min(size - 2, row(self._y))
        frame[br : br + 2, bc : bc + 2] = (255, 220, 0)
        return frame

    def close(self) -> None:
        pass


def scripted_action(obs: np.ndarray, dead_zone: float = 0.02) -> int:
    """The scripted opponent: move the own paddle towards the ball's height, still within `dead_zone`."""
    gap = float(obs[1]) - float(obs[4])
    if gap > dead_zone:
        return UP
    if gap < -dead_zone:
        return DOWN
    return STAY


def play_games(
    policy_a: Callable[[np.ndarray], int],
    policy_b: Callable[[np.ndarray], int],
    games: int,
    seed: int = 0,
    **env_kwargs: Any,
) -> dict[str, float]:
    """Play `games` games of policy_a against policy_b, policy_a on the left in even games and on the right in
    odd ones (reset seed `seed + game`). Counts are from policy_a's view; win_rate = wins / games."""
    env = PaddleDuelEnv(**env_kwargs)
    wins = losses = draws = 0
    for game in range(games):
        side_a = AGENTS[game % 2]
        obs, _ = env.reset(seed=seed + game)
        infos: dict[str, dict] = {}
        while env.agents:
            actions = {a: (policy_a if a == side_a else policy_b)(obs[a]) for a in env.agents}
            obs, _, _, _, infos = env.step(actions)
        winner = infos[side_a]["winner"]
        if winner is None:
            draws += 1
        elif winner == side_a:
            wins += 1
        else:
            losses += 1
    env.close()
    return {"wins": wins, "losses": losses, "draws": draws, "win_rate": wins / games if games else 0.0}


class PaddleDuelVsScripted(gym.Env):
    """The same game as a single-agent gymnasium env: the agent plays one side (left in even games, right in odd
    ones) against `scripted_action`. The single-agent twin of paddle_duel at the same cost per game step, for
    comparing the multi-agent engine's throughput with the single-agent one's (benchmarks/multi_agent.py)."""

    metadata = {"render_modes": ["rgb_array"]}

    def __init__(self, max_steps: int = 400, render_mode: str | None = None, **kwargs: Any) -> None:
        self.game = PaddleDuelEnv(max_steps=max_steps, render_mode=render_mode, **kwargs)
        self.observation_space = self.game.observation_space(AGENTS[0])
        self.action_space = self.game.action_space(AGENTS[0])
        self.render_mode = render_mode
        self.games = 0
        self.side, self.other, self.obs = AGENTS[0], AGENTS[1], {}

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        self.side, self.other = (AGENTS[0], AGENTS[1]) if self.games % 2 == 0 else (AGENTS[1], AGENTS[0])
        self.games += 1
        self.obs, _ = self.game.reset(seed=seed)
        return self.obs[self.side], {}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict]:
        moves = {self.side: int(action), self.other: scripted_action(self.obs[self.other])}
        self.obs, rewards, terms, truncs, infos = self.game.step(moves)
        return self.obs[self.side], rewards[self.side], terms[self.side], truncs[self.side], infos[self.side]

    def render(self) -> Any:
        return self.game.render()

    def close(self) -> None:
        self.game.close()
