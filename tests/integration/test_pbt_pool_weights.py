"""A population with self-play pools, through a PBT exchange, acting with every weight set as its learner published
it. Two paddle_duel policies train, each snapshotting at the same multiples of --selfplay_snapshot_every, until
their pools hold a slot at the same version; the driver's CopyPolicy makes policy 1 a copy of policy 0, whose pool
refills policy 1's under versions the slots already held. From then on every weight set that acts at the version
its store holds must act with the weights in that store: the replaced pool's weights are gone from acting too.

Serial mode runs the run's own components in this process (SerialBackend: actor worker, policy worker and
learners, the policy worker's models read directly). The Ray backend runs the actor worker as a Ray actor, fed
by RayBackend's weight shipping, with the learners driven here as a learner process would (their batches, PBT
messages, releases); the actor's acting models are read inside it (`__ray_call__`)."""

from __future__ import annotations

import os
import queue
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from appo.config.cfg import Cfg, merge_cfg
from appo.config.derive import derive
from appo.envs import make_run_env
from appo.learning.learner import Learner
from appo.protocol.buffers import allocate_control, allocate_trajectories
from appo.protocol.control import weight_set_of
from appo.protocol.messages import CopyPolicy, Stop, TrajectoryReady
from appo.protocol.param_sync import ParamStore
from appo.protocol.wiring import close_all, send
from appo.utils.paths import checkpoint_dir
from tests.support.ray_cluster import TAG, RayWatch, needs_ray

POOL, EVERY = 2, 5


def population(train_dir: Path, **flags: Any) -> tuple[Cfg, Path, tuple, Any, dict, dict]:
    """A run of two paddle_duel policies with pools of POOL (one actor worker): cfg, its folder, spaces, derived,
    trajectory buffers and control tables, as the driver lays them out."""
    explicit = dict(env="paddle_duel", num_workers=1, num_envs_per_worker=4, rollout=16, batch_size=128)
    explicit |= dict(num_policies=2, selfplay_pool=POOL, selfplay_snapshot_every=EVERY, max_policy_lag=10)
    explicit |= dict(seed=3, device="cpu", train_dir=str(train_dir), experiment="pool_pbt", save_every_sec=1e9)
    cfg = merge_cfg(explicit | flags, None)
    env = make_run_env(cfg)
    spaces = (env.observation_space, env.action_space)
    derived = derive(cfg, int(env.num_agents), True)
    env.close()
    buffers, control = allocate_trajectories(cfg, derived, *spaces), allocate_control(cfg, derived)
    return cfg, train_dir / "pool_pbt", spaces, derived, buffers, control


def state_bytes(state: dict[str, Any]) -> dict[str, bytes]:
    return {name: torch.as_tensor(t).detach().cpu().numpy().tobytes() for name, t in state.items()}


def pools_meet(table: torch.Tensor) -> bool:
    """Both pools full, and a slot at the same version in both."""
    return bool((table > 0).all() and (table[0] == table[1]).any())


