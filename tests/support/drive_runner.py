"""An actor worker's env runner (appo/sampling/env_runner.py and its vector and multi-agent kinds) on numpy buffers,
driven as its actor worker drives it: the test writes each step's actions where the policy would, and the learner
gives every slot group back at once."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np

from appo.config.cfg import Cfg
from appo.config.derive import derive
from appo.protocol.buffers import allocate_control, allocate_trajectories, numpy_views
from appo.protocol.messages import ActionsReady, InferenceRequest, TrajectoryReady
from appo.sampling.env_runner import EnvRunner


def make_runner(
    env_fn: Callable[[int], Any],
    obs_space: gym.Space,
    action_space: gym.Space,
    num_envs: int,
    rollout: int,
    runner: Callable[..., EnvRunner] = EnvRunner,
    agents_per_env: int = 0,
    **cfg: Any,
) -> tuple[EnvRunner, dict[str, np.ndarray]]:
    """A runner of one split of `num_envs` envs on one worker (games of `agents_per_env` agents, a row each, where
    that is set), and its buffers' numpy views."""
    cfg_ = Cfg(
        env="scripted",
        num_workers=1,
        num_envs_per_worker=num_envs,
        worker_num_splits=1,
        rollout=rollout,
        batch_size=num_envs * max(agents_per_env, 1) * rollout,
        **cfg,
    )
    derived = derive(cfg_, agents_per_env=agents_per_env, multi_agent=True) if agents_per_env else derive(cfg_)
    views = numpy_views(allocate_trajectories(cfg_, derived, obs_space, action_space))
    control = numpy_views(allocate_control(cfg_, derived))
    return runner(cfg_, derived, 0, 0, views, env_fn, control), views


def drive(
    runner: EnvRunner,
    views: dict[str, np.ndarray],
    steps: int,
    act: Callable[[int], np.ndarray],
    requests: list[Any] | None = None,
    before_step: Callable[[int], None] | None = None,
) -> list[Any]:
    """Step the runner `steps` times from `requests` (None: from `init`), the actions of step k `act(k)` (one per
    env, as the policy writes them: 0-based indices for Discrete spaces); `before_step(k)` runs first. Returns the
    requests outstanding at the end."""
    if requests is None:
        requests = runner.init(seed=0)
    for k in range(steps):
        if before_step is not None:
            before_step(k)
        out: list[Any] = []
        for r in requests:
            views["actions"][r.first_slot : r.first_slot + runner.num_envs, r.t, 0] = act(k)
        for r in requests:
            out += runner.on_actions(ActionsReady(0, 0, r.first_slot, r.t, 0, r.policy_id))
        requests = [m for m in out if isinstance(m, InferenceRequest)]
        for m in out:
            if isinstance(m, TrajectoryReady):
                requests += runner.on_slots_released(m.group_idx, m.policy_id, m.incarnation)
    return requests
