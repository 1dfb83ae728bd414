"""Multiplayer Doom as a multi-agent env (PettingZoo's Parallel API, which envs/multi_agent/multi_agent.py's
AgentEnv steps as a row per player): learning players in one deathmatch through vizdoom's network game on
loopback, with vizdoom's built-in bots where asked.

- `doom_duel`: two learning players on multi_duel with deathmatch's controls (turn, move, strafe, attack: 54 joint
  actions; the .cfg's own strafe and attack leave a player unable to face the other, and self-play settles into
  0-0 games), a match of `minutes` of game time (1 by default: 525 steps of 4 tics). Self-play against a pool, or
  two populations in one game, as on paddle_duel.
- `doom_deathmatch_bots`: one learning player against `bots` built-in bots (4 by default) on multi_deathmatch
  (turn, move, strafe, attack), a match of 2 minutes.

Each player is a process of its own (envs/doom/player_server.py), player 0 the host; the game port is one the
system hands out free at the first reset (so no two matches of any run on this machine share one). Observations as
the single-player scenarios' (the 128x72 screen beside the health and the selected weapon's ammo); frame skip 4; a
dead player respawns at once. Rewards: +1 a frag, -1 a death (a suicide costs both), so a player's return is its
frags minus its deaths; with `damage_reward` > 0 (--doom_damage_reward; Sample Factory's self-play duels shape
theirs so) also that much per point of damage the player deals, less that much per point it takes: a hit pays
before the frag it leads to, which a pair that has learned only to dodge needs to learn to aim. The match ends
(terminated) at its time limit; each player's info then holds its frags, deaths, damage dealt and taken and, as its
true objective, the duel's result (1 a win by frags, 0.5 a draw, 0 a loss) or its frags against bots."""

from __future__ import annotations

import socket
from typing import Any

import gymnasium as gym
import numpy as np

from appo.envs.common.episode_end import TRUE_OBJECTIVE
from appo.envs.doom.player_server import PlayerProcess
from appo.envs.doom.scenarios import ATTACK, MOVE, STRAFE, TURN, Scenario

VARIABLES = ["HEALTH", "SELECTED_WEAPON_AMMO"]
MATCHES = {
    "doom_duel": (Scenario("multi_duel.cfg", (TURN, MOVE, STRAFE, ATTACK)), dict(players=2, bots=0, minutes=1.0)),
    "doom_deathmatch_bots": (
        Scenario("multi.cfg", (TURN, MOVE, STRAFE, ATTACK)),
        dict(players=1, bots=4, minutes=2.0),
    ),
}