def until(step: Any, done: Any, what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, f"not within {timeout:g} s: {what}"
        step()


class Exchange:
    """Policy 1's pool just before the copy (versions and weights), for comparing with what acting does after it."""

    def __init__(self, cfg: Cfg, weight_sets: list[ParamStore]) -> None:
        self.cfg, self.weight_sets = cfg, weight_sets
        self.slots = [weight_set_of(cfg, 1, s) for s in range(POOL)]
        self.before = {k: (weight_sets[k].current_version(), state_bytes(weight_sets[k].state)) for k in self.slots}

    def check(self, exp_dir: Path, acting_versions: list[int], acting: list[dict[str, bytes]]) -> None:
        """Every weight set acting at its store's version acts with the store's weights; among them a slot of policy
        1's pool that its source's snapshot refilled under the version it held (the copy's own pool, in its file)."""
        copy = torch.load(
            checkpoint_dir(exp_dir, 0) / "pbt_snapshot_for_p1.pth", map_location="cpu", weights_only=False
        )
        saved = copy["snapshot_pool"]
        refilled = []
        for k, store in enumerate(self.weight_sets):
            if acting_versions[k] != store.current_version():
                continue  # published since acting last pulled it
            differ = sorted(name for name, value in state_bytes(store.state).items() if acting[k][name] != value)
            assert not differ, f"weight set {k} acts with other weights than its store's: {differ}"
            if k in self.slots:
                slot = self.slots.index(k)
                old_version, old_bytes = self.before[k]
                if saved["versions"][slot] == store.current_version():  # not taken over by a newer snapshot yet
                    assert acting[k] == state_bytes(saved["states"][slot]), f"slot {slot}: not the source's snapshot"
                    refilled += [k] if old_version == store.current_version() and old_bytes != acting[k] else []
        assert refilled, f"no slot refilled under its old version was compared: {self.before}, {saved['versions']}"


def test_a_serial_population_acts_with_each_pool_slot_s_new_weights_after_a_pbt_exchange(tmp_path: Path) -> None:
    from appo.backends.serial import SerialBackend

    threads = torch.get_num_threads()
    cfg, exp_dir, spaces, derived, buffers, control = population(tmp_path, serial_mode=True)
    backend = SerialBackend(cfg, derived, exp_dir, spaces, "cpu", buffers, control)
    try:
        backend.start()
        table = control["snapshot_versions"]
        until(backend.poll, lambda: pools_meet(table), "both pools full and meeting", 20.0)
        weight_sets = backend.policy_workers[0].stores
        exchange = Exchange(cfg, weight_sets)
        target = backend.learners[1]
        jumped = target.version + cfg.max_policy_lag + 1
        backend.send([CopyPolicy(0, 1, dict(backend.learners[0].hparams))])  # what the driver's PBT sends
        until(backend.poll, lambda: target.version >= jumped, "policy 1 replaced", 10.0)
        backend.poll()  # the policy worker's next requests: it pulls what was published
        (worker,) = backend.policy_workers
        exchange.check(exp_dir, worker.versions, [state_bytes(m.state_dict()) for m in worker.models])
    finally:
        for actor in backend.actors:
            actor.close()
        backend._limits.restore_original_limits()
        torch.set_num_threads(threads)


class InProcessLearners:
    """The run's learners in this process, each doing what its learner process does with its queue: take
    trajectories and PBT messages, train whole batches, publish, hand the groups back."""

    def __init__(self, cfg: Cfg, derived: Any, backend: Any, exp_dir: Path, spaces: tuple) -> None:
        self.backend = backend
        self.trajectories = 0  # TrajectoryReady messages taken
        self.learners = [
            Learner(cfg, derived, p, backend.buffers, backend.params[p], spaces, checkpoint_dir(exp_dir, p), "cpu",
                    backend.control)
            for p in range(cfg.num_policies)
        ]  # fmt: skip
        for learner in self.learners:
            learner.init()

    def step(self) -> None:
        queues = self.backend.queues
        for learner in self.learners:
            try:
                msgs = queues.learner_queues[learner.policy_id].get_many(block=False)
            except queue.Empty:
                msgs = []
            for msg in msgs:
                if type(msg) is not Stop:
                    learner.handle(msg)
                self.trajectories += type(msg) is TrajectoryReady
            send(learner.apply_pbt(), queues)
            while (batch := learner.next_batch()) is not None:
                learner.train(batch)
                learner.batcher.mark_released(batch.releases)
                send(list(batch.releases), queues)


def acting_state(actor: Any) -> tuple[list[int], list[dict[str, bytes]]]:
    """Inside a RayActorWorker: the version and the weights each weight set acts with."""
    (inference,) = actor.worker.inference.values()
    states = [{k: v.numpy().tobytes() for k, v in m.state_dict().items()} for m in inference.models]
    return list(inference.versions), states


@needs_ray
def test_a_ray_population_acts_with_each_pool_slot_s_new_weights_after_a_pbt_exchange(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import ray

    from appo.backends.ray.backend import RayBackend
    from appo.backends.ray.connection import connect

    cfg, exp_dir, spaces, derived, buffers, control = population(tmp_path, backend="ray", ray_object_store_mb=100)
    backend = RayBackend(cfg, derived, exp_dir, spaces, "cpu", buffers, control)
    watch = RayWatch()  # this test's Ray processes (they inherit the tag), not another test's
    monkeypatch.setenv(TAG, watch.tag)
    monkeypatch.setenv("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # (what connect sets: restored after the test)
    try:
        backend.started_ray = connect(cfg, namespace=f"appo_test_{os.getpid()}")
        learners = InProcessLearners(cfg, derived, backend, exp_dir, spaces)

        def step() -> None:
            backend.poll(0.05)  # (returns the driver's messages: none here)
            learners.step()

        backend.start_actor_workers()
        table = control["snapshot_versions"]
        until(step, lambda: pools_meet(table), "both pools full and meeting", 60.0)
        exchange = Exchange(cfg, backend.weight_sets)
        target = learners.learners[1]
        jumped = target.version + cfg.max_policy_lag + 1
        send([CopyPolicy(0, 1, dict(learners.learners[0].hparams))], backend.queues)
        until(step, lambda: target.version >= jumped, "policy 1 replaced", 20.0)
        # Acting after the exchange: the calls queued before it are done, and a later one has handed in a group.
        (actor,) = backend.actors
        earlier = set(actor.in_flight)
        until(step, lambda: not earlier & set(actor.in_flight), "the calls queued before the exchange", 20.0)
        taken = learners.trajectories
        until(step, lambda: learners.trajectories > taken, "a trajectory acted after the exchange", 20.0)
        versions, states = ray.get(actor.handle.__ray_call__.remote(acting_state), timeout=30)
        exchange.check(exp_dir, versions, states)
        assert watch.look(), "no Ray process of the test seen"
    finally:
        backend.kill_actors()
        backend.disconnect()
        close_all(backend.queues)
    deadline = time.monotonic() + 10
    while (left := watch.alive()) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not left, f"Ray processes left: {left}"
