"""Several policies in one run: the learners' side of PBT (exact copies, hyperparameters that change and
survive a resume) and an actor split whose envs run different policies."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from appo.config.cfg import Cfg
from appo.config.derive import derive
from appo.config.verify import verify
from appo.learning.learner import Learner
from appo.models.registry import make_model
from appo.protocol.buffers import allocate_control, allocate_trajectories, numpy_views
from appo.protocol.messages import ActionsReady, CopyPolicy, LoadPolicy, SetHyperparams, TrajectoryReady
from appo.protocol.param_sync import ParamStore
from appo.sampling.env_runner import EnvRunner
from appo.sampling.policy_worker import PolicyWorker

SPACES = (gym.spaces.Box(-1, 1, (4,), np.float32), gym.spaces.Discrete(2))


def make_learner(cfg: Cfg, policy_id: int, tmp_path) -> Learner:
    d = derive(cfg)
    bufs = allocate_trajectories(cfg, d, *SPACES)
    params = ParamStore(make_model(cfg, *SPACES))
    learner = Learner(cfg, d, policy_id, bufs, params, SPACES, tmp_path / f"checkpoint_p{policy_id}", "cpu")
    learner.init()
    return learner


def take_a_step(learner: Learner, seed: int) -> None:
    """Different weights and a non-empty optimizer state."""
    torch.manual_seed(seed)
    loss = sum((p * torch.randn_like(p)).sum() for p in learner.model.parameters())
    learner.algorithm.optimizer.zero_grad()
    loss.backward()
    learner.algorithm.optimizer.step()


def test_replaced_policy_receives_the_exact_weights_optimizer_and_new_hparams(tmp_path):
    cfg = Cfg(env="CartPole-v1", num_policies=2, rollout=8, batch_size=64, max_policy_lag=5)
    source, target = make_learner(cfg, 0, tmp_path), make_learner(cfg, 1, tmp_path)
    take_a_step(source, 1)
    take_a_step(target, 2)
    source.version, target.version = 40, 7
    # Normalisers are part of the model's state: make the source's distinct too.
    source.model.obs_normalizer.update(torch.randn(100, 4) * 3 + 1)
    new_hparams = dict(source.hparams, learning_rate=0.0042, gamma=0.995)

    source.handle(CopyPolicy(0, 1, new_hparams))
    (load,) = source.apply_pbt()
    assert type(load) is LoadPolicy and load.policy_id == 1 and load.source == 0
    target.handle(load)
    assert target.apply_pbt() == []

    for (name, a), (_, b) in zip(source.model.state_dict().items(), target.model.state_dict().items(), strict=True):
        assert torch.equal(a, b), f"{name} differs after the copy"
    src_opt, dst_opt = (
        source.algorithm.optimizer.state_dict()["state"],
        target.algorithm.optimizer.state_dict()["state"],
    )
    assert src_opt.keys() == dst_opt.keys() and src_opt
    for key in src_opt:
        for field in ("exp_avg", "exp_avg_sq"):
            assert torch.equal(src_opt[key][field], dst_opt[key][field])
    assert target.hparams == new_hparams
    assert target.cfg.learning_rate == 0.0042 and target.cfg.gamma == 0.995
    assert target.version == 7 + cfg.max_policy_lag + 1  # experience of the replaced weights is dropped
    # Policy workers see the copy: the published weights are the source's.
    fresh = make_model(cfg, *SPACES)
    assert target.params.pull(fresh) == target.version
    for a, b in zip(fresh.state_dict().values(), source.model.state_dict().values(), strict=True):
        assert torch.equal(a, b)


def test_mutated_hparams_apply_and_survive_a_resume(tmp_path):
    cfg = Cfg(env="CartPole-v1", num_policies=2, rollout=8, batch_size=64, policy_hparams='{"1": {"learning_rate": 0}}')
    learner = make_learner(cfg, 1, tmp_path)
    assert learner.cfg.learning_rate == 0.0 and learner.hparams_report().hparams["learning_rate"] == 0.0
    learner.handle(SetHyperparams(1, dict(learner.hparams, learning_rate=0.003, exploration_loss_coeff=0.02)))
    learner.apply_pbt()
    assert learner.algorithm._set_learning_rate(0) == pytest.approx(0.003)
    assert learner.cfg.exploration_loss_coeff == 0.02 and learner.algorithm.cfg.exploration_loss_coeff == 0.02
    learner.save()
    resumed = make_learner(cfg, 1, tmp_path)  # its --policy_hparams say 0; the checkpoint wins
    assert resumed.hparams["learning_rate"] == 0.003 and resumed.cfg.exploration_loss_coeff == 0.02


def test_pbt_flags_are_checked():
    errors = verify(Cfg(with_pbt=True, num_policies=1, pbt_replace_fraction=0.8, policy_hparams='{"1": {"lr": 1}}'))
    text = "\n".join(errors)
    assert "--with_pbt: needs --num_policies >= 2" in text
    assert "--pbt_replace_fraction=0.8" in text
    assert "--policy_hparams=" in text
    assert "policy '1' is not one of 0..0" in text
    assert verify(Cfg(num_policies=2, policy_hparams='{"1": {"learning_rate": 0}}')) == []
    unknown = verify(Cfg(num_policies=2, policy_hparams='{"1": {"lr": 0}}'))
    assert len(unknown) == 1 and "unknown hyperparameters lr" in unknown[0]


def split_cfg(num_policies: int, shared: bool) -> Cfg:
    """One worker, one split of 8 CartPole envs, rollouts of 4 steps."""
    return Cfg(
        env="CartPole-v1",
        num_policies=num_policies,
        shared_policy_workers=shared,
        num_workers=1,
        num_envs_per_worker=8,
        worker_num_splits=1,
        rollout=4,
        batch_size=32,
    )


def run_split(num_policies: int):
    """One split whose envs ask each policy's own workers (--shared_policy_workers=False)."""
    cfg = split_cfg(num_policies, shared=False)
    d = derive(cfg)
    views = numpy_views(allocate_trajectories(cfg, d, *SPACES))
    control = numpy_views(allocate_control(cfg, d))
    runner = EnvRunner(cfg, d, 0, 0, views, lambda i: gym.make("CartPole-v1"), control)
    return cfg, d, views, control, runner


