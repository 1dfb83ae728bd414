"""A PBT copy refills the replaced policy's self-play pool with its source's snapshots, taken at the same multiples
of --selfplay_snapshot_every as its own: slots get other weights under the versions they held. The inference
components (appo/sampling/inference.py: policy workers with torch models and numpy passes, actor workers acting in
numpy over ParamViews, a population's stacked pass) must act with the new weights of every weight set, told by the
stores' publish stamps (appo/protocol/param_sync.py), not keep the replaced ones because the version is unchanged.
And the pool's spread keep goes on after a copy as its source would have (appo/learning/snapshot_pool.py orders
snapshots by arrival): the copied versions lie above the replaced learner's own, which ordering by version took for
older snapshots than the ones it takes next."""

from __future__ import annotations

import numpy as np
import torch

from appo.config.cfg import Cfg
from appo.config.derive import derive
from appo.envs.multi_agent.multi_agent import AgentEnv
from appo.envs.multi_agent.paddle_duel import PaddleDuelEnv
from appo.learning.snapshot_pool import SnapshotPool, attach_snapshots
from appo.models.numpy_twins import numpy_description
from appo.models.registry import make_model
from appo.protocol.buffers import allocate_control, allocate_trajectories
from appo.protocol.param_sync import ParamStore
from appo.sampling.inference import Inference, make_numpy_inference
from appo.sampling.policy_worker import make_policy_workers
from tests.unit.test_snapshot_pool import reseed, spread_reference, state_bytes

POOL, EVERY = 2, 5
SPACE = AgentEnv(PaddleDuelEnv(), "paddle_duel")
SPACES = (SPACE.observation_space, SPACE.action_space)


def small_model(cfg: Cfg, seed: int) -> torch.nn.Module:
    """The run's model for paddle_duel, every entry of its state (normalisers included) drawn from `seed`."""
    model = make_model(cfg, *SPACES)
    reseed(model, seed)
    return model


def population(**overrides) -> tuple[Cfg, list[ParamStore], list[SnapshotPool], dict, dict]:
    """Two policies with a pool of POOL each over shared stores, as a run lays them out: (cfg, the weight sets,
    the pools, trajectory buffers, control tables)."""
    flags = dict(env="paddle_duel", num_policies=2, num_workers=1, num_envs_per_worker=2, worker_num_splits=1)
    flags |= dict(rollout=8, batch_size=32, selfplay_pool=POOL, selfplay_snapshot_every=EVERY)
    cfg = Cfg(**(flags | overrides))
    d = derive(cfg, agents_per_env=2, multi_agent=True)
    template = make_model(cfg, *SPACES)
    stores = [ParamStore(template) for _ in range(cfg.num_policies)]
    weight_sets = stores + attach_snapshots(cfg, stores, template)
    buffers, control = allocate_trajectories(cfg, d, *SPACES), allocate_control(cfg, d)
    pools = [SnapshotPool(cfg, p, stores[p].snapshots, control["snapshot_versions"]) for p in range(2)]
    return cfg, weight_sets, pools, buffers, control


def acting_components(cfg: Cfg, weight_sets: list[ParamStore], buffers: dict, control: dict) -> list[Inference]:
    """What acts in a run: a policy worker (torch models and their numpy passes) and an actor worker's numpy
    component over the stores' ParamViews, each serving every weight set with a population's stacked pass."""
    d = derive(cfg, agents_per_env=2, multi_agent=True)
    (worker,) = make_policy_workers(cfg, d, buffers, weight_sets, SPACES, "cpu", control)
    views = [store.numpy_views_here() for store in weight_sets]
    description = numpy_description(make_model(cfg, *SPACES))
    (numpy_acting,) = make_numpy_inference(cfg, buffers, views, description, control)
    assert worker.stack is not None and numpy_acting.stack is not None
    return [worker, numpy_acting]


def values(component: Inference, k: int, obs: np.ndarray) -> list[np.ndarray]:
    """The values weight set `k` gives `obs` in `component`: its own pass, and the stacked pass of the population."""
    own = np.asarray(component.act(k, obs, None)[2])
    stacked = np.asarray(component.stack.act(obs, np.full(len(obs), k), None)[2])
    return [own, stacked]


def assert_acting_with_the_stores(components: list[Inference], weight_sets: list[ParamStore], run: tuple) -> None:
    """Every weight set acts in every component as in fresh components, loaded from the stores now; `run`: the
    cfg, buffers and control tables."""
    cfg, buffers, control = run
    fresh = acting_components(cfg, weight_sets, buffers, control)
    obs = np.random.default_rng(0).uniform(-1.0, 1.0, (6, *SPACES[0].shape)).astype(np.float32)
    for old, new in zip(components, fresh, strict=True):
        new.maybe_pull_weights()
        for k, store in enumerate(weight_sets):
            assert old.versions[k] == store.current_version(), (type(old).__name__, k)
            for got, want in zip(values(old, k, obs), values(new, k, obs), strict=True):
                np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6, err_msg=f"{type(old).__name__} set {k}")
    worker = components[0]
    for k, store in enumerate(weight_sets):  # the policy worker's torch models too, bit for bit
        assert state_bytes(worker.models[k].state_dict()) == state_bytes(store.state), f"policy worker, set {k}"


