"""Self-play against past selves, piece by piece: the learner's SnapshotPool (appo/learning/snapshot_pool.py) takes a
snapshot every --selfplay_snapshot_every versions into the oldest slot (or, --selfplay_pool_keep=spread, keeps the
pool spaced over the run), keeps the control table's versions, and
comes back from its checkpoint state bit for bit; the split runner of multi-agent games (appo/sampling/
agent_split.py) plays games against the pool: one learner row per game, the other rows acting with filled
snapshots' weight sets, their steps masked out of training with the learner's version, and only the learner's
episodes reported, marked as games against the pool."""

from __future__ import annotations

import copy
import io

import numpy as np
import torch
from gymnasium import spaces
from torch import nn

from appo.config.cfg import Cfg
from appo.config.derive import derive
from appo.envs.multi_agent.multi_agent import AgentEnv
from appo.envs.multi_agent.paddle_duel import PaddleDuelEnv
from appo.learning.snapshot_pool import SnapshotPool, attach_snapshots
from appo.models.registry import make_model
from appo.protocol.buffers import allocate_control, allocate_trajectories, numpy_views
from appo.protocol.control import allocate_snapshot_versions, weight_set_of
from appo.protocol.messages import ActionsReady, InferenceRequest, TrajectoryReady
from appo.protocol.param_sync import ParamStore
from appo.sampling.agent_split import AgentEnvRunner
from appo.sampling.split_envs import FinishedEpisode

POOL, EVERY = 3, 5
OBS, ACTIONS = spaces.Box(-1.0, 1.0, (4,), np.float32), spaces.Discrete(3)


def small_model(cfg: Cfg, seed: int) -> nn.Module:
    """The run's model for a small Box space, every entry of its state (normalisers included) drawn from `seed`."""
    model = make_model(cfg, OBS, ACTIONS)
    reseed(model, seed)
    return model


