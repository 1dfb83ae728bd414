"""--actor_inference: an actor worker answers its own splits' requests with its own policy-worker components
(no queue, no policy worker process), each env through its own policy's published weights; recurrent models too,
each env acting from the state its previous step handed on (zero after its episode ended)."""

from __future__ import annotations

from dataclasses import replace

import gymnasium as gym
import numpy as np
import pytest
import torch

from appo.config.cfg import Cfg
from appo.config.derive import derive
from appo.models.numpy_twins import numpy_description
from appo.models.registry import make_model
from appo.protocol.buffers import allocate_control, allocate_trajectories, numpy_views, rnn_state_size
from appo.protocol.messages import InferenceRequest, TrajectoryReady
from appo.protocol.param_sync import ParamStore
from appo.sampling.actor_worker import ActorWorker
from appo.sampling.inference import make_numpy_inference
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


def torch_act(model, obs: np.ndarray, states: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The torch model's values [B] and next states [B, S] for obs [B, ...] and states [B, S] (S = 1, a
    placeholder, without a core; the states come back as given)."""
    with torch.no_grad():
        out = model.act(torch.from_numpy(obs), torch.from_numpy(states))
    return out.values.numpy(), out.rnn_states.numpy()


def run_actor(
    num_policies: int, shared: bool, rnn_type: str | None = None, episode_steps: int = 0, numpy_only: bool = False
) -> None:
    """Two rollouts of an actor worker's two splits of 4 CartPole envs, acting in the worker: every env's written
    value (and, with `rnn_type`, next state) is its own policy's torch model's on the inputs in the buffers, and
    each step's input state is what the env's previous step handed on, or zero after its episode (cut at most
    `episode_steps` long) ended, within a rollout and across into the next rollout's slot group. `numpy_only`: the
    actor's components are what an actor worker process runs (NumpyInference over numpy arrays and ParamViews,
    from the model's description), not torch policy-worker components."""
    cfg = replace(split_cfg(num_policies, shared), worker_num_splits=2)  # two splits of 4 envs
    if rnn_type is not None:
        cfg = replace(cfg, use_rnn=True, rnn_type=rnn_type, rnn_size=8, max_episode_steps=episode_steps)
    d = derive(cfg)
    bufs, control = allocate_trajectories(cfg, d, *SPACES), allocate_control(cfg, d)
    views = numpy_views(bufs)
    versions = [10 * (p + 1) for p in range(num_policies)]
    stores = published_stores(cfg, versions)
    if numpy_only:
        description = numpy_description(make_model(cfg, *SPACES))
        params = [store.numpy_views_here() for store in stores]
        inference = make_numpy_inference(cfg, views, params, description, numpy_views(control), stream=1000)
        actor = ActorWorker(cfg, d, 0, views, numpy_views(control), 0, inference)
        models = {p: make_model(cfg, *SPACES) for p in range(num_policies)}
        assert [store.pull(models[p]) for p, store in enumerate(stores)] == versions
    else:
        inference = make_policy_workers(cfg, d, bufs, stores, SPACES, "cpu", control, stream=1000)
        actor = ActorWorker(cfg, d, 0, bufs, control, 0, inference)
        models = {p: m for w in inference for p, m in zip(w.policies, w.models, strict=True)}
    assert all(f is not None for w in inference for f in w.fast), "every policy acts in numpy"
    assert all(w.stack is not None for w in inference if len(w.policies) > 1), "a population in one stacked pass"
    try:
        out = actor.keep_local(actor.init())
        assert not any(type(m) is InferenceRequest for m in out), "requests must stay in the worker"
        assert {r.split_idx for r in actor.pending} == {0, 1}
        trajectories = []
        assert d.slot_groups_per_split >= 3  # two rollouts and the start of a third find free groups
        carried = {split: np.zeros((4, rnn_state_size(cfg)), np.float32) for split in (0, 1)}
        resets = 0
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
                if rnn_type is not None:
                    # The state each env acted from: its previous step's next state, zero after an episode end.
                    np.testing.assert_array_equal(views["rnn_states"][slots, t], carried[split])
                for e, p in enumerate(policies):
                    states = views["rnn_states"][slots[e : e + 1], t]
                    values, nxt = torch_act(models[int(p)], views["obs"][slots[e : e + 1], t], states)
                    assert abs(views["values"][slots[e], t] - values[0]) < 1e-5
                    if rnn_type is None:
                        continue
                    written = views["rnn_states"][slots[e], t + 1]
                    if views["dones"][slots[e], t] == 0:
                        np.testing.assert_allclose(written, nxt[0], rtol=0, atol=1e-5)
                        carried[split][e] = written
                        continue
                    resets += 1
                    carried[split][e] = 0.0
                    # The env runner's reset came after the inference write and won. Only an episode cut at the
                    # rollout's end because the env's policy changes keeps the state there (to bootstrap from).
                    if runner.env_policy[e] == p or t < cfg.rollout - 1:
                        np.testing.assert_array_equal(written, 0.0)
            trajectories += [m for m in out if type(m) is TrajectoryReady]
            assert {r.split_idx for r in actor.pending} == {0, 1}
        # Both rollouts of both splits went to the learners, and only they.
        assert {(m.split_idx, m.group_idx) for m in trajectories} == {(0, 0), (0, 1), (1, 0), (1, 1)}
        if rnn_type is not None:
            assert resets >= 8 and np.abs(views["rnn_states"]).max() > 0.05  # resets and states in play
    finally:
        actor.close()


# numpy_only: as an actor worker process acts (no torch); else with torch policy-worker components (serial mode).
NUMPY_ONLY = pytest.mark.parametrize("numpy_only", [True, False], ids=["numpy_only", "torch_components"])


@NUMPY_ONLY
def test_an_actor_acts_for_its_own_envs(numpy_only: bool):
    run_actor(1, shared=False, numpy_only=numpy_only)


@NUMPY_ONLY
def test_an_actor_acts_for_a_population_with_each_envs_own_policy(numpy_only: bool):
    run_actor(3, shared=True, numpy_only=numpy_only)
    run_actor(2, shared=False, numpy_only=numpy_only)


@NUMPY_ONLY
def test_a_recurrent_actor_acts_for_its_own_envs(numpy_only: bool):
    run_actor(1, shared=False, rnn_type="gru", episode_steps=3, numpy_only=numpy_only)  # resets inside rollouts
    run_actor(1, shared=False, rnn_type="lstm", episode_steps=4, numpy_only=numpy_only)  # resets at the last steps


@NUMPY_ONLY
def test_a_recurrent_actor_acts_for_a_population_with_each_envs_own_policy(numpy_only: bool):
    run_actor(2, shared=True, rnn_type="gru", episode_steps=3, numpy_only=numpy_only)  # one stacked pass
    run_actor(2, shared=False, rnn_type="gru", episode_steps=4, numpy_only=numpy_only)  # one pass per policy


def test_acting_in_actors_is_for_numpy_models():
    assert actors_act(Cfg())
    assert actors_act(Cfg(use_rnn=True)) and actors_act(Cfg(use_rnn=True, rnn_type="lstm"))
    assert not actors_act(Cfg(actor_inference=False))
    assert not actors_act(Cfg(use_rnn=True, actor_inference=False))
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
