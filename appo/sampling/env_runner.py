"""One split of an actor worker's envs: step them with the actions the policy worker wrote, write
rewards, dones and the next observations into the split's current slot group, and hand full groups to
the learner. Plain object, no queues: every method returns the messages to send.

A split is one half of double buffering: while the policy worker computes this split's actions, the
actor worker steps its other split.

With several policies (`--num_policies`), every env runs one policy per episode, drawn uniformly at random
when its episode ends. A split then asks each of its policies for the actions of that policy's envs and
steps once all replies are in; a full slot group goes to each policy's learner as that policy's envs. An
env's policy changes only between rollouts: an env whose episode ended and whose next policy differs is
reset at the rollout's end, its unfinished episode cut there like a time limit (the steps are kept for
training with a bootstrapped value, the cut episode is not reported as a result).

Task envs (--task_schedule): the runner, not the env wrapper, chooses the task of every trial, at every reset
of an env (`_reset_env`): the control channel's TASK cell where set (appo/protocol/control.py), else the env's own
task assigner (envs.make_task_assigner: the schedule its wrapper would have used, same rng stream). The task
goes to the wrapper as reset(options={"task": ...}); its index in the train tasks is kept in `env_task`.

Episodic runs (the traits' `episodic`: MAML): every rollout is one episode per env, started by the learner. The split
starts parked (its groups held); a SlotsReleased starts a rollout, which resets every env from its control-channel
row (task: an index into `envs.run_tasks`, weight set, episode seeds) and draws the rollout's `action_noise` from
the noise seed; an env whose episode ends sits out the rest of the rollout (reward 0, no reset), and the group is
handed over as soon as every episode has ended (dones mark each episode's last step).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np

from appo.config.cfg import Cfg
from appo.config.derive import Derived
from appo.envs import make_task_assigner, run_tasks
from appo.envs.meta.schedules import TaskAssigner
from appo.protocol import episode_ids
from appo.protocol.buffers import array_dtype, first_env, first_slot, group_index, missing_obs_value
from appo.protocol.control import FREE, PolicyDraw
from appo.protocol.messages import ActionsReady, InferenceRequest, TrajectoryReady
from appo.sampling.split_envs import FinishedEpisode, SplitEnvs


class EnvRunner(SplitEnvs):
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
        self.num_policies = cfg.num_policies
        self.first_env = first_env(cfg, derived, worker_idx, split_idx)  # global index of env 0
        self.env_policy = np.zeros(self.num_envs, dtype=np.int64)  # the policy each env runs in this rollout
        self.next_policy = np.zeros(self.num_envs, dtype=np.int64)  # ... and in the next one
        self.env_weights = np.zeros(self.num_envs, dtype=np.int64)  # the weight set acting for each env
        self.next_weights = np.zeros(self.num_envs, dtype=np.int64)
        self.policy_draw = PolicyDraw(cfg.num_policies, cfg.policy_redraw_every)
        # The control channel (appo/protocol/control.py): overrides of policy, task and weights per env, or None.
        self.assignments = control["assignments"] if control is not None and "assignments" in control else None
        # Its command table (reward-conditioned policies): each episode starts from its env's row, unless NaN.
        self.commands = control["commands"] if control is not None and "commands" in control else None
        # Episodic runs (see the module docstring): the seeds of each env's next episode, the task table the TASK
        # cells index, the rollout's action noise, and which envs' episodes are still running.
        self.episodic = cfg.traits.episodic
        self.seeds = control["episode_seeds"] if control is not None and "episode_seeds" in control else None
        self.episode_tasks: list[dict] | None = None
        self.noise = buffers.get("action_noise")
        self.alive = np.ones(self.num_envs, dtype=bool)
        self.continues = np.zeros(self.num_envs, dtype=bool)  # see SplitEnvs.continues
        self.episode_count = np.zeros(self.num_envs, dtype=np.int64)
        # Per-step fields the algorithm asked for (appo/protocol/buffers.py actor_fields) that this runner fills.
        self.extra_fields = [name for name in ("task_ids", "episode_ids", "weight_sets") if name in buffers]
        self.final_obs = buffers.get("final_obs")  # where episodes' last observations go (off-policy learners)
        self.step_failed = buffers.get("step_failed")  # with it: 1.0 where the step never happened (its env raised)
        self.obs_dtype = array_dtype(buffers["obs"])  # the observations' own (uint8 frames stay uint8)
        self.missing_obs = missing_obs_value(self.obs_dtype)  # final_obs of a step that never happened
        self.env_task = np.full(self.num_envs, -1, dtype=np.int64)  # index in the train tasks; -1: no tasks
        self.task_assigners: list[TaskAssigner | None] = [None] * self.num_envs  # per env; None: no tasks
        self.last_trial_return: list[float | None] = [None] * self.num_envs  # fed to the assigner
        self.policy_envs: dict[int, tuple[int, ...] | None] = {0: None}  # policy -> its envs (None: all)
        # Who is asked for actions: each policy for its envs, or (shared policy workers) one request for all.
        # Episodic runs act with many weight sets of one policy: one request, `slot_policy` says whose weights.
        # Self-play snapshots (--selfplay_pool) are weight sets too: one request, `slot_policy` says which acts.
        self.shared_inference = (
            (cfg.shared_policy_workers and cfg.num_policies > 1) or self.episodic or cfg.selfplay_pool > 0
        )
        self.control = control
        self.request_groups: dict[int, tuple[int, ...] | None] = {0: None}
        self.slot_policy = control["slot_policy"] if control is not None else None
        self.rng = np.random.default_rng(worker_idx * 7919 + split_idx)
        self.incarnation = incarnation
        self.at_learner = control["group_at_learner"] if control is not None else None  # [group, policy]
        groups = range(derived.slot_groups_per_split)
        # A restarted worker must not refill groups a learner still holds: they come back by SlotsReleased.
        self.holders: dict[int, set[int]] = {g: self._learners_holding(g) for g in groups}
        self.holders = {g: held for g, held in self.holders.items() if held}
        if self.episodic:  # its learner starts every rollout by a release
            self.holders = {g: {0} for g in groups}
        self.free_groups: deque[int] = deque(g for g in groups if g not in self.holders)
        # group -> the incarnation that handed it to the learners (groups a predecessor handed over: absent)
        self.handed_by: dict[int, int] = {}
        self.group = -1
        self.first = -1
        self.t = 0
        self.is_parked = False  # the rollout ended and no free slot group was there to continue into
        self.envs: list[gym.Env] = []
        self.ep_returns = np.zeros(self.num_envs)
        self.ep_lengths = np.zeros(self.num_envs, dtype=np.int64)
        self.finished: list[FinishedEpisode] = []
        self.next_obs: np.ndarray | None = None
        self.next_rnn: np.ndarray | None = None
        self.requested_at: float | None = None  # monotonic time of the outstanding InferenceRequests
        self.awaiting: set[int] = set()  # policies whose actions for this step are not in yet
        self.env_errors = np.zeros(self.num_envs, dtype=np.int64)  # consecutive failures per env

    def _group_key(self, group_idx: int) -> int:
        return group_index(self.cfg, self.derived, self.worker_idx, self.split_idx, group_idx)

    def _learners_holding(self, group_idx: int) -> set[int]:
        if self.at_learner is None:
            return set()
        return {int(p) for p in np.flatnonzero(self.at_learner[self._group_key(group_idx)])}

    # --- start --------------------------------------------------------------------------------------
    def init(self, seed: int) -> list[Any]:
        """Create and reset the envs; returns the first InferenceRequest."""
        self.envs = self._make_envs()
        self.task_assigners = [
            make_task_assigner(self.cfg, env, self.first_env + i, self.incarnation) for i, env in enumerate(self.envs)
        ]
        if self.episodic:
            self.episode_tasks = run_tasks(self.cfg, self.envs[0])
        self.rng = np.random.default_rng(seed)
        self.env_policy = self.policy_draw.initial(self.rng, self.num_envs)
        for i in range(self.num_envs):
            self.env_policy[i], self.env_weights[i] = self._assigned(i, int(self.env_policy[i]))
        self.next_policy, self.next_weights = self.env_policy.copy(), self.env_weights.copy()
        space = self.envs[0].action_space
        self.is_box = isinstance(space, gym.spaces.Box)
        if self.is_box:
            self.low, self.high = space.low.astype(np.float32), space.high.astype(np.float32)
        # The policy picks Discrete actions 0..n-1; a space that starts elsewhere (Discrete(n, start=k)) takes + k.
        self.action_start = int(space.start) if isinstance(space, gym.spaces.Discrete) else 0
        obs = [self._reset_env(i, seed=seed + i) for i in range(self.num_envs)]
        for i, env in enumerate(self.envs):
            env.action_space.seed(seed + i)
        self.next_obs = np.stack(obs).astype(self.obs_dtype)
        self.next_rnn = np.zeros(self.buf["rnn_states"].shape[2:], dtype=np.float32)
        return self._start_rollout()

    def _make_envs(self) -> list[Any]:
        return [self.env_fn(self.first_env + i) for i in range(self.num_envs)]

    def decorrelate(self, seconds: float) -> None:
        """Step with random actions for `seconds`, so envs of different workers are at different
        points of their episodes when collection starts (more independent samples per batch)."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            for i, env in enumerate(self.envs):
                obs, _, terminated, truncated, info = env.step(env.action_space.sample())
                if terminated or truncated:
                    obs = self._reset_env(i, info.get("trial"))
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
        if self.episodic:
            self._start_episodes()
        self.buf["obs"][slots, 0] = self.next_obs
        self.buf["rnn_states"][slots, 0] = self.next_rnn
        self.t = 0
        self.policy_envs = envs_by_policy(self.env_policy)
        if self.slot_policy is not None:
            self.slot_policy[slots] = self.env_weights  # whose weights act for each slot (shared policy workers)
        self.request_groups = {0: None} if self.shared_inference else envs_by_policy(self.env_weights)
        return self._requests()

    def _start_episodes(self) -> None:
        """Episodic runs: every env of the split starts an episode from its control-channel row."""
        assert self.next_obs is not None and self.next_rnn is not None
        for i in range(self.num_envs):
            self.env_policy[i], self.env_weights[i] = self._assigned(i, 0)
            env_seed, noise_seed = (
                (int(v) for v in self.seeds[self.first_env + i]) if self.seeds is not None else (-1, -1)
            )
            self.next_obs[i] = self._reset_env(i, seed=None if env_seed == FREE else env_seed)
            if self.noise is not None:
                rng = self.rng if noise_seed == FREE else np.random.default_rng(noise_seed)
                draw = rng.standard_normal if self.is_box else rng.standard_exponential  # Gumbel-max's, discrete
                self.noise[self.first + i] = draw(self.noise.shape[1:], dtype=np.float32)
        self.next_policy, self.next_weights = self.env_policy.copy(), self.env_weights.copy()
        self.next_rnn[:] = 0.0
        self.alive[:] = True
        self.ep_returns[:] = 0.0
        self.ep_lengths[:] = 0

    def _requests(self, policies: Any = None) -> list[InferenceRequest]:
        """One request per policy of this rollout (or per policy of `policies`): that policy's envs."""
        self.requested_at = time.monotonic()
        if policies is None:
            self.awaiting = set(self.request_groups)
        return [
            InferenceRequest(
                p,
                self.worker_idx,
                self.split_idx,
                self.first,
                self.num_envs if envs is None else len(envs),
                self.t,
                self.incarnation,
                envs,
            )
            for p, envs in self.request_groups.items()
            if policies is None or p in policies
        ]

    def is_reply(self, msg: ActionsReady) -> bool:
        """Whether `msg` answers a request outstanding now (not a stale or duplicate reply)."""
        return (
            self.requested_at is not None
            and msg.first_slot == self.first
            and msg.t == self.t
            and msg.incarnation == self.incarnation
            and msg.policy_id in self.awaiting
        )

    def resend_if_stale(self, now: float, timeout: float) -> list[Any]:
        """Ask again when a reply is overdue (its policy worker died with the request)."""
        if self.requested_at is not None and now - self.requested_at > timeout:
            return self._requests(set(self.awaiting))
        return []

    # --- the hot loop -------------------------------------------------------------------------------
    def on_actions(self, msg: ActionsReady) -> list[Any]:
        """Step every env of the split with its action; returns the messages this step produces."""
        if not self.is_reply(msg):
            return []
        self.awaiting.discard(msg.policy_id)
        if self.awaiting:
            return []  # another policy's envs of this split still wait for their actions
        self.requested_at = None
        buf, t, n = self.buf, self.t, self.num_envs
        slots = slice(self.first, self.first + n)
        actions = buf["actions"][slots, t]
        if self.is_box:
            # Clip only what the env sees: the learner needs the sampled action for its log-prob.
            actions = np.clip(actions, self.low, self.high)
        else:
            actions = actions[:, 0] + self.action_start if self.action_start else actions[:, 0]
        for name in self.extra_fields:  # before stepping: a reset below starts the next episode's task
            buf[name][slots, t] = self._field(name)
        rewards, dones, truncs, ends, failed = self._step_envs(actions, t)
        if failed or self.env_errors.any():
            ok = np.ones(n, dtype=bool)
            ok[failed] = False
            self.env_errors[~ok] += 1
            self.env_errors[ok] = 0
        self._record_episodes(rewards, dones, ends, failed)
        buf["rewards"][slots, t] = self._shape_rewards(rewards)
        buf["dones"][slots, t] = dones
        buf["truncated"][slots, t] = truncs
        if self.step_failed is not None:
            buf["step_failed"][slots, t] = np.isin(np.arange(n), failed).astype(np.float32)
        if dones.any():
            # A new episode starts from the zero recurrent state.
            buf["rnn_states"][slots, t + 1][dones > 0] = 0.0
        self.t = t + 1
        if self.t < self.cfg.rollout and (not self.episodic or self.alive.any()):
            return self._requests()
        return self._finish_rollout()

    def _finish_rollout(self) -> list[Any]:
        slots = slice(self.first, self.first + self.num_envs)
        T = self.cfg.rollout
        self.next_obs = self.buf["obs"][slots, T].copy()
        self.next_rnn = self.buf["rnn_states"][slots, T].copy()
        changed = (self.next_policy != self.env_policy) | (self.next_weights != self.env_weights)
        for i in np.flatnonzero(changed & (not self.episodic)):  # episodic runs reset every env at the next start
            self._cut_episode(int(i))
        ready = []
        for p, envs in self.policy_envs.items():
            if self.at_learner is not None:
                self.at_learner[self._group_key(self.group), p] = 1  # ownership moves with the message below
            num = self.num_envs if envs is None else len(envs)
            msg = TrajectoryReady(
                p, self.worker_idx, self.split_idx, self.group, self.first, num, envs, self.incarnation
            )
            ready.append(msg)
        self.holders[self.group] = set(self.policy_envs)
        self.handed_by[self.group] = self.incarnation
        self.env_policy, self.env_weights = self.next_policy.copy(), self.next_weights.copy()
        return [*ready, *self._start_rollout()]

    def _cut_episode(self, i: int) -> None:
        """Env `i` changes policy: end its episode at the rollout's last step as a time limit would (unless it
        ended there anyway) and start the next one from a reset, with the zero recurrent state. An episode that
        ended there on a lost life is a game that goes on: it is restarted too, so that no policy plays on (and is
        credited with) a game another one began. A reset that raises rebuilds the env, and with it every env the
        rebuild restarts (a vector env: the split's every env): each of them starts the next rollout anew."""
        ended = self.buf["dones"][self.first + i, self.cfg.rollout - 1] > 0
        if ended and not self.continues[i]:
            return  # the new episode starts with the new rollout already
        try:
            obs = self._reset_env(i)
        except Exception as exc:
            rebuilt = self._rebuilt_with(i)
            first_obs = np.reshape(self._recover_env(i, exc), (len(rebuilt), *self.next_obs.shape[1:]))
            for j, new_obs in zip(rebuilt, first_obs, strict=True):
                self._start_anew(j, new_obs)
            return
        self._start_anew(i, obs)

    def _start_anew(self, i: int, obs: np.ndarray) -> None:
        """Env `i` starts the next rollout with a new episode from `obs`: the one under way at the rollout's last
        step (if any) ends there as a time limit would, and is not reported."""
        slot, T = self.first + i, self.cfg.rollout
        if self.buf["dones"][slot, T - 1] == 0:
            self.buf["dones"][slot, T - 1] = 1.0
            self.buf["truncated"][slot, T - 1] = 1.0
            if self.final_obs is not None:  # the env was not reset there: the true next obs
                self.final_obs[slot, T - 1] = self.buf["obs"][slot, T]
        self.next_obs[i] = obs
        self.next_rnn[i] = 0.0
        self.ep_returns[i] = 0.0
        self.ep_lengths[i] = 0
        self.episode_count[i] += 1
        self.continues[i] = False

    def on_slots_released(self, group_idx: int, policy_id: int = 0, incarnation: int | None = None) -> list[Any]:
        holders = self.holders.get(group_idx)
        if holders is None:
            return []  # a restarted worker already took it as free
        if incarnation is not None and self.handed_by.get(group_idx, incarnation) != incarnation:
            return []  # left in the inbox by a predecessor: this worker has handed the group over since
        holders.discard(policy_id)
        if holders:
            return []  # another policy's learner still holds part of the group
        del self.holders[group_idx]
        self.handed_by.pop(group_idx, None)
        if group_idx in self.free_groups or (group_idx == self.group and not self.is_parked):
            return []
        self.free_groups.append(group_idx)
        return self._start_rollout() if self.is_parked else []

    # --- bookkeeping --------------------------------------------------------------------------------
    def _field(self, name: str) -> np.ndarray:
        """This step's value of an algorithm's per-step field for every env of the split."""
        if name == "task_ids":
            return self.env_task
        if name == "weight_sets":
            return self.env_weights
        return episode_ids.pack(
            self.first_env + np.arange(self.num_envs, dtype=np.int64), self.incarnation, self.episode_count
        )

    def pop_finished(self) -> list[FinishedEpisode]:
        finished, self.finished = self.finished, []
        return finished


def envs_by_policy(env_policy: np.ndarray) -> dict[int, tuple[int, ...] | None]:
    """policy -> the envs (positions in the split) it runs; None when it runs them all (the common case)."""
    policies = np.unique(env_policy)
    if len(policies) == 1:
        return {int(policies[0]): None}
    return {int(p): tuple(int(i) for i in np.flatnonzero(env_policy == p)) for p in policies}