def reply(runner: EnvRunner, views, requests) -> list:
    out = []
    for r in requests:
        slots = r.first_slot + np.arange(r.num_envs) if r.envs is None else r.first_slot + np.asarray(r.envs)
        views["actions"][slots, r.t] = 1  # always push right: CartPole episodes end within ~10 steps
        out += runner.on_actions(ActionsReady(0, 0, r.first_slot, r.t, 0, r.policy_id))
    return out


def test_a_split_asks_each_policy_for_its_envs_and_steps_once_all_have_answered():
    cfg, d, views, control, runner = run_split(num_policies=3)
    requests = runner.init(seed=3)
    assert len(requests) > 1, "8 envs drawn among 3 policies should give several requests"
    covered = sorted(e for r in requests for e in r.envs)
    assert covered == list(range(8))
    for r in requests:
        assert all(runner.env_policy[e] == r.policy_id for e in r.envs)
    # Stepping waits for the last reply.
    first, *rest = requests
    views["actions"][first.first_slot + np.asarray(first.envs), 0] = 1
    assert runner.on_actions(ActionsReady(0, 0, first.first_slot, 0, 0, first.policy_id)) == []
    assert runner.t == 0
    # A duplicate reply from the same policy does not count twice.
    assert runner.on_actions(ActionsReady(0, 0, first.first_slot, 0, 0, first.policy_id)) == []
    out = reply(runner, views, rest)
    assert runner.t == 1 and all(m.t == 1 for m in out)


