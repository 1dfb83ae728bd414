"""MAML-TRPO's episodes sampled on the engine's actor workers, in-process: a task family whose tasks change the
rewards, and the Hessian-vector-product helpers equal to the learner's own product bit for bit."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest
import torch

from appo.maml.algorithm import MamlTrpo, flatten, make_policy, params_of

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def serial_pool(cfg: Any, K: int, E: int, rows: int = 1) -> tuple[Any, Any, list[dict]]:
    """An in-process ActorPool (one actor worker, one split of E envs) and its episode buffers for K rows, over the
    run's task table (envs.run_tasks)."""
    from appo.envs import make_env, run_tasks
    from appo.maml.actors import ActorPool
    from appo.maml.buffers import allocate_buffers, episode_horizon

    env = make_env(cfg.env, max_episode_steps=cfg.max_episode_steps)
    spaces, T, tasks = (env.observation_space, env.action_space), episode_horizon(env), run_tasks(cfg, env)
    env.close()
    num_params = flatten(params_of(make_policy(cfg, *spaces))).numel()
    buffers = allocate_buffers(K, E, T, spaces[0].shape[0], spaces[1].shape[0], num_params)
    one = dataclasses.replace(cfg, serial_mode=True, num_workers=1, worker_num_splits=1, fast_batch_size=E)
    pool = ActorPool(one, spaces, T, buffers, 1 + K, len(tasks))
    pool.start()
    return pool, buffers, tasks


def sample_tasks(env: str, tasks: list[dict], T: int = 20) -> tuple[np.ndarray, np.ndarray]:
    """(rewards, actions) [tasks, E=2, T(, A)] of the same episodes (env seeds, action noise) of one fixed random
    policy, run on each task in turn on an in-process actor worker."""
    from appo.config.cfg import parse_cfg

    cfg = parse_cfg(["--algo=maml_trpo", f"--env={env}", f"--max_episode_steps={T}", "--maml_mlp_layers", "8"])
    pool, buffers, _ = serial_pool(cfg, 1, 2)
    torch.manual_seed(0)
    pool.publish(0, params_of(make_policy(cfg, *pool.spaces)))
    rewards, actions = [], []
    try:
        for task in tasks:
            pool.actors[0].runners[0].episode_tasks[0] = task  # row 0 of the actor's task table: this task
            pool.sample(0, 0, 0, [0], [0])
            rewards.append(buffers.rewards[0][0].numpy().copy())
            actions.append(buffers.actions[0][0].numpy().copy())
    finally:
        pool.close()
    return np.stack(rewards), np.stack(actions)


def test_navigation_tasks_differ() -> None:
    # Seed defect: a "meta-task" family whose parameter changed nothing. Here the goal changes every reward.
    rewards, actions = sample_tasks("navigation2d", [{"goal_x": 0.4, "goal_y": 0.4}, {"goal_x": -0.4, "goal_y": -0.4}])
    assert np.array_equal(actions[0], actions[1])  # same observations (from the origin), same noise
    assert np.abs(rewards[0] - rewards[1]).max() > 0.1


def test_hvp_helpers_equal_the_learners_bit_for_bit() -> None:
    # The driver averages the tasks' products that the helper processes computed (each for the rows it was sent);
    # whatever the split, the result must be the learner's own product, bit for bit (1 vs 4 workers, serial mode).
    # The episodes come from an in-process actor worker, as in a run.
    from appo.config.cfg import parse_cfg
    from appo.maml.algorithm import mean_in_order
    from appo.maml.hvp_pool import HvpHelper
    from appo.protocol.messages import HvpRequest

    cfg = parse_cfg(["--algo=maml_trpo", "--env=navigation2d", "--max_episode_steps=15", "--maml_mlp_layers", "8"])
    K, E = 3, 4
    pool, buffers, _ = serial_pool(cfg, K, E)
    torch.manual_seed(0)
    model = make_policy(cfg, *pool.spaces)
    learner = MamlTrpo(cfg, model)
    try:
        pool.publish(0, params_of(model))
        pool.sample(0, 0, 0, list(range(K)), [0] * K)
        train = buffers.episodes(0, K)
        assert (train.mask.sum(-1) > 0).all() and not torch.equal(train.rewards[0], train.rewards[1])
        for k in range(K):
            pool.publish(1 + k, learner.adapted(train.task(k)))
        pool.sample(1, 1, 0, list(range(K)), [1 + k for k in range(K)])
        valid = buffers.episodes(1, K)
    finally:
        pool.close()
    v = torch.randn(buffers.hvp_in.shape, generator=torch.Generator().manual_seed(1))
    expected = learner.kl_hvp(learner.task_batches(train, valid))(v)
    buffers.hvp_in.copy_(v)
    helper = HvpHelper(cfg, buffers, pool.spaces, pool.params[0])
    for rows in ((0, 2), (1,)):  # two helpers' shares
        helper.on_hvp(HvpRequest(0, 1, rows))
    assert torch.equal(mean_in_order(buffers.hvp_out[:K].clone()), expected)