def test_a_pool_refilled_under_the_versions_its_slots_held_acts_with_the_new_weights() -> None:
    cfg, weight_sets, pools, buffers, control = population()
    components = acting_components(cfg, weight_sets, buffers, control)
    stores = weight_sets[: cfg.num_policies]
    # Both learners train to version 2 * EVERY, each with its own weights, snapshotting at EVERY and 2 * EVERY.
    models = [small_model(cfg, 100), small_model(cfg, 200)]
    for version in range(1, 2 * EVERY + 1):
        for p, (model, pool) in enumerate(zip(models, pools, strict=True)):
            reseed(model, 1000 * p + version)
            stores[p].publish(model, version)
            pool.after_publish(model, version)
    assert control["snapshot_versions"].tolist() == [[EVERY, 2 * EVERY]] * 2
    for component in components:
        component.maybe_pull_weights()  # the start of every batch of requests
    assert_acting_with_the_stores(components, weight_sets, (cfg, buffers, control))
    replaced = [state_bytes(store.state) for store in pools[1].stores]

    # PBT: policy 1 becomes a copy of policy 0, pool included (Learner.load_policy), at a version of its own.
    pools[1].load_state_dict(pools[0].state_dict(), small_model(cfg, 3))
    stores[1].publish(models[0], 2 * EVERY + cfg.max_policy_lag + 1)
    assert control["snapshot_versions"].tolist() == [[EVERY, 2 * EVERY]] * 2, "the same versions in the slots"
    assert [state_bytes(s.state) for s in pools[1].stores] == [state_bytes(s.state) for s in pools[0].stores]
    assert all(state_bytes(s.state) != old for s, old in zip(pools[1].stores, replaced, strict=True))
    for component in components:
        component.maybe_pull_weights()
    assert_acting_with_the_stores(components, weight_sets, (cfg, buffers, control))


def test_an_emptied_slot_is_a_publish_that_acting_sees() -> None:
    store = ParamStore(small_model(Cfg(env="paddle_duel"), 1))
    store.publish(small_model(Cfg(env="paddle_duel"), 2), EVERY)
    stamp = store.current_stamp()
    views = store.numpy_views_here()
    store.clear()
    assert store.current_version() == 0 and views.current_version() == 0
    assert store.current_stamp() == views.current_stamp() == stamp + 2


def snapshots_into(pool: SnapshotPool, versions: list[int], seed: int) -> list[int]:
    """Take a snapshot at each of `versions`; returns the slot each went to."""
    model = small_model(Cfg(env="paddle_duel"), 0)
    slots = []
    for version in versions:
        reseed(model, seed + version)
        before = [state_bytes(s.state) for s in pool.stores]
        pool.after_publish(model, version)
        (slot,) = [i for i, s in enumerate(pool.stores) if state_bytes(s.state) != before[i]]
        slots.append(slot)
    return slots


def test_a_spread_pool_copied_by_pbt_goes_on_as_its_source_would_have() -> None:
    """The source has taken 40 snapshots; the target, at a lower version of its own, takes its source's pool and
    goes on snapshotting at its versions: it replaces the slots its source would have (snapshots ordered by
    arrival), so its pool stays spread over the lineage, from the very first snapshot on."""
    cfg, _, pools, _, control = population(selfplay_pool=4, selfplay_pool_keep="spread")
    source, target = pools
    snapshots_into(source, [n * EVERY for n in range(1, 41)], seed=0)
    assert sorted(s.current_version() for s in source.stores) == [EVERY * n for n in (1, 17, 33, 40)]
    snapshots_into(target, [n * EVERY for n in range(1, 13)], seed=10_000)
    state = source.state_dict()
    target.load_state_dict(state, small_model(cfg, 3))
    mine = [(13 + i) * EVERY for i in range(19)]  # the target's versions from the copy on: below the copied 200
    theirs = [(41 + i) * EVERY for i in range(19)]
    slots = snapshots_into(source, theirs, seed=0)
    assert snapshots_into(target, mine, seed=20_000) == slots
    renamed = dict(zip(theirs, mine, strict=True))
    assert [s.current_version() for s in target.stores] == [
        renamed.get(s.current_version(), s.current_version()) for s in source.stores
    ]
    assert control["snapshot_versions"][1].tolist() == [s.current_version() for s in target.stores]
    assert sorted(s.current_version() for s in source.stores) == spread_reference(4, 59)
    held = [s.current_version() for s in target.stores]
    assert EVERY in held and mine[-1] in held, held  # the lineage's first snapshot and the newest
    # A pool saved before pools kept their order of arrival goes on as it would have.
    legacy = SnapshotPool(cfg, 1, [ParamStore(small_model(cfg, 0)) for _ in range(4)], None)
    legacy.load_state_dict({k: v for k, v in state.items() if k != "arrivals"}, small_model(cfg, 3))
    assert snapshots_into(legacy, theirs, seed=0) == slots
    # Resumed from its checkpoint state, the copied pool goes on choosing the same slots.
    resumed = SnapshotPool(cfg, 1, [ParamStore(small_model(cfg, 0)) for _ in range(4)], None)
    resumed.load_state_dict(target.state_dict(), small_model(cfg, 3))
    more = [(32 + i) * EVERY for i in range(8)]
    assert snapshots_into(resumed, more, seed=0) == snapshots_into(target, more, seed=0)
    assert torch.equal(control["snapshot_versions"][0], torch.tensor([s.current_version() for s in source.stores]))