def reseed(model: nn.Module, seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for value in model.state_dict().values():
            value.copy_(torch.randn(value.shape, generator=gen, dtype=torch.float64).to(value.dtype).abs())


def state_bytes(state: dict[str, torch.Tensor]) -> dict[str, bytes]:
    return {name: t.detach().cpu().numpy().tobytes() for name, t in state.items()}


def pool_of(cfg: Cfg, policy_id: int = 1) -> tuple[SnapshotPool, list[ParamStore], torch.Tensor]:
    """Policy `policy_id`'s pool over fresh stores (weights of seed 12345), with its own control table."""
    template = small_model(cfg, seed=12345)
    stores = [ParamStore(template) for _ in range(cfg.num_policies)]
    attach_snapshots(cfg, stores, template)
    versions = allocate_snapshot_versions(cfg)
    return SnapshotPool(cfg, policy_id, stores[policy_id].snapshots, versions), stores, versions


def test_snapshots_are_taken_at_multiples_of_every_into_the_oldest_slot() -> None:
    cfg = Cfg(env="paddle_duel", num_policies=2, selfplay_pool=POOL, selfplay_snapshot_every=EVERY)
    pool, stores, table = pool_of(cfg, policy_id=1)
    assert [len(s.snapshots) for s in stores] == [POOL, POOL] and stores[0].snapshots[0] is not pool.stores[0]
    assert table.shape == (2, POOL) and table.dtype == torch.int64 and not table.any()
    model = small_model(cfg, 0)
    pool.after_publish(model, 0)  # version 0 (the initial weights) is no snapshot
    held = [0] * POOL  # the version each slot should hold
    for version in range(1, 8 * EVERY + 1):
        reseed(model, version)
        pool.after_publish(model, version)
        if version % EVERY == 0:
            held[(version // EVERY - 1) % POOL] = version  # round robin: the oldest goes
        assert [s.current_version() for s in pool.stores] == held, f"after version {version}"
        assert table[1].tolist() == held and table[0].tolist() == [0] * POOL, f"after version {version}"
    assert held == [35, 40, 30] and pool.added == 8
    for store, version in zip(pool.stores, held, strict=True):
        assert state_bytes(store.state) == state_bytes(small_model(cfg, version).state_dict()), version
        pulled = small_model(cfg, 0)
        assert store.pull(pulled) == version
        assert state_bytes(pulled.state_dict()) == state_bytes(store.state)
    # The weight sets: the policies' own first, then policy 0's snapshots, then policy 1's.
    assert [weight_set_of(cfg, p, s) for p in (0, 1) for s in range(POOL)] == [2, 3, 4, 5, 6, 7]


def test_a_pool_comes_back_from_its_state_bit_for_bit_and_goes_on_replacing_the_oldest() -> None:
    cfg = Cfg(env="paddle_duel", num_policies=2, selfplay_pool=POOL, selfplay_snapshot_every=EVERY)
    pool, _, _ = pool_of(cfg)
    model = small_model(cfg, 0)
    for version in range(1, 4 * EVERY + 1):  # four snapshots in three slots: 20, 10, 15
        reseed(model, 1000 + version)
        pool.after_publish(model, version)
    saved_bytes = [state_bytes(s.state) for s in pool.stores]
    buffer = io.BytesIO()
    torch.save({"snapshot_pool": pool.state_dict()}, buffer)  # as the learner's checkpoint holds it
    reseed(model, 7)
    pool.after_publish(model, 5 * EVERY)  # the state is a copy: later snapshots do not change it
    buffer.seek(0)
    state = torch.load(buffer, weights_only=False)["snapshot_pool"]
    assert state["versions"] == [20, 10, 15] and state["added"] == 4

    fresh, _, table = pool_of(cfg)
    assert all(s.current_version() == 0 for s in fresh.stores)
    template = small_model(cfg, 3)
    assert fresh.load_state_dict(state, copy.deepcopy(template)) == POOL
    assert [s.current_version() for s in fresh.stores] == [20, 10, 15]
    assert table[1].tolist() == [20, 10, 15] and table[0].tolist() == [0] * POOL
    assert [state_bytes(s.state) for s in fresh.stores] == saved_bytes
    for store, expected in zip(fresh.stores, saved_bytes, strict=True):
        pulled = small_model(cfg, 9)
        store.pull(pulled)  # what the policy workers serving the weight set load
        assert state_bytes(pulled.state_dict()) == expected
    # The next snapshot replaces the oldest (version 10 in slot 1), as it would have without the restart.
    reseed(model, 2000)
    fresh.after_publish(model, 5 * EVERY)
    assert [s.current_version() for s in fresh.stores] == [20, 25, 15] and table[1].tolist() == [20, 25, 15]
    assert state_bytes(fresh.stores[1].state) == state_bytes(model.state_dict())


def test_a_partly_filled_pool_restores_only_its_snapshots() -> None:
    cfg = Cfg(env="paddle_duel", selfplay_pool=POOL, selfplay_snapshot_every=EVERY)
    pool, _, _ = pool_of(cfg, policy_id=0)
    model = small_model(cfg, 11)
    pool.after_publish(model, EVERY)
    state = pool.state_dict()
    assert state["versions"] == [EVERY, 0, 0] and state["states"][1] is None and state["states"][2] is None
    fresh, _, table = pool_of(cfg, policy_id=0)
    assert fresh.load_state_dict(state, small_model(cfg, 3)) == 1
    assert table[0].tolist() == [EVERY, 0, 0] and [s.current_version() for s in fresh.stores] == [EVERY, 0, 0]
    assert state_bytes(fresh.stores[0].state) == state_bytes(model.state_dict())
    fresh.after_publish(model, 2 * EVERY)
    assert table[0].tolist() == [EVERY, 2 * EVERY, 0]


def spread_reference(size: int, snapshots: int) -> list[int]:
    """The versions a spread pool should hold after `snapshots` snapshots (1, 2, ... in units of EVERY), worked out
    the slow way: while full, drop the snapshot after the first whose neighbours lie closest, the newer on a tie."""
    held: list[int] = []
    for n in range(1, snapshots + 1):
        if len(held) == size:
            after = held[1:] + [n]
            gaps = [after[j] - held[j - 1] for j in range(1, size)]
            drop = max(j for j in range(1, size) if gaps[j - 1] == min(gaps))
            del held[drop]
        held.append(n)
    return [EVERY * n for n in held]


def test_a_spread_pool_keeps_its_first_snapshot_and_spaces_the_rest_over_the_run() -> None:
    cfg = Cfg(env="paddle_duel", selfplay_pool=4, selfplay_snapshot_every=EVERY, selfplay_pool_keep="spread")
    pool, _, table = pool_of(cfg, policy_id=0)
    model = small_model(cfg, 0)
    for n in range(1, 41):
        reseed(model, n)
        pool.after_publish(model, n * EVERY)
        held = sorted(s.current_version() for s in pool.stores if s.current_version())  # 0: an empty slot
        assert held == spread_reference(4, n), f"after snapshot {n}"
        assert sorted(v for v in table[0].tolist() if v) == held
        by_version = {s.current_version(): s for s in pool.stores}
        assert state_bytes(by_version[n * EVERY].state) == state_bytes(model.state_dict())
    assert sorted(s.current_version() for s in pool.stores) == [EVERY * n for n in (1, 17, 33, 40)]
    # Restored from its checkpoint state, it goes on choosing the same slots.
    fresh, _, _ = pool_of(cfg, policy_id=0)
    fresh.load_state_dict(pool.state_dict(), small_model(cfg, 3))
    for n in range(41, 60):
        for p in (pool, fresh):
            p.after_publish(model, n * EVERY)
        assert [s.current_version() for s in fresh.stores] == [s.current_version() for s in pool.stores]
    assert sorted(s.current_version() for s in fresh.stores) == spread_reference(4, 59)


# --- the split runner against the pool ---------------------------------------------------------------------------
LEARNER_VERSION = 1000  # the learner's weights' version, as a policy worker writes it (plus the step)


def test_a_pbt_copy_takes_the_source_s_pool_whole_with_its_empty_slots() -> None:
    """A replaced policy loads its source's checkpoint, pool included: slots empty there are emptied here, not left
    holding the target's own past selves beside the source's."""
    cfg = Cfg(env="paddle_duel", selfplay_pool=POOL, selfplay_snapshot_every=EVERY)
    source, _, _ = pool_of(cfg, policy_id=0)
    source.after_publish(small_model(cfg, 11), 4 * EVERY)
    target, _, table = pool_of(cfg, policy_id=0)
    for version in (EVERY, 2 * EVERY, 3 * EVERY):  # a full pool of the target's own
        target.after_publish(small_model(cfg, version), version)
    assert table[0].tolist() == [EVERY, 2 * EVERY, 3 * EVERY]
    assert target.load_state_dict(source.state_dict(), small_model(cfg, 3)) == 1
    assert table[0].tolist() == [4 * EVERY, 0, 0] and [s.current_version() for s in target.stores] == [4 * EVERY, 0, 0]
    assert target.state_dict()["states"][1:] == [None, None] and target.added == 1
    target.after_publish(small_model(cfg, 5), 5 * EVERY)  # the next snapshot fills an empty slot
    assert table[0].tolist() == [4 * EVERY, 5 * EVERY, 0]


def pool_runner(prob: float, filled: list[int], games: int = 4, rollout: int = 8):
    """One split of paddle_duel games (2 agents each) on a run with a pool of POOL slots holding `filled`."""
    cfg = Cfg(
        env="paddle_duel",
        num_workers=1,
        num_envs_per_worker=games,
        worker_num_splits=1,
        rollout=rollout,
        batch_size=2 * games * rollout,
        selfplay_pool=POOL,
        selfplay_snapshot_every=EVERY,
        selfplay_pool_prob=prob,
    )
    d = derive(cfg, agents_per_env=2, multi_agent=True)
    space = AgentEnv(PaddleDuelEnv(), "paddle_duel")
    views = numpy_views(allocate_trajectories(cfg, d, space.observation_space, space.action_space))
    control = numpy_views(allocate_control(cfg, d))
    control["snapshot_versions"][0] = filled
    runner = AgentEnvRunner(
        cfg, d, 0, 0, views, lambda index: AgentEnv(PaddleDuelEnv(), "paddle_duel"), control, agents_per_env=2
    )
    return cfg, d, views, control, runner


def play(cfg: Cfg, d, views, control, runner: AgentEnvRunner, rollouts: int, on_rollout=None) -> dict:
    """Drive the split as an actor worker and its policy worker would (random actions; each row's version that of
    the weight set `slot_policy` names), checking every step against the pool's rules; returns what was seen."""
    n, T = d.envs_per_split, cfg.rollout
    table = control["snapshot_versions"]
    snapshot_of = {weight_set_of(cfg, 0, s): s for s in range(POOL)}
    rng = np.random.default_rng(5)
    returns, lengths = np.zeros(n), np.zeros(n, dtype=np.int64)
    seen = {"learner_rows": set(), "opponent_slots": set(), "pool_steps": 0, "steps": 0, "switches": 0, "games": 0}
    requests = runner.init(seed=0)
    for r in range(rollouts):
        if on_rollout is not None:
            on_rollout(r, seen)
        previous = None
        for t in range(T):
            (request,) = requests
            assert request.t == t and request.policy_id == 0
            first = request.first_slot
            slots = slice(first, first + n)
            acting = control["slot_policy"][slots].copy()  # the weight set acting for each row at this step
            learner_version = LEARNER_VERSION + r * T + t
            views["actions"][slots, t, 0] = rng.integers(0, 3, n)
            views["policy_versions"][slots, t] = [
                learner_version if w == 0 else table[0, snapshot_of[int(w)]] for w in acting
            ]
            out = runner.on_actions(ActionsReady(0, 0, first, t, request.incarnation, 0))
            learner = acting == 0
            vs_pool = ~learner.reshape(-1, 2).all(axis=1)  # per game
            for g in np.flatnonzero(vs_pool):
                rows = acting[2 * g : 2 * g + 2]
                assert (rows == 0).sum() == 1, f"game {g} at t={t}: one learner row, not {rows}"
                (other,) = rows[rows != 0]
                assert int(other) in snapshot_of and table[0, snapshot_of[int(other)]] > 0, (other, table[0])
                seen["learner_rows"].add(int(np.flatnonzero(rows == 0)[0]))
                seen["opponent_slots"].add(snapshot_of[int(other)])
            seen["pool_steps"] += int(vs_pool.sum())
            seen["steps"] += len(vs_pool)
            if previous is not None:
                seen["switches"] += int((acting != previous).any())
            previous = acting
            # Snapshots' steps: not trained on, and not policy lag (the learner rows' version).
            np.testing.assert_array_equal(views["valid"][slots, t], learner.astype(np.float32), err_msg=f"t={t}")
            np.testing.assert_array_equal(views["policy_versions"][slots, t], learner_version, err_msg=f"t={t}")
            # Episodes: the learner rows' alone, marked where their game was against the pool.
            rewards, dones = views["rewards"][slots, t], views["dones"][slots, t]
            returns += rewards
            lengths += 1
            expected = []
            for i in np.flatnonzero(dones > 0):
                if learner[i]:
                    expected.append(
                        FinishedEpisode(
                            float(returns[i]),
                            int(lengths[i]),
                            0,
                            true_objective=float(returns[i] > 0),  # paddle_duel's: a win
                            agent=("left", "right")[i % 2],
                            vs_pool=bool(vs_pool[i // 2]),
                        )
                    )
                returns[i], lengths[i] = 0.0, 0
            seen["games"] += int((dones > 0).sum()) // 2
            assert runner.pop_finished() == expected, f"episodes at t={t} of rollout {r}"
            requests = [m for m in out if type(m) is InferenceRequest]
            ready = [m for m in out if type(m) is TrajectoryReady]
            for m in ready:
                requests += runner.on_slots_released(m.group_idx, m.policy_id, m.incarnation)
            assert bool(ready) == (t == T - 1)
    return seen


def test_every_game_against_the_pool_has_one_learner_row_and_filled_snapshots_for_the_others() -> None:
    filled = [5, 0, 15]  # slot 1 is empty: never an opponent
    cfg, d, views, control, runner = pool_runner(prob=1.0, filled=filled)
    seen = play(cfg, d, views, control, runner, rollouts=30)
    assert seen["pool_steps"] == seen["steps"], "with --selfplay_pool_prob=1 every game is against the pool"
    assert seen["games"] >= 10, seen
    assert seen["learner_rows"] == {0, 1}, "the learner's side is drawn per game"
    assert seen["opponent_slots"] == {0, 2}, "opponents drawn from the filled slots"
    assert seen["switches"] > 0, "a game starting mid-rollout switches its rows' weight sets there"


def test_without_the_pools_share_no_row_plays_a_snapshot_and_both_sides_are_reported() -> None:
    cfg, d, views, control, runner = pool_runner(prob=0.0, filled=[5, 10, 15])
    seen = play(cfg, d, views, control, runner, rollouts=30)
    assert seen["pool_steps"] == 0 and seen["games"] >= 10 and seen["switches"] == 0, seen


def test_games_meet_the_pool_once_it_holds_a_snapshot() -> None:
    cfg, d, views, control, runner = pool_runner(prob=1.0, filled=[0, 0, 0])
    before: dict = {}

    def fill(r: int, seen: dict) -> None:
        if r == 10:  # the learner's first snapshot lands (slot 1 here): games starting from now on meet it
            before.update(seen)
            control["snapshot_versions"][0, 1] = EVERY

    seen = play(cfg, d, views, control, runner, rollouts=30, on_rollout=fill)
    assert before["steps"] > 0 and before["pool_steps"] == 0, "no game against an empty pool"
    assert seen["pool_steps"] > 0 and seen["opponent_slots"] == {1}, seen
