"""The learner core (appo/learning/learner.py) on batches written into real shared trajectory buffers: an update
lowers PPO's loss and publishes the weights, NaN batches are skipped and counted, policy lag is checked again at
train time, the trainer thread of appo/learning/learner_process.py hands batches over one at a time and keeps
its failures, and a checkpoint restores the random generators."""

from __future__ import annotations

import copy
import math
import random
import time

import gymnasium as gym
import numpy as np
import pytest
import torch

from appo.algorithms.common.losses import entropy_loss, policy_loss, value_loss
from appo.config.cfg import Cfg
from appo.config.derive import derive
from appo.learning.batcher import Batch
from appo.learning.checkpoint import save_snapshot
from appo.learning.learner import Learner
from appo.learning.learner_process import TrainerThread
from appo.models.registry import make_model
from appo.protocol.buffers import allocate_trajectories
from appo.protocol.messages import LoadPolicy, TrainReport, TrajectoryReady
from appo.protocol.param_sync import ParamStore
from appo.protocol.wiring import wire

# CartPole-v1's spaces: no env is stepped, the batches are synthetic.
SPACES = (gym.spaces.Box(-1, 1, (4,), np.float32), gym.spaces.Discrete(2))
ENVS_PER_GROUP = 8


def small_cfg(**overrides) -> Cfg:
    """One worker with one split of 8 envs, rollouts of 8 steps, iterations of 2 minibatches of 64 steps
    (16 trajectories), 40 slots."""
    base = dict(
        env="CartPole-v1",
        num_workers=1,
        num_envs_per_worker=ENVS_PER_GROUP,
        worker_num_splits=1,
        rollout=8,
        batch_size=64,
        num_batches_per_epoch=2,
        num_epochs=2,
        max_policy_lag=5,
    )
    return Cfg(**(base | overrides))


def make_learner(cfg: Cfg, tmp_path) -> Learner:
    d = derive(cfg)
    bufs = allocate_trajectories(cfg, d, *SPACES)
    params = ParamStore(make_model(cfg, *SPACES))
    learner = Learner(cfg, d, 0, bufs, params, SPACES, tmp_path / "checkpoint_p0", "cpu")
    learner.init()
    return learner