def policy_of_envs(requests) -> dict[int, int]:
    return {e: r.policy_id for r in requests for e in (r.envs if r.envs is not None else range(r.num_envs))}


def test_full_groups_go_to_each_policys_learner_and_come_back_only_when_all_released():
    cfg, d, views, control, runner = run_split(num_policies=2)
    requests = runner.init(seed=5)
    rollouts: list[tuple[int, dict[int, int], list[TrajectoryReady]]] = []  # (first slot, env -> policy, sent)
    for _ in range(1000):  # rollouts of 4 steps without any release: every slot group ends up with the learners
        mapping = policy_of_envs(requests)
        out = reply(runner, views, requests)
        ready = [m for m in out if type(m) is TrajectoryReady]
        if ready:
            rollouts.append((ready[0].first_slot, mapping, ready))
        requests = [m for m in out if type(m) is not TrajectoryReady]
        if runner.is_parked:
            break
    assert runner.is_parked and len(rollouts) == d.slot_groups_per_split
    T = cfg.rollout
    switches = 0
    for (first, mapping, ready), (_, next_mapping, _) in zip(rollouts, rollouts[1:], strict=False):
        # Each learner gets exactly the envs that ran its policy in that rollout.
        sent = {e: m.policy_id for m in ready for e in (m.envs if m.envs is not None else range(m.num_envs))}
        assert sent == mapping
        for e in range(8):
            if next_mapping[e] != mapping[e]:  # the env changed policy: its episode ended at the last step
                switches += 1
                assert views["dones"][first + e, T - 1] == 1.0
    assert switches > 0
    assert (control["group_at_learner"].sum(axis=1) >= 1).all()
    mixed = next(g for g, (_, mapping, _) in enumerate(rollouts) if len(set(mapping.values())) == 2)
    assert control["group_at_learner"][mixed].tolist() == [1, 1]
    assert runner.on_slots_released(mixed, 0) == []  # policy 1's learner still holds its part
    assert runner.is_parked
    requests = runner.on_slots_released(mixed, 1)
    assert not runner.is_parked and requests and requests[0].t == 0 and requests[0].first_slot == rollouts[mixed][0]


def fill_until_parked(runner: EnvRunner, views, requests, incarnation: int) -> list[TrajectoryReady]:
    """Answer every request (as a policy worker would) until the split has no free slot group left."""
    handed: list[TrajectoryReady] = []
    for _ in range(1000):
        out = []
        for r in requests:
            views["actions"][r.first_slot + np.arange(r.num_envs), r.t] = 1
            out += runner.on_actions(ActionsReady(0, 0, r.first_slot, r.t, incarnation, r.policy_id))
        handed += [m for m in out if type(m) is TrajectoryReady]
        requests = [m for m in out if type(m) is not TrajectoryReady]
        if runner.is_parked:
            return handed
    raise AssertionError("the split never ran out of slot groups")


def test_a_restarted_worker_ignores_releases_left_for_its_predecessor():
    """A restarted actor worker reads its predecessor's inbox (appo/protocol/wiring.py). A release the predecessor never
    read, for a group the successor has since filled and handed over itself, must not free that group while the
    learner holds it; releases of the successor's own hand-over, and of the predecessor's groups still held at
    its start, do."""
    cfg, d, views, control, first = run_split(num_policies=1)
    handed = fill_until_parked(first, views, first.init(seed=1), incarnation=0)
    assert len(handed) == d.slot_groups_per_split and all(m.incarnation == 0 for m in handed)
    released, held = handed[0].group_idx, handed[1].group_idx
    control["group_at_learner"][first._group_key(released), 0] = 0  # the learner released it; the message is
    # still in the inbox when the worker dies
    second = EnvRunner(cfg, d, 0, 0, views, lambda i: gym.make("CartPole-v1"), control, incarnation=1)
    assert list(second.free_groups) == [released] and held in second.holders
    again = fill_until_parked(second, views, second.init(seed=2), incarnation=1)
    assert [m.group_idx for m in again] == [released] and again[0].incarnation == 1
    assert second.on_slots_released(released, 0, incarnation=0) == [], "a stale release freed a held group"
    assert second.is_parked and released in second.holders
    requests = second.on_slots_released(held, 0, incarnation=0)  # the predecessor's hand-over, held at the start
    assert not second.is_parked and requests and requests[0].first_slot == handed[1].first_slot
    assert second.on_slots_released(released, 0, incarnation=1) == [] and released not in second.holders
    assert list(second.free_groups) == [released]


