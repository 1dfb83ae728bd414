"""The envs of one split of an actor worker, as the env runner (appo/sampling/env_runner.py) steps them: one step of
every env, resets (with the control channel's task or command), recovery of an env that raised, and the
bookkeeping of finished episodes. `EnvRunner` adds the rollout protocol (slots, requests, hand-over) on top; the
state these methods use is set up in `EnvRunner.__init__`."""

from __future__ import annotations

import traceback
from typing import Any, NamedTuple

import numpy as np

from appo.envs.common.episode_end import EPISODE_CONTINUES, TRUE_OBJECTIVE
from appo.envs.meta.tasks import task_family
from appo.protocol.control import FREE, POLICY, TASK, WEIGHTS
from appo.utils.logging import log

# Distinct env errors already logged by this process: each is logged once with its traceback.
SEEN_ERRORS: set[str] = set()


class FinishedEpisode(NamedTuple):
    """An episode that ended, as its actor worker reports it (appo/sampling/actor_worker.py `reports`)."""

    episode_return: float
    length: int
    policy: int
    trial: dict | None = None  # a task env's ended trial (its info["trial"]: the episodes' returns and the task)
    true_objective: float | None = None  # info[TRUE_OBJECTIVE], where the env reports one (a win, say)
    agent: str | None = None  # multi-agent: the name of the agent that played it
    vs_pool: bool = False  # multi-agent self-play: its game was against a snapshot from the pool


