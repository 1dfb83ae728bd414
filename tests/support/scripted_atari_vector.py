"""A stand-in for ale-py's AtariVectorEnv (envs/atari/atari.py `make_atari_vector`) that plays scripted games, for
driving appo/sampling/vector_split.py to cases a real ROM reaches only by chance. What it keeps of the real one:
same-step autoreset (an ended game's last observation in info["final_obs"], the next game's first in its place),
life_loss_info (a lost life ends the step as terminated, the game going on), partial resets through
options["reset_mask"], one seed per env reset, and the info keys "lives", "frame_number" (counting on across an
env's games; a seeded reset restarts it) and "episode_frame_number" (restarting with each game), 4 frames a step and a
few no-op frames at reset.

Every env plays `games` in turn, over and over: a game is its lives after each of its steps and ends (terminated)
after its last step, whatever its lives; a drop of lives within a game is a lost life. Each game starts with
`start_lives`. Reward 1 per step. Observation: [the vector's build number, the env's game number, step in the game]."""

from __future__ import annotations

from collections.abc import Sequence

import gymnasium as gym
import numpy as np

FRAMESKIP, RESET_FRAMES = 4, 3


class ScriptedAtariVector:
    single_observation_space = gym.spaces.Box(0.0, 1e6, (3,), np.float32)
    single_action_space = gym.spaces.Discrete(4)

    def __init__(
        self, num_envs: int, games: Sequence[Sequence[int]], start_lives: int = 5, build: int = 1, fail_resets: int = 0
    ) -> None:
        """`fail_resets`: how many partial resets raise (a broken emulator) before they work again."""
        self.num_envs, self.games, self.start_lives, self.build = num_envs, games, start_lives, build
        self.fail_resets = fail_resets
        self.played = np.zeros(num_envs, dtype=np.int64)  # games begun by each env
        self.t = np.zeros(num_envs, dtype=np.int64)  # steps into its game
        self.lives = np.full(num_envs, start_lives, dtype=np.int64)
        self.frame = np.zeros(num_envs, dtype=np.int64)
        self.episode_frame = np.zeros(num_envs, dtype=np.int64)
        self.closed = False

    def _obs(self, i: int) -> np.ndarray:
        return np.array([self.build, self.played[i], self.t[i]], np.float32)

    def _begin(self, i: int) -> None:
        self.played[i] += 1
        self.t[i] = 0
        self.lives[i] = self.start_lives
        self.frame[i] += RESET_FRAMES
        self.episode_frame[i] = RESET_FRAMES

    def _info(self) -> dict[str, np.ndarray]:
        return {
            "env_id": np.arange(self.num_envs, dtype=np.int32),
            "lives": self.lives.astype(np.int32),
            "frame_number": self.frame.astype(np.int32),
            "episode_frame_number": self.episode_frame.astype(np.int32),
        }

    def reset(self, *, seed=None, options=None) -> tuple[np.ndarray, dict]:
        mask = np.ones(self.num_envs, dtype=bool) if not options else options["reset_mask"]
        if options and self.fail_resets > 0:
            self.fail_resets -= 1
            raise RuntimeError("scripted emulator: reset failed")
        for i in np.flatnonzero(mask):
            if seed is not None:
                self.frame[i] = 0
            self._begin(int(i))
        return np.stack([self._obs(i) for i in range(self.num_envs)]), self._info()

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict]:
        assert len(actions) == self.num_envs
        terminated = np.zeros(self.num_envs, dtype=bool)
        final = np.zeros((self.num_envs, 3), np.float32)
        for i in range(self.num_envs):
            game = self.games[(self.played[i] - 1) % len(self.games)]
            before = self.lives[i]
            self.lives[i] = game[self.t[i]]
            self.t[i] += 1
            self.frame[i] += FRAMESKIP
            self.episode_frame[i] += FRAMESKIP
            over = self.t[i] == len(game)
            terminated[i] = over or self.lives[i] < before
            if over:
                final[i] = self._obs(i)
                self._begin(i)
        obs = np.stack([self._obs(i) for i in range(self.num_envs)])
        info = self._info()
        if terminated.any():
            info["final_obs"] = final
        return obs, np.ones(self.num_envs, np.float32), terminated, np.zeros(self.num_envs, dtype=bool), info

    def close(self) -> None:
        self.closed = True
