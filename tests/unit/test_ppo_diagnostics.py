"""PPO's tuning diagnostics: approx_kl before and after an iteration's update, the explained
variance of the value targets by the values before the update, and the policy's std, on a real learner."""

from __future__ import annotations

import copy

import gymnasium as gym
import numpy as np
import pytest
import torch

from appo.algorithms.base import NonFiniteGuard
from appo.algorithms.ppo.algorithm import PPO
from appo.config.derive import derive
from appo.models.registry import make_model
from tests.unit.test_learner import fill, lambda_returns, make_learner, small_cfg, take_batch


def test_kl_before_is_zero_on_fresh_data_and_grows_with_the_update(tmp_path):
    torch.manual_seed(0)
    learner = make_learner(small_cfg(with_vtrace=False, num_epochs=4, learning_rate=3e-3), tmp_path)
    fill(learner, 0, 16, seed=1)  # acted by the learner's own weights: behaviour == current
    stats = learner.train(take_batch(learner)).stats
    assert stats["approx_kl_before"] == pytest.approx(0.0, abs=1e-6), stats
    assert stats["approx_kl_after"] > 1e-5 and stats["approx_kl_after"] > 100 * abs(stats["approx_kl_before"]), stats
    assert "std" not in stats  # a categorical policy has none


def test_explained_variance_matches_its_definition(tmp_path):
    torch.manual_seed(0)
    cfg = small_cfg(with_vtrace=False)
    learner = make_learner(cfg, tmp_path)
    fill(learner, 0, 16, seed=2)
    batch = take_batch(learner)
    b = batch.tensors
    before = copy.deepcopy(learner.model)
    stats = learner.train(batch).stats
    # The values PPO's targets come from: observation statistics with this batch folded in (first thing in
    # the update), returns statistics from before it.
    before.obs_normalizer.load_state_dict(learner.model.obs_normalizer.state_dict())
    T = cfg.rollout
    with torch.no_grad():
        values_n = before.values(b["obs"], b["rnn_states"], torch.zeros(16, T + 1), learner.derived.recurrence)
    values = before.returns_normalizer.denormalize(values_n)
    targets = lambda_returns(b["rewards"], values, cfg.gamma, cfg.gae_lambda)
    expected = 1.0 - float((targets - values[:, :T]).var(unbiased=False) / targets.var(unbiased=False))
    assert stats["explained_variance"] == pytest.approx(expected, abs=1e-5), (stats["explained_variance"], expected)


BOX = (gym.spaces.Box(-1, 1, (3,), np.float32), gym.spaces.Box(-2, 2, (2,), np.float32))


def gaussian_update(budget_used: float = 0.0, **overrides) -> tuple[dict[str, torch.Tensor], dict[str, float]]:
    """One PPO iteration of a Gaussian policy (std exp(-0.5) at the start) on a fixed random batch from fixed
    weights, `budget_used` of the run's budget spent: (the weights after it, its stats)."""
    torch.manual_seed(0)
    cfg = small_cfg(env="Pendulum-v1", with_vtrace=False, initial_log_std=-0.5, learning_rate=1e-3, **overrides)
    model = make_model(cfg, *BOX)
    ppo = PPO(cfg, derive(cfg), model, "cpu", guard=NonFiniteGuard(0))
    ppo.budget_used = budget_used
    N, T = 4, cfg.rollout
    g = torch.Generator().manual_seed(1)
    b = {
        "obs": torch.randn(N, T + 1, 3, generator=g),
        "actions": torch.randn(N, T, 2, generator=g),
        "values": torch.zeros(N, T),
        "rewards": torch.randn(N, T, generator=g),
        "dones": torch.zeros(N, T),
        "truncated": torch.zeros(N, T),
        "rnn_states": torch.zeros(N, T + 1, 1),
    }
    with torch.no_grad():
        b["log_probs"] = model(b["obs"][:, :T], b["actions"], b["rnn_states"][:, :T], b["dones"], T).log_probs
    stats = ppo.update(b, 0)
    return {name: p.detach().clone() for name, p in model.named_parameters()}, stats


def test_gaussian_policies_report_their_std():
    params, stats = gaussian_update()
    assert stats["std"] == pytest.approx(float(params["log_std"].exp().mean()), rel=1e-6)
    assert stats["std"] != pytest.approx(float(np.exp(-0.5)), rel=1e-9)  # the update moved it


