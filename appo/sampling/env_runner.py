"""One split of an actor worker's envs: step them with the actions the policy worker wrote, write
rewards, dones and the next observations into the split's current slot group, and hand full groups to
the learner. Plain object, no queues: every method returns the messages to send.

A split is one half of double buffering: while the policy worker computes this split's actions, the
actor worker steps its other split.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np

from appo.buffers import first_slot
from appo.cfg import Cfg, Derived
from appo.messages import InferenceRequest, TrajectoryReady


class EnvRunner:
    def __init__(
        self,
        cfg: Cfg,
        derived: Derived,
        worker_idx: int,
        split_idx: int,
        buffers: dict[str, np.ndarray],
        env_fn: Callable[[int], gym.Env],
    ) -> None:
        self.cfg, self.derived = cfg, derived
        self.worker_idx, self.split_idx = worker_idx, split_idx
        self.buf = buffers
        self.env_fn = env_fn
        self.num_envs = derived.envs_per_split
        self.policy_id = (worker_idx * cfg.worker_num_splits + split_idx) % cfg.num_policies
        self.free_groups: deque[int] = deque(range(derived.slot_groups_per_split))
        self.group = -1
        self.first = -1
        self.t = 0
        self.is_parked = False  # the rollout ended and no free slot group was there to continue into
        self.envs: list[gym.Env] = []
        self.ep_returns = np.zeros(self.num_envs)
        self.ep_lengths = np.zeros(self.num_envs, dtype=np.int64)
        self.finished: list[tuple[float, int, dict | None]] = []  # (return, length, trial info)
        self.next_obs: np.ndarray | None = None
        self.next_rnn: np.ndarray | None = None

    # --- start --------------------------------------------------------------------------------------
    def init(self, seed: int) -> list[Any]:
        """Create and reset the envs; returns the first InferenceRequest."""
        first_env = (self.worker_idx * self.cfg.worker_num_splits + self.split_idx) * self.num_envs
        self.envs = [self.env_fn(first_env + i) for i in range(self.num_envs)]
        space = self.envs[0].action_space
        self.is_box = isinstance(space, gym.spaces.Box)
        if self.is_box:
            self.low, self.high = space.low.astype(np.float32), space.high.astype(np.float32)
        obs = [env.reset(seed=seed + i)[0] for i, env in enumerate(self.envs)]
        for i, env in enumerate(self.envs):
            env.action_space.seed(seed + i)
        self.next_obs = np.stack(obs).astype(np.float32)
        self.next_rnn = np.zeros(self.buf["rnn_states"].shape[2:], dtype=np.float32)
        return self._start_rollout()

    def decorrelate(self, seconds: float) -> None:
        """Step with random actions for `seconds`, so envs of different workers are at different
        points of their episodes when collection starts (more independent samples per batch)."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            for i, env in enumerate(self.envs):
                obs, _, terminated, truncated, _ = env.step(env.action_space.sample())
                if terminated or truncated:
                    obs, _ = env.reset()
                self.next_obs[i] = obs
        self.buf["obs"][self.first : self.first + self.num_envs, 0] = self.next_obs

    def _start_rollout(self) -> list[Any]:
        if not self.free_groups:
            self.is_parked = True
            return []
        self.is_parked = False
        self.group = self.free_groups.popleft()
        self.first = first_slot(self.cfg, self.derived, self.worker_idx, self.split_idx, self.group)
        slots = slice(self.first, self.first + self.num_envs)
        self.buf["obs"][slots, 0] = self.next_obs
        self.buf["rnn_states"][slots, 0] = self.next_rnn
        self.t = 0
        return [self._request()]

    def _request(self) -> InferenceRequest:
        return InferenceRequest(self.policy_id, self.worker_idx, self.split_idx, self.first, self.num_envs, self.t)

    # --- the hot loop -------------------------------------------------------------------------------
    def on_actions(self) -> list[Any]:
        """Step every env of the split with its action; returns the messages this step produces."""
        buf, t, n = self.buf, self.t, self.num_envs
        slots = slice(self.first, self.first + n)
        actions = buf["actions"][slots, t]
        if self.is_box:
            # Clip only what the env sees: the learner needs the sampled action for its log-prob.
            actions = np.clip(actions, self.low, self.high)
        else:
            actions = actions[:, 0]
        rewards = np.empty(n, dtype=np.float32)
        dones = np.zeros(n, dtype=np.float32)
        truncs = np.zeros(n, dtype=np.float32)
        obs_out = buf["obs"]
        trials: dict[int, dict] = {}
        for i, env in enumerate(self.envs):
            obs, reward, terminated, truncated, info = env.step(actions[i])
            rewards[i] = reward
            if terminated or truncated:
                dones[i] = 1.0
                truncs[i] = float(truncated and not terminated)
                if "trial" in info:
                    trials[i] = info["trial"]
                obs, _ = env.reset()
            obs_out[self.first + i, t + 1] = obs
        self._record_episodes(rewards, dones, trials)
        buf["rewards"][slots, t] = self._shape_rewards(rewards)
        buf["dones"][slots, t] = dones
        buf["truncated"][slots, t] = truncs
        if dones.any():
            # A new episode starts from the zero recurrent state.
            buf["rnn_states"][slots, t + 1][dones > 0] = 0.0
        self.t = t + 1
        if self.t < self.cfg.rollout:
            return [self._request()]
        return self._finish_rollout()

    def _finish_rollout(self) -> list[Any]:
        slots = slice(self.first, self.first + self.num_envs)
        T = self.cfg.rollout
        self.next_obs = self.buf["obs"][slots, T].copy()
        self.next_rnn = self.buf["rnn_states"][slots, T].copy()
        ready = TrajectoryReady(self.policy_id, self.worker_idx, self.split_idx, self.group, self.first, self.num_envs)
        return [ready, *self._start_rollout()]

    def on_slots_released(self, group_idx: int) -> list[Any]:
        self.free_groups.append(group_idx)
        return self._start_rollout() if self.is_parked else []

    # --- bookkeeping --------------------------------------------------------------------------------
    def _shape_rewards(self, rewards: np.ndarray) -> np.ndarray:
        if self.cfg.reward_scale != 1.0:
            rewards = rewards * self.cfg.reward_scale
        if self.cfg.reward_clip > 0:
            rewards = np.clip(rewards, -self.cfg.reward_clip, self.cfg.reward_clip)
        return rewards

    def _record_episodes(self, rewards: np.ndarray, dones: np.ndarray, trials: dict[int, dict]) -> None:
        self.ep_returns += rewards
        self.ep_lengths += 1
        if dones.any():
            for i in np.flatnonzero(dones):
                self.finished.append((float(self.ep_returns[i]), int(self.ep_lengths[i]), trials.get(int(i))))
            self.ep_returns[dones > 0] = 0.0
            self.ep_lengths[dones > 0] = 0

    def pop_finished(self) -> list[tuple[float, int, dict | None]]:
        finished, self.finished = self.finished, []
        return finished

    def close(self) -> None:
        for env in self.envs:
            env.close()
