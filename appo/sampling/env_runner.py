"""One split of an actor worker's envs: step them with the actions the policy worker wrote, write
rewards, dones and the next observations into the split's current slot group, and hand full groups to
the learner. Plain object, no queues: every method returns the messages to send.

A split is one half of double buffering: while the policy worker computes this split's actions, the
actor worker steps its other split.
"""

from __future__ import annotations

import time
import traceback
from collections import deque
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np

from appo.buffers import first_slot
from appo.cfg import Cfg, Derived
from appo.messages import ActionsReady, InferenceRequest, TrajectoryReady
from utils.logging import log

# Distinct env errors already logged by this process: each is logged once with its traceback.
SEEN_ERRORS: set[str] = set()


class EnvRunner:
    def __init__(
        self,
        cfg: Cfg,
        derived: Derived,
        worker_idx: int,
        split_idx: int,
        buffers: dict[str, np.ndarray],
        env_fn: Callable[[int], gym.Env],
        control: dict[str, np.ndarray] | None = None,
        incarnation: int = 0,
    ) -> None:
        self.cfg, self.derived = cfg, derived
        self.worker_idx, self.split_idx = worker_idx, split_idx
        self.buf = buffers
        self.env_fn = env_fn
        self.num_envs = derived.envs_per_split
        self.policy_id = (worker_idx * cfg.worker_num_splits + split_idx) % cfg.num_policies
        self.incarnation = incarnation
        self.at_learner = control["group_at_learner"] if control is not None else None
        groups = range(derived.slot_groups_per_split)
        # A restarted worker must not refill groups the learner still holds: they come back by SlotsReleased.
        self.free_groups: deque[int] = deque(g for g in groups if not self._with_learner(g))
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
        self.requested_at: float | None = None  # monotonic time of the outstanding InferenceRequest
        self.env_errors = np.zeros(self.num_envs, dtype=np.int64)  # consecutive failures per env

    def _group_key(self, group_idx: int) -> int:
        return (self.worker_idx * self.cfg.worker_num_splits + self.split_idx) * self.derived.slot_groups_per_split + (
            group_idx
        )

    def _with_learner(self, group_idx: int) -> bool:
        return self.at_learner is not None and bool(self.at_learner[self._group_key(group_idx)])

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
        self.requested_at = time.monotonic()
        return InferenceRequest(
            self.policy_id, self.worker_idx, self.split_idx, self.first, self.num_envs, self.t, self.incarnation
        )

    def is_reply(self, msg: ActionsReady) -> bool:
        """Whether `msg` answers the request outstanding now (not a stale or duplicate reply)."""
        return (
            self.requested_at is not None
            and msg.first_slot == self.first
            and msg.t == self.t
            and msg.incarnation == self.incarnation
        )

    def resend_if_stale(self, now: float, timeout: float) -> list[Any]:
        """Ask again when a reply is overdue (its policy worker died with the request)."""
        if self.requested_at is not None and now - self.requested_at > timeout:
            return [self._request()]
        return []

    # --- the hot loop -------------------------------------------------------------------------------
    def on_actions(self, msg: ActionsReady) -> list[Any]:
        """Step every env of the split with its action; returns the messages this step produces."""
        if not self.is_reply(msg):
            return []
        self.requested_at = None
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
        failed: list[int] = []
        for i, env in enumerate(self.envs):
            try:
                obs, reward, terminated, truncated, info = env.step(actions[i])
                if terminated or truncated:
                    obs, _ = env.reset()
                    dones[i] = 1.0
                    truncs[i] = float(truncated and not terminated)
                    if "trial" in info:
                        trials[i] = info["trial"]
            except Exception as exc:  # a broken env must not take the worker (and the run) down
                obs, reward = self._recover_env(i, exc), 0.0
                dones[i] = truncs[i] = 1.0  # cut the episode; bootstrap it like a time limit
                failed.append(i)
            rewards[i] = reward
            obs_out[self.first + i, t + 1] = obs
        if failed or self.env_errors.any():
            ok = np.ones(n, dtype=bool)
            ok[failed] = False
            self.env_errors[~ok] += 1
            self.env_errors[ok] = 0
        self._record_episodes(rewards, dones, trials, failed)
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

    def _recover_env(self, i: int, exc: Exception) -> np.ndarray:
        """Log the error (once per distinct one), rebuild the env and return its first observation. More than
        `max_env_errors` failures in a row of one env fail the run with a clear message."""
        key = f"{type(exc).__name__}: {exc}"
        if key not in SEEN_ERRORS:
            SEEN_ERRORS.add(key)
            log.error(
                "worker %d env %d raised %s (env rebuilt, episode dropped)\n%s",
                self.worker_idx,
                i,
                key,
                "".join(traceback.format_exception(exc)),
            )
        if self.env_errors[i] + 1 > self.cfg.max_env_errors:
            raise RuntimeError(
                f"env {i} of worker {self.worker_idx} failed {self.env_errors[i] + 1} times in a row "
                f"(--max_env_errors={self.cfg.max_env_errors}); last error: {key}"
            ) from exc
        try:
            self.envs[i].close()
        except Exception:  # the broken env may not even close; it is replaced anyway
            pass
        first_env = (self.worker_idx * self.cfg.worker_num_splits + self.split_idx) * self.num_envs
        self.envs[i] = self.env_fn(first_env + i)
        obs, _ = self.envs[i].reset()
        return obs

    def _finish_rollout(self) -> list[Any]:
        slots = slice(self.first, self.first + self.num_envs)
        T = self.cfg.rollout
        self.next_obs = self.buf["obs"][slots, T].copy()
        self.next_rnn = self.buf["rnn_states"][slots, T].copy()
        if self.at_learner is not None:
            self.at_learner[self._group_key(self.group)] = 1  # ownership moves with the message below
        ready = TrajectoryReady(self.policy_id, self.worker_idx, self.split_idx, self.group, self.first, self.num_envs)
        return [ready, *self._start_rollout()]

    def on_slots_released(self, group_idx: int) -> list[Any]:
        if group_idx in self.free_groups or (group_idx == self.group and not self.is_parked):
            return []  # a restarted worker already took it as free
        self.free_groups.append(group_idx)
        return self._start_rollout() if self.is_parked else []

    # --- bookkeeping --------------------------------------------------------------------------------
    def _shape_rewards(self, rewards: np.ndarray) -> np.ndarray:
        if self.cfg.reward_scale != 1.0:
            rewards = rewards * self.cfg.reward_scale
        if self.cfg.reward_clip > 0:
            rewards = np.clip(rewards, -self.cfg.reward_clip, self.cfg.reward_clip)
        return rewards

    def _record_episodes(
        self, rewards: np.ndarray, dones: np.ndarray, trials: dict[int, dict], failed: list[int]
    ) -> None:
        self.ep_returns += rewards
        self.ep_lengths += 1
        if dones.any():
            for i in np.flatnonzero(dones):
                if int(i) not in failed:  # an episode cut by an env error is not a result
                    self.finished.append((float(self.ep_returns[i]), int(self.ep_lengths[i]), trials.get(int(i))))
            self.ep_returns[dones > 0] = 0.0
            self.ep_lengths[dones > 0] = 0

    def pop_finished(self) -> list[tuple[float, int, dict | None]]:
        finished, self.finished = self.finished, []
        return finished

    def close(self) -> None:
        for env in self.envs:
            env.close()