@pytest.mark.parametrize("with_vtrace", [False, True])
def test_normalisers_learn_from_the_valid_steps_only(with_vtrace: bool):
    """Multi-agent batches mark steps no learner took (agents out of the game, with zero observations; a self-play
    pool's snapshots) `valid` 0: the observation and return normalisers must not see them either."""
    torch.manual_seed(0)
    cfg = small_cfg(env="Pendulum-v1", with_vtrace=with_vtrace, initial_log_std=-0.5)
    model = make_model(cfg, *BOX)
    ppo = PPO(cfg, derive(cfg), model, "cpu", guard=NonFiniteGuard(0))
    N, T = 4, cfg.rollout
    g = torch.Generator().manual_seed(1)
    valid = torch.ones(N, T)
    valid[2:] = 0.0  # two rows out of the game: zero observations, no reward
    obs = 5.0 + torch.randn(N, T + 1, 3, generator=g)
    obs[2:] = 0.0
    b = {
        "obs": obs,
        "actions": torch.randn(N, T, 2, generator=g),
        "values": torch.zeros(N, T),
        "rewards": torch.randn(N, T, generator=g) * valid,
        "dones": 1.0 - valid,
        "truncated": torch.zeros(N, T),
        "rnn_states": torch.zeros(N, T + 1, 1),
        "valid": valid,
    }
    with torch.no_grad():
        b["log_probs"] = model(b["obs"][:, :T], b["actions"], b["rnn_states"][:, :T], b["dones"], T).log_probs
    ppo.update(b, 0)
    norm = model.obs_normalizer
    assert float(norm.count) == pytest.approx(2 * T, abs=1e-3)
    torch.testing.assert_close(norm.mean.float(), obs[:2, :T].reshape(-1, 3).mean(0), atol=1e-4, rtol=0)
    updates = cfg.num_epochs if with_vtrace else 1  # V-trace: every minibatch's targets; GAE: once per iteration
    assert float(model.returns_normalizer.count) == pytest.approx(updates * 2 * T, abs=1e-3)


def recurrent_gae_update(kl_loss_coeff: float) -> tuple[dict[str, torch.Tensor], dict[str, float], int]:
    """Two epochs of one minibatch of whole trajectories (GAE, a GRU) on a fixed random batch with episode ends and
    a row out of the game: (the weights after them, the stats, the full-batch forward passes the update made)."""
    torch.manual_seed(0)
    overrides = dict(use_rnn=True, rnn_size=16, num_batches_per_epoch=1, batch_size=128, num_epochs=2)
    cfg = small_cfg(env="Pendulum-v1", with_vtrace=False, kl_loss_coeff=kl_loss_coeff, **overrides)
    model = make_model(cfg, *BOX)
    ppo = PPO(cfg, derive(cfg), model, "cpu", guard=NonFiniteGuard(0))
    N, T = 16, cfg.rollout
    g = torch.Generator().manual_seed(1)
    valid = torch.ones(N, T)
    valid[3] = 0.0
    b = {
        "obs": torch.randn(N, T + 1, 3, generator=g),
        "actions": torch.randn(N, T, 2, generator=g),
        "values": torch.randn(N, T, generator=g),
        "rewards": torch.randn(N, T, generator=g),
        "dones": (torch.rand(N, T, generator=g) < 0.2).float(),
        "truncated": torch.zeros(N, T),
        "rnn_states": torch.randn(N, T + 1, 16, generator=g),
        "valid": valid,
    }
    with torch.no_grad():
        b["log_probs"] = model(b["obs"][:, :T], b["actions"], b["rnn_states"][:, :T], b["dones"], T).log_probs + 0.05
    passes = []
    forward = model.forward
    model.forward = lambda obs, *args, **kw: passes.append(obs.shape[0]) or forward(obs, *args, **kw)  # type: ignore[method-assign]
    stats = ppo.update(b, 0)
    return {name: p.detach().clone() for name, p in model.named_parameters()}, stats, passes.count(N)


def test_gae_values_from_the_first_loss_pass_are_those_of_a_pass_of_their_own():
    """With one minibatch of whole trajectories per epoch, GAE's values come from the first loss pass: one forward
    pass over the batch fewer, and the same update as with the values' own no-grad pass (which a KL loss still
    takes, here with a weight too small to move anything)."""
    fused, fused_stats, fused_passes = recurrent_gae_update(kl_loss_coeff=0.0)
    own, own_stats, own_passes = recurrent_gae_update(kl_loss_coeff=1e-12)
    # one per epoch and the KL after the update (its 256 steps cover these 128), and the values' own pass
    assert (fused_passes, own_passes) == (3, 4)
    for name in fused:
        torch.testing.assert_close(fused[name], own[name], atol=1e-6, rtol=1e-5)
    for key in ("value_loss", "policy_loss", "explained_variance", "approx_kl_before", "approx_kl_after"):
        assert fused_stats[key] == pytest.approx(own_stats[key], rel=1e-5, abs=1e-7), key
    assert fused_stats["approx_kl_before"] > 1e-4  # the shifted behaviour log-probs: a KL the check can see