def fill(learner: Learner, first_slot: int, num: int, seed: int) -> None:
    """Write `num` trajectories into slots from `first_slot` (a multiple of the group size) as an actor would:
    random observations, actions, log-probs and values from the learner's own model, reward 1 for action 1 and
    0 for action 0, no episode ends, the learner's current version; then hand the groups to the learner."""
    buf = learner.batcher.buf
    T = learner.cfg.rollout
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)  # act() samples from the global generator
    obs = torch.randn(num, T + 1, 4, generator=gen)
    out = learner.model.act(obs[:, :T].reshape(num * T, 4), torch.zeros(num * T, 1))
    actions = out.actions.reshape(num, T, 1)
    slots = slice(first_slot, first_slot + num)
    buf["obs"][slots] = obs
    buf["actions"][slots] = actions
    buf["log_probs"][slots] = out.log_probs.reshape(num, T)
    buf["values"][slots] = out.values.reshape(num, T)
    buf["rewards"][slots] = (actions[..., 0] == 1).float()
    buf["dones"][slots] = 0.0
    buf["truncated"][slots] = 0.0
    buf["policy_versions"][slots] = learner.version
    buf["rnn_states"][slots] = 0.0
    for first in range(first_slot, first_slot + num, ENVS_PER_GROUP):
        learner.handle(TrajectoryReady(0, 0, 0, first // ENVS_PER_GROUP, first, ENVS_PER_GROUP))


def take_batch(learner: Learner) -> Batch:
    batch = learner.next_batch()
    assert batch is not None, f"no batch from {learner.batcher.num_pending} pending trajectories"
    return batch


def params_of(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in model.named_parameters()}


def changed(before: dict[str, torch.Tensor], model: torch.nn.Module) -> list[str]:
    return [name for name, p in model.named_parameters() if not torch.equal(before[name], p.detach())]


# --- 1. one update lowers the loss ------------------------------------------------------------------------------
def lambda_returns(rewards: torch.Tensor, values: torch.Tensor, gamma: float, lam: float) -> torch.Tensor:
    """Lambda-returns [N, T] of episodes that do not end, from raw values [N, T + 1] (computed here, not with
    appo.algorithms.common.returns). With on-policy data V-trace's targets are the lambda = 1 ones."""
    T = rewards.shape[1]
    adv = torch.zeros_like(values[:, 0])
    out = torch.zeros_like(rewards)
    for t in reversed(range(T)):
        delta = rewards[:, t] + gamma * values[:, t + 1] - values[:, t]
        adv = delta + gamma * lam * adv
        out[:, t] = adv + values[:, t]
    return out


@torch.no_grad()
def ppo_loss(model, b: dict[str, torch.Tensor], adv: torch.Tensor, targets: torch.Tensor, cfg: Cfg, rec: int) -> float:
    """PPO's total loss (appo/algorithms/ppo/algorithm.py `_loss`) on the whole batch, for advantages and raw-unit value
    targets held fixed."""
    T = b["rewards"].shape[1]
    out = model(b["obs"][:, :T], b["actions"], b["rnn_states"][:, :T], b["dones"], rec)
    rn = model.returns_normalizer
    adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    targets_n = rn.normalize(targets) if rn is not None else targets
    p_loss, _ = policy_loss(out.log_probs, b["log_probs"], adv, cfg.ppo_clip_ratio)
    v_loss = value_loss(out.values, b["values"], targets_n, cfg.ppo_clip_value or None)
    loss = p_loss + cfg.value_loss_coeff * v_loss + cfg.exploration_loss_coeff * entropy_loss(out.entropy)
    return float(loss)


@pytest.mark.parametrize("with_vtrace", [True, False], ids=["vtrace", "gae"])
def test_one_update_lowers_the_loss_and_publishes_the_new_weights(tmp_path, with_vtrace):
    torch.manual_seed(0)
    cfg = small_cfg(with_vtrace=with_vtrace, num_epochs=4, learning_rate=1e-3)
    learner = make_learner(cfg, tmp_path)
    fill(learner, 0, 16, seed=1)
    batch = take_batch(learner)
    b = batch.tensors
    assert b["rewards"].shape == (16, 8), f"batch of {tuple(b['rewards'].shape)} instead of 16 trajectories x 8"
    before_model = copy.deepcopy(learner.model)
    store_before = make_model(cfg, *SPACES)
    assert learner.params.pull(store_before) == 0, "init() should publish version 0"

    report = learner.train(batch)

    # Compare under the same normalisers: the update itself folds the batch into them (a change of the
    # model's input and target scale, not learning), so the weights from before get the new statistics.
    # Observations are folded in first. Value targets are in raw units, from values denormalised by the returns
    # statistics of the moment: GAE computes them once, before the returns statistics take them; V-trace
    # computes them per minibatch, the last one with the final statistics (which then normalise them in both).
    before_model.obs_normalizer.load_state_dict(learner.model.obs_normalizer.state_dict())
    if with_vtrace:
        before_model.returns_normalizer.load_state_dict(learner.model.returns_normalizer.state_dict())
    T = cfg.rollout
    lam = 1.0 if with_vtrace else cfg.gae_lambda
    with torch.no_grad():
        values_n = before_model.values(b["obs"], b["rnn_states"], torch.zeros(16, T + 1), learner.derived.recurrence)
    values = before_model.returns_normalizer.denormalize(values_n)
    targets = lambda_returns(b["rewards"], values, cfg.gamma, lam)
    before_model.returns_normalizer.load_state_dict(learner.model.returns_normalizer.state_dict())
    adv = targets - values[:, :T]
    loss_before = ppo_loss(before_model, b, adv, targets, cfg, learner.derived.recurrence)
    loss_after = ppo_loss(learner.model, b, adv, targets, cfg, learner.derived.recurrence)
    assert loss_after < loss_before - 1e-3, f"loss {loss_before:.5f} -> {loss_after:.5f}: no decrease"

    # Reward 1 for action 1: the update makes it likelier.
    obs = b["obs"][:, :T].reshape(-1, 4)
    ones = torch.ones(obs.shape[0], 1, 1, dtype=torch.int64)
    zeros = torch.zeros(obs.shape[0], 1)
    with torch.no_grad():
        p_before = before_model(obs[:, None], ones, zeros[:, None], zeros, 1).log_probs.exp().mean().item()
        p_after = learner.model(obs[:, None], ones, zeros[:, None], zeros, 1).log_probs.exp().mean().item()
    assert p_after > p_before, f"mean P(action 1) {p_before:.4f} -> {p_after:.4f}"

    assert report.version == 1 and learner.version == 1, f"version {report.version}/{learner.version}, not 1"
    assert report.env_steps == 128, f"env_steps {report.env_steps}, expected 16 trajectories x 8 steps"
    assert changed(params_of(store_before), learner.model), "no parameter moved in the update"
    fresh = make_model(cfg, *SPACES)
    pulled = learner.params.pull(fresh)
    assert pulled == 1, f"ParamStore announces version {pulled}, not 1"
    for (name, published), live in zip(fresh.state_dict().items(), learner.model.state_dict().values(), strict=True):
        assert torch.equal(published, live), f"published {name} differs from the learner's by {published - live}"
    for key in ("policy_loss", "value_loss", "kl", "grad_norm", "learning_rate"):
        assert key in report.stats and math.isfinite(report.stats[key]), f"{key}: {report.stats.get(key)}"
    assert report.stats["learning_rate"] == pytest.approx(1e-3), f"learning_rate {report.stats['learning_rate']}"
    assert report.stats["nonfinite_updates"] == 0.0, f"nonfinite_updates {report.stats['nonfinite_updates']}"


# --- 2. NaN batches -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("field", ["rewards", "obs"])
def test_a_nan_batch_is_skipped_and_counted_without_poisoning_the_normalisers(tmp_path, field):
    torch.manual_seed(0)
    cfg = small_cfg()
    learner = make_learner(cfg, tmp_path)
    fill(learner, 0, 16, seed=2)
    learner.batcher.buf[field][:16] = float("nan")
    batch = take_batch(learner)
    before = params_of(learner.model)
    normalisers = {"obs": learner.model.obs_normalizer, "rewards": learner.model.returns_normalizer}
    poisoned_side = {k: v.clone() for k, v in normalisers[field].state_dict().items()}

    report = learner.train(batch)

    moved = changed(before, learner.model)
    assert moved == [], f"parameters changed by a NaN batch: {moved}"
    assert not learner.algorithm.optimizer.state, f"Adam state written: {list(learner.algorithm.optimizer.state)}"
    expected = cfg.num_epochs * learner.derived.minibatches_per_epoch
    assert report.stats["nonfinite_updates"] == expected, f"{report.stats['nonfinite_updates']} skipped, not {expected}"
    assert learner.guard.skipped == expected, f"guard counted {learner.guard.skipped}, not {expected}"
    for name, rms in (("obs", learner.model.obs_normalizer), ("returns", learner.model.returns_normalizer)):
        for key, value in rms.state_dict().items():
            assert torch.isfinite(value).all(), f"{name} normaliser {key} = {value}"
    # The normaliser fed by the NaN field did not take the batch at all.
    for key, value in normalisers[field].state_dict().items():
        assert torch.equal(value, poisoned_side[key]), f"{key}: {poisoned_side[key]} -> {value}"


def test_ten_nan_steps_in_a_row_stop_training(tmp_path):
    torch.manual_seed(0)
    cfg = small_cfg()  # 2 epochs x 2 minibatches: 4 steps per train()
    learner = make_learner(cfg, tmp_path)
    fill(learner, 0, 16, seed=3)
    good = take_batch(learner)
    bad = good._replace(tensors=good.tensors | {"rewards": torch.full_like(good.tensors["rewards"], float("nan"))})

    learner.train(bad)
    assert learner.guard.in_a_row == 4, f"{learner.guard.in_a_row} in a row after one NaN batch"
    report = learner.train(good)  # a finite step ends the run of NaN steps
    assert learner.guard.in_a_row == 0, f"{learner.guard.in_a_row} in a row after a finite batch"
    assert report.stats["nonfinite_updates"] == 4, f"nonfinite_updates {report.stats['nonfinite_updates']}"
    learner.train(bad)
    learner.train(bad)  # 8 in a row: 12 skipped in all, still going
    assert learner.guard.in_a_row == 8, f"{learner.guard.in_a_row} in a row"
    with pytest.raises(FloatingPointError, match="10 updates in a row") as info:
        learner.train(bad)
    assert learner.guard.skipped == 14, f"{learner.guard.skipped} skipped in all ({info.value})"


# --- 3. policy lag at train time ---------------------------------------------------------------------------------
def test_a_pbt_replacement_between_batch_and_train_drops_the_whole_stale_batch(tmp_path):
    torch.manual_seed(0)
    cfg = small_cfg()
    learner = make_learner(cfg, tmp_path)
    fill(learner, 0, 16, seed=4)
    batch = take_batch(learner)
    assert batch.dropped == 0 and learner.dropped == 0, f"dropped {batch.dropped} at version {learner.version}"
    # PBT replaces the policy with a copy of itself: its version jumps past --max_policy_lag.
    path = tmp_path / "pbt_snapshot_for_p0.pth"
    save_snapshot(learner.state(), path)
    learner.handle(LoadPolicy(0, 0, str(path), dict(learner.hparams)))
    assert learner.apply_pbt() == []
    jumped = cfg.max_policy_lag + 1
    assert learner.version == jumped, f"version {learner.version} after LoadPolicy, not {jumped}"
    before = params_of(learner.model)

    report = learner.train(batch)

    assert report.stats["dropped_trajectories"] == 16, f"dropped {report.stats['dropped_trajectories']}, not 16"
    assert report.version == jumped and learner.version == jumped, f"version {report.version}: trained on nothing"
    assert learner.params.current_version() == jumped, f"published version {learner.params.current_version()}"
    assert changed(before, learner.model) == [], f"weights moved: {changed(before, learner.model)}"
    assert "policy_loss" not in report.stats and "policy_lag_max" not in report.stats, f"stats {report.stats}"


def test_a_mixed_batch_trains_only_on_its_fresh_trajectories(tmp_path, monkeypatch):
    torch.manual_seed(0)
    cfg = small_cfg()
    learner = make_learner(cfg, tmp_path)
    learner.version = 10
    fill(learner, 0, 16, seed=5)
    # Odd slots started their rollout 4 versions ago: within the lag when the batch is taken.
    learner.batcher.buf["policy_versions"][1:16:2, :4] = 6
    batch = take_batch(learner)
    assert batch.dropped == 0, f"{batch.dropped} dropped at batch time with lag 4 <= {cfg.max_policy_lag}"
    seen: list[dict[str, torch.Tensor]] = []
    update = learner.algorithm.update
    monkeypatch.setattr(learner.algorithm, "update", lambda b, steps: seen.append(b) or update(b, steps))
    learner.version += 2  # two updates later the odd slots are 6 versions old, the even ones 2

    report = learner.train(batch)

    assert report.stats["dropped_trajectories"] == 8, f"dropped {report.stats['dropped_trajectories']}, not 8"
    assert report.version == 13, f"version {report.version}, not 12 + 1"
    assert len(seen) == 1, f"update called {len(seen)} times"
    trained = seen[0]
    assert trained["rewards"].shape[0] == 8, f"trained on {trained['rewards'].shape[0]} trajectories, not 8"
    assert (trained["policy_versions"] == 10).all(), f"versions trained on: {trained['policy_versions'].unique()}"
    buf_obs = learner.batcher.buf["obs"][0:16:2]
    assert torch.equal(trained["obs"], buf_obs), "the kept trajectories are not the even slots, in order"
    lags = {k: report.stats[k] for k in ("policy_lag_min", "policy_lag_avg", "policy_lag_max")}
    assert lags == {"policy_lag_min": 2.0, "policy_lag_avg": 2.0, "policy_lag_max": 2.0}, f"lags {lags}"


# --- 4. trainer thread -------------------------------------------------------------------------------------------
def wait_for(condition, what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out after {timeout} s waiting for {what}"
        time.sleep(0.01)


def test_a_failure_in_train_is_kept_and_ends_the_thread(tmp_path, monkeypatch):
    torch.manual_seed(0)
    cfg = small_cfg(num_epochs=1)
    learner = make_learner(cfg, tmp_path)
    fill(learner, 0, 16, seed=7)
    batch = take_batch(learner)
    queues = wire(1, 1, local=True)

    def broken_train(batch: Batch) -> TrainReport:
        raise RuntimeError("boom in train")

    monkeypatch.setattr(learner, "train", broken_train)
    trainer = TrainerThread(learner)
    trainer.hand_over(batch, queues)
    trainer.thread.join(timeout=10)
    assert not trainer.thread.is_alive(), "trainer thread still running after train raised"
    assert len(trainer.failure) == 1, f"failures {trainer.failure}"
    failure = trainer.failure[0]
    assert isinstance(failure, RuntimeError) and "boom in train" in str(failure), f"failure {failure!r}"
    began = time.monotonic()
    trainer.hand_over(batch, queues)  # a dead trainer takes nothing: no waiting
    trainer.stop(queues)
    waited = time.monotonic() - began
    assert waited < 5, f"hand_over + stop on a dead trainer took {waited:.1f} s"
    reports = queues.driver_queue.get_many()
    assert reports == [], f"driver got {reports} from a failed train"


# --- 5. random states in checkpoints -----------------------------------------------------------------------------
def test_a_resume_restores_the_random_generators(tmp_path):
    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)
    cfg = small_cfg()
    learner = make_learner(cfg, tmp_path)
    learner.version = 3
    states = learner.state()["random_states"]
    assert set(states) == {"torch", "numpy", "python"}, f"random_states holds {sorted(states)}"
    learner.save()
    after_save = (torch.rand(5), np.random.rand(3), [random.random() for _ in range(3)])
    # The run goes on drawing.
    _ = torch.rand(1000), np.random.rand(7), random.random()

    resumed = make_learner(cfg, tmp_path)  # building the model draws from torch's generator too

    assert resumed.version == 3, f"resumed at version {resumed.version}, not 3"
    again = (torch.rand(5), np.random.rand(3), [random.random() for _ in range(3)])
    assert torch.equal(again[0], after_save[0]), f"torch: {again[0]} vs {after_save[0]} after the save"
    assert np.array_equal(again[1], after_save[1]), f"numpy: {again[1]} vs {after_save[1]}"
    assert again[2] == after_save[2], f"python: {again[2]} vs {after_save[2]}"
