"""enjoy.py on a MAML-TRPO run: one held-out task (--task: an index into the test split, or random), the policy
before adaptation, one adaptation (--num_inner_steps policy gradient steps on --fast_batch_size sampled episodes, as
in training), the policy after it. Shown in a window or recorded (appo/tools/evaluate.py's render plan and video
writer);
--max_num_episodes episodes are shown for each phase, mean actions unless --stochastic."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np

from appo.envs import env_kwargs, make_env
from appo.envs.meta.tasks import Task, task_family, task_split
from appo.maml.actors import ActorPool
from appo.maml.algorithm import MamlTrpo, flatten, make_policy, params_of
from appo.maml.buffers import allocate_buffers, episode_horizon
from appo.maml.driver import META_TEST_STREAM, episode_returns
from appo.models.numpy_twins import make_numpy_policy
from appo.protocol.buffers import obs_dtype
from appo.sampling.evaluator import run_episode


def choose_task(cfg: Any, tasks: list[Task]) -> int:
    if cfg.task == "random":
        return int(np.random.default_rng(cfg.seed).integers(len(tasks)))
    if int(cfg.task) >= len(tasks):
        raise ValueError(f"--task={cfg.task}: must be random or an index 0..{len(tasks) - 1} of the test split")
    return int(cfg.task)


def show(cfg: Any, env: Any, task: Task, policy: Any, on_frame: Callable[[], None] | None) -> list[float]:
    """--max_num_episodes episodes on the display env (the mode's actions unless --stochastic); their returns."""
    returns = []
    for i in range(cfg.max_num_episodes):
        task_family(env).set_task(task)
        returns.append(run_episode(env, None, 0, not cfg.stochastic, cfg.seed + i, on_frame, fast=policy)[0])
    return returns


def enjoy_maml(cfg: Any, state: dict[str, Any], render_mode: str | None, video: Any) -> None:
    """Adapt the checkpoint's meta-policy to one test task, showing the episodes before and after. The sampled
    episodes run on an in-process actor worker, as the meta-test's do (same seeds: the same episodes)."""
    env = make_env(cfg.env, max_episode_steps=cfg.max_episode_steps, render_mode=render_mode, **env_kwargs(cfg))
    train_tasks, test_tasks = task_split(env, cfg.num_train_tasks, cfg.num_test_tasks, cfg.seed)
    k = choose_task(cfg, test_tasks)
    model = make_policy(cfg, env.observation_space, env.action_space)
    model.load_state_dict(state["model"])
    learner = MamlTrpo(cfg, model)
    spaces, horizon = (env.observation_space, env.action_space), episode_horizon(env)
    obs_dim, act_dim = int(np.prod(env.observation_space.shape)), int(np.prod(env.action_space.shape))
    num_params = flatten(params_of(model)).numel()
    obs_type = obs_dtype(env.observation_space)
    buffers = allocate_buffers(1, cfg.fast_batch_size, horizon, obs_dim, act_dim, num_params, obs_type)
    one = dataclasses.replace(cfg, serial_mode=True, num_workers=1, worker_num_splits=1)
    pool = ActorPool(one, spaces, horizon, buffers, 1, len(train_tasks) + len(test_tasks))
    pool.start()
    on_frame = (lambda: video.add(env.render())) if video is not None else None
    print(f"test task {k}: {test_tasks[k]}", flush=True)
    try:
        params = {name: p.detach() for name, p in params_of(model).items()}
        for phase, step in (("before adaptation", 0), ("after adaptation", 1)):
            pool.publish(0, params)
            pool.sample(0, META_TEST_STREAM + step, 0, [len(train_tasks) + k], [0])
            episodes = buffers.episodes(0, 1)
            sampled = float(episode_returns(episodes).mean())
            shown = show(cfg, env, test_tasks[k], make_numpy_policy(pool.scratch, "cpu", cfg.seed), on_frame)
            print(
                f"{phase}: mean return {sampled:.1f} over {cfg.fast_batch_size} sampled episodes; shown: "
                + ", ".join(f"{r:.1f}" for r in shown),
                flush=True,
            )
            if step == 0:
                params = learner.adapted(episodes.task(0), params)
    finally:
        pool.close()
        env.close()
