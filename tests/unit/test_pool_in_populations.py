"""Self-play pools in a population mixed in one env (appo/sampling/agent_split.py): a game against the pool plays
snapshots of its learner row's own policy, also where a game is cut and restarted at a rollout's end because its
rows change policy; and a snapshot's steps carry the newest version of the policy its row belongs to (whose learner
gets the row), not another policy's, which after a PBT jump can be hundreds of versions away and would count as
policy lag or make the row's whole trajectory stale."""

from __future__ import annotations

import numpy as np

from appo.config.cfg import Cfg
from appo.config.derive import derive
from appo.envs.multi_agent.multi_agent import AgentEnv
from appo.envs.multi_agent.paddle_duel import PaddleDuelEnv
from appo.protocol.buffers import allocate_control, allocate_trajectories, numpy_views
from appo.protocol.control import FREE
from appo.protocol.messages import ActionsReady, InferenceRequest, TrajectoryReady
from appo.sampling.agent_split import AgentEnvRunner

K, GAMES, T, POOL = 2, 8, 8, 2
VERSIONS = np.array([10, 500])  # policy 0 at version 10, policy 1 at 500 (as after a PBT replacement's jump)


def test_pool_games_of_a_population_play_their_own_policy_s_snapshots_at_its_version() -> None:
    cfg = Cfg(
        env="paddle_duel",
        num_workers=1,
        num_envs_per_worker=GAMES,
        worker_num_splits=1,
        rollout=T,
        batch_size=K * GAMES * T,
        num_policies=2,
        selfplay_pool=POOL,
        selfplay_pool_prob=1.0,
    )
    d = derive(cfg, agents_per_env=K, multi_agent=True)
    make = lambda index: AgentEnv(PaddleDuelEnv(max_steps=6), "paddle_duel")  # noqa: E731 (short games)
    space = make(0)
    views = numpy_views(allocate_trajectories(cfg, d, space.observation_space, space.action_space))
    control = numpy_views(allocate_control(cfg, d))
    control["snapshot_versions"][:] = 5  # every slot of both pools filled
    runner = AgentEnvRunner(cfg, d, 0, 0, views, make, control, agents_per_env=K)
    rng = np.random.default_rng(0)
    n = d.envs_per_split
    games_at_rollout_start = snapshot_steps = 0
    seen = np.zeros(2, dtype=bool)
    msgs = runner.init(seed=0)
    for _ in range(40 * T):
        (req,) = [m for m in msgs if isinstance(m, InferenceRequest)]
        rows, t = slice(req.first_slot, req.first_slot + n), req.t
        views["actions"][rows, t, 0] = rng.integers(0, 3, n)
        policy = runner.env_policy.copy()
        snapshot = runner.opponent != FREE
        views["policy_versions"][rows, t] = VERSIONS[policy]  # a snapshot's own (older) version is overwritten
        views["policy_versions"][rows, t][snapshot] = 5
        msgs = runner.on_actions(ActionsReady(req.worker_idx, req.split_idx, req.first_slot, t, req.incarnation, 0))
        for m in list(msgs):
            if isinstance(m, TrajectoryReady):
                msgs += runner.on_slots_released(m.group_idx, m.policy_id, m.incarnation)
        seen[np.unique(policy[~snapshot])] = True  # policies a learner row has acted for in this split so far
        expected = np.where(seen[policy], VERSIONS[policy], 5)  # (before any: the snapshot's own version stays)
        written = views["policy_versions"][rows, t]
        np.testing.assert_array_equal(written[snapshot], expected[snapshot], err_msg=f"t={t}")
        snapshot_steps += int(snapshot.sum())
        if t < T - 1:
            continue
        for g in range(GAMES):  # the rollout's end: every game's opponents against its learner's policy now
            opponents = runner.opponent[g * K : (g + 1) * K]
            if (opponents != FREE).any():
                learner = g * K + int(np.flatnonzero(opponents == FREE)[0])
                owners = {(int(w) - cfg.num_policies) // POOL for w in opponents if w != FREE}
                assert owners == {int(runner.env_policy[learner])}, (g, opponents, runner.env_policy)
                games_at_rollout_start += 1
    assert games_at_rollout_start > 100 and snapshot_steps > 1000, (games_at_rollout_start, snapshot_steps)
    assert len(set(runner.env_policy.tolist())) == 2, "both policies play"
