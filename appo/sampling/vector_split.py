"""A split's envs as one native vector env (Atari's ale-py AtariVectorEnv: C++ threads step every game at once:
raw Pong on 2 cores 1.25x the agent steps per second of gymnasium's Python wrappers). The runner's protocol
is unchanged (slots, requests, hand-over, double buffering: each split owns its own vector); what changes is how a
step happens: one call for all envs instead of one per env.

Each env of the split is seen through a `VectorSlot` (its spaces, a reset of that env alone through the vector's
reset mask), so the runner's resets (start, a policy change) work as for single envs. A vector env resets a
finished episode within the same step and hands its last observation in info["final_obs"]. With episodic life a
lost life comes back as terminated while the game goes on. The lives cannot tell it from game over (the new game's
lives, read after the same-step reset, may be fewer than a finished game held), the frame counters can: ALE's
frame_number runs on across a game's end while episode_frame_number restarts, so their difference, the frame at
which the game began, changes exactly when a new game starts. A termination within the same game is a lost life,
and such an end carries `episode_continues` like the single-env wrapper's.

Only plain runs take a vector (no task schedule, no reward commands, not episodic): appo/sampling/actor_worker.py
asks for one only then."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from appo.sampling.env_runner import EnvRunner


class VectorSlot:
    """Env `index` of a vector env, as the runner sees a single env: spaces, a reset of this env alone."""

    def __init__(self, owner: VectorEnvRunner, index: int) -> None:
        self.owner, self.index = owner, index
        self.action_space = owner.vector.single_action_space
        self.observation_space = owner.vector.single_observation_space
        self.unwrapped = self

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        del options  # plain runs only: no tasks, no commands
        return self.owner.reset_one(self.index, seed), {}

    def close(self) -> None:
        pass


class VectorEnvRunner(EnvRunner):
    """EnvRunner over one vector env (see the module docstring). `vector_fn(num_envs)` builds the vector."""

    def __init__(self, *args: Any, vector_fn: Callable[[int], Any], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.vector_fn = vector_fn
        self.vector: Any = None
        self.game_start = np.zeros(self.num_envs, dtype=np.int64)  # each env's game began at this frame
        self.reset_obs: np.ndarray | None = None

    def _make_envs(self) -> list[Any]:
        self.vector = self.vector_fn(self.num_envs)
        self.reset_obs, info = self.vector.reset(seed=self.cfg.seed + 1000 * self.first_env)  # partial resets need it
        self.game_start = game_starts(info)
        return [VectorSlot(self, i) for i in range(self.num_envs)]

    def reset_one(self, i: int, seed: int | None) -> np.ndarray:
        mask = np.zeros(self.num_envs, dtype=bool)
        mask[i] = True
        seeds = None if seed is None else np.array([seed % 2**31])  # ALE takes C ints; a resumed run's seeds are wider
        obs, info = self.vector.reset(seed=seeds, options={"reset_mask": mask})
        self.game_start[i] = game_starts(info)[i]
        return obs[i]

    def _step_envs(
        self, actions: np.ndarray, t: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[int, dict], list[int]]:
        n = self.num_envs
        slots = slice(self.first, self.first + n)
        try:
            obs, rewards, terminated, truncated, info = self.vector.step(np.asarray(actions))
        except Exception as exc:  # the whole vector is one env to recover: every episode is cut
            self.buf["obs"][slots, t + 1] = self._recover_env(0, exc)
            cut = np.ones(n, dtype=np.float32)
            self.continues = np.zeros(n, dtype=bool)  # every game starts anew
            if self.final_obs is not None:
                self.final_obs[slots, t] = self.missing_obs
            return np.zeros(n, dtype=np.float32), cut, cut.copy(), {}, list(range(n))
        rewards = np.asarray(rewards, dtype=np.float32)
        ended = np.asarray(terminated, dtype=bool) | np.asarray(truncated, dtype=bool)
        dones = ended.astype(np.float32)
        truncs = (np.asarray(truncated, dtype=bool) & ~np.asarray(terminated, dtype=bool)).astype(np.float32)
        starts = game_starts(info)
        # A lost life: an end within the game under way (a game over's same-step reset began a new one).
        self.continues = ended & ~np.asarray(truncated, dtype=bool) & (starts == self.game_start)
        self.game_start = starts
        if self.final_obs is not None and ended.any():
            final = info.get("final_obs")
            for i in np.flatnonzero(ended):
                self.final_obs[self.first + i, t] = final[i] if final is not None else obs[i]
        self.buf["obs"][slots, t + 1] = obs
        return rewards, dones, truncs, {}, []

    def _recover_env(self, i: int, exc: Exception) -> np.ndarray:
        """Log the error once, rebuild the whole vector and return every env's first observation."""
        del i
        if int(self.env_errors.max()) + 1 > self.cfg.max_env_errors:
            raise RuntimeError(
                f"the vector env of worker {self.worker_idx} failed {int(self.env_errors.max()) + 1} times in a row "
                f"(--max_env_errors={self.cfg.max_env_errors}); last error: {type(exc).__name__}: {exc}"
            ) from exc
        from appo.sampling.split_envs import SEEN_ERRORS
        from appo.utils.logging import log

        key = f"{type(exc).__name__}: {exc}"
        if key not in SEEN_ERRORS:
            SEEN_ERRORS.add(key)
            log.error("worker %d: its vector env raised %s (rebuilt, episodes dropped)", self.worker_idx, key)
        try:
            self.vector.close()
        except Exception:
            pass
        self.envs = self._make_envs()
        self.ep_returns[:] = 0.0
        self.ep_lengths[:] = 0
        return self.reset_obs

    def _rebuilt_with(self, i: int) -> range:
        """The whole vector is rebuilt: every env of the split starts a new game."""
        return range(self.num_envs)

    def decorrelate(self, seconds: float) -> None:
        import time

        deadline = time.monotonic() + seconds
        space = self.vector.single_action_space
        while time.monotonic() < deadline:
            obs, _, _, _, info = self.vector.step(np.array([space.sample() for _ in range(self.num_envs)]))
            self.game_start = game_starts(info)
            self.next_obs[:] = obs
        self.buf["obs"][self.first : self.first + self.num_envs, 0] = self.next_obs

    def close(self) -> None:
        if self.vector is not None:
            self.vector.close()


def game_starts(info: dict[str, Any]) -> np.ndarray:
    """The frame at which each env's game began, from an ale-py vector env's info: frame_number counts on across
    the games of an env (a seeded reset restarts it) while episode_frame_number restarts with each game."""
    return np.asarray(info["frame_number"], dtype=np.int64) - np.asarray(info["episode_frame_number"], dtype=np.int64)