def test_a_shared_policy_worker_answers_a_whole_split_with_each_envs_own_policy():
    cfg = split_cfg(3, shared=True)
    d = derive(cfg)
    bufs = allocate_trajectories(cfg, d, *SPACES)
    views = numpy_views(bufs)
    control = allocate_control(cfg, d)
    runner = EnvRunner(cfg, d, 0, 0, views, lambda i: gym.make("CartPole-v1"), numpy_views(control))
    stores = []
    for version in (10, 20, 30):
        store = ParamStore(make_model(cfg, *SPACES))
        store.publish(make_model(cfg, *SPACES), version)
        stores.append(store)
    worker = PolicyWorker(cfg, d, 0, bufs, stores, SPACES, "cpu", control)
    assert worker.stack is not None
    requests = runner.init(seed=3)
    assert len(set(runner.env_policy.tolist())) > 1, "seed 3 should spread 8 envs over several policies"
    for _ in range(12):  # three rollouts
        assert len(requests) == 1 and requests[0].envs is None and requests[0].num_envs == 8
        (request,) = requests
        policies = runner.env_policy.copy()
        replies = worker.infer(requests)
        slots = request.first_slot + np.arange(8)
        assert views["policy_versions"][slots, request.t].tolist() == [10 * (p + 1) for p in policies]
        obs = torch.from_numpy(views["obs"][slots, request.t])
        for e, p in enumerate(policies):  # one stacked pass, each env through its own policy's weights
            m = worker.models[p]
            with torch.no_grad():
                value = m.value_head(m.encoder(m.normalize_obs(obs[e : e + 1])))
            assert abs(views["values"][slots[e], request.t] - value.item()) < 1e-4
        out = []
        for reply in replies:
            out += runner.on_actions(reply)
        ready = [m for m in out if type(m) is TrajectoryReady]
        if ready:
            sent = {e: m.policy_id for m in ready for e in (m.envs if m.envs is not None else range(m.num_envs))}
            assert sent == dict(enumerate(policies.tolist()))
        requests = [m for m in out if type(m) is not TrajectoryReady]


def test_each_env_keeps_its_drawn_policy_for_policy_redraw_every_episodes_and_the_draws_are_seeded():
    from appo.protocol.control import PolicyDraw

    def episodes(seed: int, every: int, envs: int = 3, count: int = 60) -> list[list[int]]:
        """Each env's policy for `count` episodes, envs ending their episodes in turn."""
        draw, rng = PolicyDraw(4, every), np.random.default_rng(seed)
        current = [int(p) for p in draw.initial(rng, envs)]
        out = [[p] for p in current]
        for _ in range(count - 1):
            for env in range(envs):
                current[env] = draw.next(rng, env, current[env])
                out[env].append(current[env])
        return out

    for every in (1, 3):
        runs = episodes(7, every)
        assert runs == episodes(7, every) and runs != episodes(8, every)  # seeded
        for env_policies in runs:
            assert set(env_policies) == {0, 1, 2, 3}  # every policy plays
            blocks = [env_policies[i : i + every] for i in range(0, len(env_policies), every)]
            assert all(len(set(b)) == 1 for b in blocks), env_policies  # a redraw only every `every` episodes
    assert PolicyDraw(1, 3).next(np.random.default_rng(0), 0, 0) == 0