def free_port() -> int:
    """A UDP port on loopback that is free now (the system's choice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class DoomMatch:
    metadata = {"name": "doom_match", "render_modes": ["rgb_array"]}

    def __init__(
        self,
        name: str = "doom_duel",
        players: int | None = None,
        bots: int | None = None,
        minutes: float | None = None,
        frameskip: int = 4,
        max_steps: int = 0,
        damage_reward: float = 0.0,
        render_mode: str | None = None,
    ) -> None:
        scenario, defaults = MATCHES[name]
        self.scenario, self.frameskip, self.max_steps = scenario, frameskip, max_steps
        self.damage_reward = float(damage_reward)
        self.players = int(defaults["players"] if players is None else players)
        self.bots = int(defaults["bots"] if bots is None else bots)
        self.minutes = float(defaults["minutes"] if minutes is None else minutes)
        self.limit = int(round(self.minutes * 60 * 35))  # the match in tics (35 a second)
        if self.players < 1 or self.bots < 0 or self.minutes <= 0 or self.damage_reward < 0:
            raise ValueError(
                f"--env={name}: needs players >= 1, bots >= 0, minutes > 0 and --doom_damage_reward >= 0 "
                f"({players}, {bots}, {minutes}, {damage_reward})"
            )
        self.render_mode = render_mode
        self.possible_agents = [f"player_{i}" for i in range(self.players)]
        self.agents: list[str] = []
        buttons = sorted({b for axis in scenario.axes for b in axis})
        self.buttons = buttons
        self.actions = scenario.actions(buttons)
        screen = gym.spaces.Box(0, 255, (72, 128, 3), np.uint8)
        variables = gym.spaces.Box(-np.inf, np.inf, (len(VARIABLES),), np.float32)
        self._obs_space = gym.spaces.Dict({"screen": screen, "vars": variables})
        self._act_space = gym.spaces.Discrete(len(self.actions))
        self.procs: list[PlayerProcess] = []
        self.counts = np.zeros((self.players, 4))  # each player's frags, deaths, damage dealt and taken (totals)
        self.start_counts = self.counts
        self.steps = self.tics = 0
        self.last: dict[str, Any] = {}

    def observation_space(self, agent: str) -> gym.Space:
        return self._obs_space

    def action_space(self, agent: str) -> gym.Space:
        return self._act_space

    def _start(self) -> None:
        port = free_port()
        timelimit = f"+timelimit {self.minutes} +sv_forcerespawn 1 +sv_noautoaim 1 +sv_spawnfarthest 1"
        timelimit += " +viz_respawn_delay 0 +viz_nocheat 1"
        for i in range(self.players):
            self.procs.append(PlayerProcess())
            host = f"-host {self.players} -port {port} -netmode 0 -deathmatch {timelimit}"
            args = host if i == 0 else f"-join 127.0.0.1 -port {port}"
            kwargs = dict(cfg=self.scenario.cfg, buttons=self.buttons, variables=VARIABLES, args=args, name=f"p{i}")
            self.procs[i].send("start", kwargs, self.bots if i == 0 else 0, self.limit)
        for proc in self.procs:
            proc.receive()

    def _all(self, *request: Any) -> list[Any]:
        for proc in self.procs:
            proc.send(*request)
        return [proc.receive() for proc in self.procs]

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        first = not self.procs
        if first:
            self._start()
        replies = self._all("reset", first)
        self.agents = list(self.possible_agents)
        self.counts = np.array([reply[1] for reply in replies])  # the game's totals: this episode counts from here
        self.start_counts = self.counts.copy()
        self.steps = self.tics = 0
        self.last = {agent: reply[0] for agent, reply in zip(self.agents, replies, strict=True)}
        return dict(self.last), {a: {} for a in self.agents}

    def step(self, actions: dict[str, Any]) -> tuple[dict, dict, dict, dict, dict]:
        buttons = [self.actions[int(actions[agent])] for agent in self.possible_agents]
        for tic in range(self.frameskip):
            for proc, held in zip(self.procs, buttons, strict=True):
                proc.send("tic", held, tic == self.frameskip - 1)
            replies = [proc.receive() for proc in self.procs]
            if any(reply[2] for reply in replies):
                break
        counts = np.array([reply[1] for reply in replies])
        gained = counts - self.counts
        self.counts = counts
        episode = counts - self.start_counts  # this episode's frags, deaths and damage
        self.steps += 1
        self.tics += tic + 1
        finished = any(reply[2] for reply in replies) or self.tics >= self.limit
        truncated = not finished and 0 < self.max_steps <= self.steps
        agents = self.possible_agents
        self.last = {a: reply[0] for a, reply in zip(agents, replies, strict=True)}
        paid = gained[:, 0] - gained[:, 1] + self.damage_reward * (gained[:, 2] - gained[:, 3])
        rewards = {a: float(paid[i]) for i, a in enumerate(agents)}
        infos: dict[str, dict] = {a: {} for a in agents}
        if finished or truncated:
            frags = episode[:, 0]
            for i, a in enumerate(agents):
                infos[a] = {"frags": float(frags[i]), "deaths": float(episode[i, 1])}
                infos[a] |= {"damage_dealt": float(episode[i, 2]), "damage_taken": float(episode[i, 3])}
                if self.players == 2:
                    infos[a][TRUE_OBJECTIVE] = 0.5 if frags[0] == frags[1] else float(frags[i] == frags.max())
                else:
                    infos[a][TRUE_OBJECTIVE] = float(frags[i])
            self.agents = []
        terminations = {a: finished for a in agents}
        truncations = {a: truncated for a in agents}
        return dict(self.last), rewards, terminations, truncations, infos

    def render(self) -> np.ndarray | None:
        """Player 0's last screen (128x72) under render_mode "rgb_array"."""
        if self.render_mode != "rgb_array" or not self.last:
            return None
        return np.array(self.last[self.possible_agents[0]]["screen"])

    def close(self) -> None:
        for proc in self.procs:
            proc.close()
        self.procs = []
