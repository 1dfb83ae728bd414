"""--actor_inference: an actor worker answers its own splits' requests with its own policy-worker components
(no queue, no policy worker process), each env through its own policy's published weights."""

from __future__ import annotations

from dataclasses import replace

import gymnasium as gym
import numpy as np
import torch

from appo.buffers import allocate_control, allocate_trajectories, numpy_views
from appo.cfg import Cfg, derive
from appo.learning.param_sync import ParamStore
from appo.messages import InferenceRequest, TrajectoryReady
from appo.model import make_model
from appo.sampling.actor_worker import ActorWorker
from appo.sampling.policy_worker import PolicyWorker, actors_act, make_policy_workers
from tests.unit.test_population import split_cfg

SPACES = (gym.spaces.Box(-np.inf, np.inf, (4,), np.float32), gym.spaces.Discrete(2))


def published_stores(cfg: Cfg, versions: list[int]) -> list[ParamStore]:
    stores = []
    for version in versions:
        store = ParamStore(make_model(cfg, *SPACES))
        store.publish(make_model(cfg, *SPACES), version)  # weights other than the store's initial ones
        stores.append(store)
    return stores


def values_of(model, obs: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return model.value_head(model.encoder(model.normalize_obs(torch.from_numpy(obs)))).squeeze(-1).numpy()


def run_actor(num_policies: int, shared: bool) -> None:
    cfg = replace(split_cfg(num_policies, shared), worker_num_splits=2)  # two splits of 4 envs
    d = derive(cfg)
    bufs, control = allocate_trajectories(cfg, d, *SPACES), allocate_control(cfg, d)
    views = numpy_views(bufs)
    versions = [10 * (p + 1) for p in range(num_policies)]
    stores = published_stores(cfg, versions)
    inference = make_policy_workers(cfg, d, bufs, stores, SPACES, "cpu", control, stream=1000)
    actor = ActorWorker(cfg, d, 0, bufs, control, 0, inference)
    models = {p: m for w in inference for p, m in zip(w.policies, w.models, strict=True)}
    try:
        out = actor.keep_local(actor.init())
        assert not any(type(m) is InferenceRequest for m in out), "requests must stay in the worker"
        assert {r.split_idx for r in actor.pending} == {0, 1}
        trajectories = []
        assert d.slot_groups_per_split >= 3  # two rollouts and the start of a third find free groups
        for _ in range(2 * cfg.rollout):
            asked = list(actor.pending)
            acting = [r.env_policy.copy() if num_policies > 1 else np.zeros(r.num_envs, int) for r in actor.runners]
            out = actor.act_locally()
            assert not any(type(m) is InferenceRequest for m in out)
            for split in (0, 1):  # both splits act and step every round, and ask again
                runner = actor.runners[split]
                reqs = [r for r in asked if r.split_idx == split]
                slots = reqs[0].first_slot + np.arange(runner.num_envs)
                t = reqs[0].t
                policies = acting[split]
                assert views["policy_versions"][slots, t].tolist() == [versions[p] for p in policies]
                for e, p in enumerate(policies):
                    expected = values_of(models[int(p)], views["obs"][slots[e : e + 1], t])
                    assert abs(views["values"][slots[e], t] - expected[0]) < 1e-4
            trajectories += [m for m in out if type(m) is TrajectoryReady]
            assert {r.split_idx for r in actor.pending} == {0, 1}
        # Both rollouts of both splits went to the learners, and only they.
        assert {(m.split_idx, m.group_idx) for m in trajectories} == {(0, 0), (0, 1), (1, 0), (1, 1)}
    finally:
        actor.close()


def test_an_actor_acts_for_its_own_envs():
    run_actor(1, shared=False)


def test_an_actor_acts_for_a_population_with_each_envs_own_policy():
    run_actor(3, shared=True)
    run_actor(2, shared=False)


def test_acting_in_actors_is_for_feed_forward_numpy_models_only():
    assert actors_act(Cfg())
    assert not actors_act(Cfg(actor_inference=False))
    assert not actors_act(Cfg(use_rnn=True))
    assert not actors_act(Cfg(numpy_inference=False))
    assert not actors_act(Cfg(serial_mode=True))


def test_each_instance_draws_its_own_noise():
    """Actor workers and policy workers sample from different random streams, not the same one."""
    cfg = Cfg(env="Pendulum-v1")
    spaces = (gym.spaces.Box(-np.inf, np.inf, (3,), np.float32), gym.spaces.Box(-2, 2, (1,), np.float32))
    d = derive(cfg)
    bufs = allocate_trajectories(cfg, d, *spaces)
    store = ParamStore(make_model(cfg, *spaces))
    obs = np.zeros((8, 3), dtype=np.float32)
    actions = []
    for stream in (0, 1, 1000):
        worker = PolicyWorker(cfg, d, 0, bufs, store, spaces, "cpu", stream=stream)
        worker.maybe_pull_weights()
        actions.append(worker.fast[0].act(obs)[0])
    assert not np.allclose(actions[0], actions[1]) and not np.allclose(actions[1], actions[2])
