"""A restarted actor worker draws new random streams: its envs' reset seeds, its task order and its action noise
differ from its predecessor's (which repeated them after every restart), while a first start keeps its seeds, so
runs without restarts stay as reproducible as before. A resumed run's workers draw streams of their own too (its
policy draws included), the same for a resume from the same checkpoints."""

from __future__ import annotations

import dataclasses

import numpy as np

from appo.config.cfg import merge_cfg
from appo.config.derive import derive
from appo.envs import make_run_env
from appo.protocol.buffers import allocate_control, allocate_trajectories
from appo.sampling.actor_worker import ActorWorker, acting_stream
from appo.utils.seeding import incarnation_seed

FLAGS = {"env": "navigation2d", "task_schedule": "per_episode", "num_workers": 1, "num_envs_per_worker": 8}
FLAGS |= {"worker_num_splits": 1, "rollout": 8, "batch_size": 64, "device": "cpu", "seed": 4}


def started(incarnation: int, resumed_steps: int = 0) -> dict:
    """What an actor worker's `incarnation`-th start draws (in a run resumed at `resumed_steps`): each env's
    generator as its reset seeded it, each env's first task, and the worker's next random numbers (policy draws,
    action noise of episodic runs)."""
    cfg = merge_cfg(dict(FLAGS), None)
    d = dataclasses.replace(derive(cfg), resumed_steps=resumed_steps)
    env = make_run_env(cfg)
    spaces = (env.observation_space, env.action_space)
    env.close()
    worker = ActorWorker(cfg, d, 0, allocate_trajectories(cfg, d, *spaces), allocate_control(cfg, d), incarnation)
    try:
        worker.init()
        (runner,) = worker.runners
        return {
            "env_seeds": np.array([e.unwrapped.np_random.random() for e in runner.envs]),
            "env_task": np.asarray(runner.env_task).copy(),
            "rng": runner.rng.random(4),
        }
    finally:
        worker.close()


def test_a_restarted_worker_does_not_replay_its_predecessors_streams() -> None:
    first, again, restarted = started(0), started(0), started(1)
    for key in ("env_seeds", "env_task", "rng"):
        np.testing.assert_array_equal(first[key], again[key], err_msg=f"{key}: a first start must be reproducible")
    assert not np.array_equal(first["env_seeds"], restarted["env_seeds"]), (
        "the restarted worker reset its envs with old seeds"
    )
    assert not np.array_equal(first["rng"], restarted["rng"]), "the restarted worker replays old random draws"
    assert not np.array_equal(first["env_task"], restarted["env_task"]), "the restarted worker replays the task order"
    assert acting_stream(0, 0) != acting_stream(0, 1), "the restarted worker's action noise repeats"


def test_incarnation_seeds_differ_and_the_first_is_the_seed() -> None:
    assert incarnation_seed(123, 0) == 123
    seeds = {incarnation_seed(123, k) for k in range(1, 50)} | {incarnation_seed(124, k) for k in range(1, 50)}
    assert len(seeds) == 98


def test_a_resumed_run_draws_new_streams_and_the_same_for_the_same_checkpoints() -> None:
    first, resumed, again, later = started(0), started(0, 5000), started(0, 5000), started(0, 9000)
    for key in ("env_seeds", "env_task", "rng"):
        np.testing.assert_array_equal(resumed[key], again[key], err_msg=f"{key}: a resume must be reproducible")
    for other in (first, later):
        assert not np.array_equal(resumed["env_seeds"], other["env_seeds"]), "a resume replays env seeds"
        assert not np.array_equal(resumed["rng"], other["rng"]), "a resume replays the policy draws"
    assert incarnation_seed(123, 0, 0) == 123 and incarnation_seed(123, 1, 0) == incarnation_seed(123, 1)
    assert len({incarnation_seed(123, k, r) for k in range(3) for r in (0, 1, 5000)}) == 9


def sampled_actions(resumed_steps: int, numpy_process: bool) -> np.ndarray:
    """Actions a run's acting component samples for 64 fixed CartPole observations with fixed weights, in a run
    resumed at `resumed_steps`: an actor worker process acting for its own envs (`numpy_process`, the stream
    run_actor_worker gives it) or a policy worker (serial mode's and Ray actors' components)."""
    import torch

    from appo.models.numpy_twins import numpy_description
    from appo.models.registry import make_model
    from appo.protocol.param_sync import ParamStore
    from appo.sampling.inference import make_numpy_inference
    from appo.sampling.policy_worker import make_policy_workers

    cfg = merge_cfg({"env": "CartPole-v1", "numpy_inference": True, "seed": 3}, None)
    d = dataclasses.replace(derive(cfg), resumed_steps=resumed_steps)
    env = make_run_env(cfg)
    spaces = (env.observation_space, env.action_space)
    env.close()
    torch.manual_seed(0)
    model = make_model(cfg, *spaces)
    store = ParamStore(model)
    store.publish(model, 1)
    buffers = allocate_trajectories(cfg, d, *spaces)
    if numpy_process:
        (acting,) = make_numpy_inference(
            cfg, buffers, [store.numpy_views_here()], numpy_description(model), None, acting_stream(0, 0, resumed_steps)
        )
    else:
        (acting,) = make_policy_workers(cfg, d, buffers, [store], spaces, "cpu", allocate_control(cfg, d))
    acting.maybe_pull_weights()
    obs = np.random.default_rng(0).normal(size=(64, 4)).astype(np.float32)
    return np.asarray(acting.act(0, obs, None)[0])


def test_a_resumed_run_does_not_replay_the_action_noise() -> None:
    for numpy_process in (True, False):
        first, again = sampled_actions(0, numpy_process), sampled_actions(0, numpy_process)
        resumed, resumed_again = sampled_actions(5000, numpy_process), sampled_actions(5000, numpy_process)
        np.testing.assert_array_equal(first, again, err_msg="a first start must draw reproducible actions")
        np.testing.assert_array_equal(resumed, resumed_again, err_msg="a resume must draw reproducible actions")
        assert not np.array_equal(first, resumed), f"a resume replays the action noise (numpy_process={numpy_process})"