class SplitEnvs:
    envs: list[Any]
    # Per env: its last episode end was one for learning only (info[EPISODE_CONTINUES]: Atari's lost life), the
    # reported episode (the game's score) runs on. Set by `_step_envs`, read by `_record_episodes`.
    continues: np.ndarray

    def _step_envs(
        self, actions: np.ndarray, t: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[int, dict], list[int]]:
        """Step every env (whose episode runs) once; write the next observations at t + 1. Returns rewards, dones,
        truncations, the last infos of the envs whose episode ended and the envs that failed."""
        n = self.num_envs
        rewards = np.empty(n, dtype=np.float32)
        dones = np.zeros(n, dtype=np.float32)
        truncs = np.zeros(n, dtype=np.float32)
        obs_out = self.buf["obs"]
        ends: dict[int, dict] = {}
        failed: list[int] = []
        episodic, alive = self.episodic, self.alive
        self.continues = np.zeros(n, dtype=bool)
        for i, env in enumerate(self.envs):
            if episodic and not alive[i]:  # its episode ended earlier in this rollout
                rewards[i] = 0.0
                obs_out[self.first + i, t + 1] = obs_out[self.first + i, t]
                continue
            try:
                obs, reward, terminated, truncated, info = env.step(actions[i])
                if terminated or truncated:
                    dones[i] = 1.0
                    truncs[i] = float(truncated and not terminated)
                    self.continues[i] = bool(info.get(EPISODE_CONTINUES, False))
                    ends[i] = info
                    if self.final_obs is not None:
                        self.final_obs[self.first + i, t] = obs  # before the reset replaces it
                    if self.episodic:
                        self.alive[i] = False
                    else:
                        obs = self._reset_env(i, info.get("trial"))
            except Exception as exc:  # a broken env must not take the worker (and the run) down
                obs, reward = self._recover_env(i, exc), 0.0
                dones[i] = truncs[i] = 1.0  # cut the episode; bootstrap it like a time limit
                failed.append(i)
                self.alive[i] = not self.episodic
                if self.final_obs is not None:  # the step never happened: no successor (replays drop the step,
                    self.final_obs[self.first + i, t] = self.missing_obs  # which step_failed marks)
            rewards[i] = reward
            obs_out[self.first + i, t + 1] = obs
        return rewards, dones, truncs, ends, failed

    def _recover_env(self, i: int, exc: Exception) -> np.ndarray:
        """Log the error (once per distinct one), rebuild the env and return its first observation (where the rebuild
        restarts several envs, `_rebuilt_with`: their first observations, stacked in that order). More than
        `max_env_errors` failures in a row of one env fail the run with a clear message."""
        self._note_env_error(i, exc)
        try:
            self.envs[i].close()
        except Exception:  # the broken env may not even close; it is replaced anyway
            pass
        self.envs[i] = self.env_fn(self.first_env + i)
        return self._reset_env(i)

    def _rebuilt_with(self, i: int) -> range:
        """The envs that the recovery of env `i` rebuilds, each into a new episode: env `i` alone."""
        return range(i, i + 1)

    def _note_env_error(self, i: int, exc: Exception) -> None:
        """Log env `i`'s error (once per distinct one, with its traceback); raise once it failed more than
        --max_env_errors times in a row."""
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

    def _reset_env(self, i: int, trial: dict | None = None, seed: int | None = None) -> np.ndarray:
        """Start env `i`'s next episode (trial) and return its first observation; every reset of the runner
        comes here. An env whose row of the control channel's command table is set starts from that command. A
        task env runs the task in its control-channel TASK cell where that is set, else the one
        its assigner picks, fed the return of the env's last finished trial (`trial`: the info["trial"] of the
        episode that just ended, if it did)."""
        assigner = self.task_assigners[i]
        if self.commands is not None and not np.isnan(self.commands[self.first_env + i, 0]):
            command = self.commands[self.first_env + i].tolist()  # the task schedule is none (verify_udrl)
            return self.envs[i].reset(seed=seed, options={"command": command})[0]
        if assigner is None:
            task = int(self.assignments[self.first_env + i, TASK]) if self.episode_tasks is not None else FREE
            if task != FREE:  # an episodic run's task, from the run's task table
                task_family(self.envs[i]).set_task(self.episode_tasks[task])
                self.env_task[i] = task
            return self.envs[i].reset(seed=seed)[0]
        if trial is not None:
            self.last_trial_return[i] = float(sum(trial["returns"]))
        task = int(self.assignments[self.first_env + i, TASK]) if self.assignments is not None else FREE
        if task == FREE:
            task = assigner.next(self.last_trial_return[i])
        self.env_task[i] = task
        return self.envs[i].reset(seed=seed, options={"task": assigner.tasks[task]})[0]

    def _shape_rewards(self, rewards: np.ndarray) -> np.ndarray:
        if self.cfg.reward_scale != 1.0:
            rewards = rewards * self.cfg.reward_scale
        if self.cfg.reward_clip > 0:
            rewards = np.clip(rewards, -self.cfg.reward_clip, self.cfg.reward_clip)
        return rewards

    def _record_episodes(
        self, rewards: np.ndarray, dones: np.ndarray, ends: dict[int, dict], failed: list[int]
    ) -> None:
        self.ep_returns += rewards
        self.ep_lengths += 1
        if dones.any():
            self.episode_count[dones > 0] += 1  # learning episodes (episode ids): a lost life ends one
            # What runs reports: whole episodes; one that continues past a learning end (a lost life) goes on.
            ended = (dones > 0) & ~self.continues
            for i in np.flatnonzero(ended):
                if int(i) not in failed:  # an episode cut by an env error is not a result
                    info = ends.get(int(i), {})
                    objective = info.get(TRUE_OBJECTIVE)
                    self.finished.append(
                        FinishedEpisode(
                            float(self.ep_returns[i]),
                            int(self.ep_lengths[i]),
                            int(self.env_policy[i]),
                            trial=info.get("trial"),
                            true_objective=None if objective is None else float(objective),
                        )
                    )
                self.next_policy[i], self.next_weights[i] = self._assigned(i, self._draw(i))
            self.ep_returns[ended] = 0.0
            self.ep_lengths[ended] = 0

    def _draw(self, i: int) -> int:
        """Env `i`'s policy for its next episode, as the population's draw has it (the control channel may override:
        `_assigned`). Between redraws an env keeps the policy it trains, its next episode's where one is set."""
        return self.policy_draw.next(self.rng, i, int(self.next_policy[i]))

    def _assigned(self, i: int, drawn_policy: int) -> tuple[int, int]:
        """Policy and weight set of env `i`'s next episode: the control channel's, where it sets them, else the
        drawn policy acting with its own weights."""
        policy, weights = drawn_policy, FREE
        if self.assignments is not None:
            row = self.assignments[self.first_env + i]
            policy = int(row[POLICY]) if row[POLICY] != FREE else drawn_policy
            weights = int(row[WEIGHTS])
        return policy, weights if weights != FREE else policy

    def close(self) -> None:
        for env in self.envs:
            env.close()
