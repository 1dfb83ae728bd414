"""--kl_loss_coeff (Sample Factory's MuJoCo setting 0.1): a KL(current || before the iteration) term in
PPO's loss. On a real learner and real batches: zero until the policy moves, and a large weight keeps the updated
policy closer to the one that acted than no weight does, on both minibatch paths (single steps, trajectories)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from appo.config.verify import verify
from appo.models.distributions import Categorical, DiagGaussian
from tests.unit.test_learner import fill, make_learner, small_cfg, take_batch


def train_once(cfg, tmp_path, seed: int = 1) -> dict[str, float]:
    torch.manual_seed(0)  # the same initial weights for every cfg
    learner = make_learner(cfg, tmp_path)
    fill(learner, 0, 16, seed=seed)  # acted by the learner's weights: the KL before the update is 0
    return learner.train(take_batch(learner)).stats


@pytest.mark.parametrize("with_vtrace", [False, True], ids=["single_steps", "trajectories"])
def test_a_large_kl_weight_keeps_the_policy_near_the_one_that_acted(tmp_path, with_vtrace):
    flags = dict(learning_rate=0.05, num_epochs=4, with_vtrace=with_vtrace)
    free = train_once(small_cfg(**flags), tmp_path / "free")
    held = train_once(small_cfg(kl_loss_coeff=50.0, **flags), tmp_path / "held")
    assert "kl_loss" not in free
    assert held["kl_loss"] > 0.0  # the policy moved within the iteration, so the term was felt
    assert free["approx_kl_after"] > 1e-3, free
    assert held["approx_kl_after"] < 0.5 * free["approx_kl_after"], (held, free)


def test_the_kl_term_is_zero_before_the_policy_moves(tmp_path):
    stats = train_once(small_cfg(kl_loss_coeff=1.0, num_epochs=1, num_batches_per_epoch=1, batch_size=128), tmp_path)
    assert stats["kl_loss"] == pytest.approx(0.0, abs=1e-6)  # one minibatch, taken before any step


def test_rows_pick_the_distributions_of_those_samples():
    g = DiagGaussian(torch.arange(6.0).reshape(3, 2), torch.tensor([0.0, 1.0]))
    rows = g.rows(torch.tensor([2, 0]))
    assert torch.equal(rows.mean, torch.tensor([[4.0, 5.0], [0.0, 1.0]]))
    assert torch.equal(rows.kl(g.rows(torch.tensor([2, 0]))), torch.zeros(2))
    c = Categorical(torch.tensor([[0.0, 1.0], [2.0, 0.0]]))
    assert torch.allclose(c.rows(torch.tensor([1])).probs, c.probs[1:])


def test_a_negative_kl_weight_is_named():
    errors = verify(small_cfg(kl_loss_coeff=-0.1))
    assert any(e.startswith("--kl_loss_coeff=-0.1: must be >= 0") for e in errors), errors


def test_a_gaussian_policy_trains_with_the_kl_loss():
    """The state-independent log_std is a parameter the optimizer changes in place: the distribution from before
    the iteration must be a copy (a view of it failed at the first step of a Walker2d run)."""
    from appo.algorithms.base import NonFiniteGuard
    from appo.algorithms.ppo.algorithm import PPO
    from appo.config.derive import derive
    from appo.models.registry import make_model

    torch.manual_seed(0)
    obs_space, action_space = gym.spaces.Box(-1, 1, (3,), np.float32), gym.spaces.Box(-1, 1, (2,), np.float32)
    cfg = small_cfg(env="Pendulum-v1", kl_loss_coeff=0.1, with_vtrace=False, learning_rate=0.01)
    model = make_model(cfg, obs_space, action_space)
    ppo = PPO(cfg, derive(cfg), model, "cpu", NonFiniteGuard(0))
    N, T = 16, cfg.rollout
    obs = torch.randn(N, T + 1, 3)
    with torch.no_grad():
        out = model.act(obs[:, :T].reshape(N * T, 3), torch.zeros(N * T, 1))
    b = {
        "obs": obs,
        "actions": out.actions.reshape(N, T, 2),
        "log_probs": out.log_probs.reshape(N, T),
        "values": out.values.reshape(N, T),
        "rewards": out.actions.reshape(N, T, 2)[..., 0],  # pays the first action: the means move
        "dones": torch.zeros(N, T),
        "truncated": torch.zeros(N, T),
        "rnn_states": torch.zeros(N, T + 1, 1),
    }
    log_std = model.log_std.detach().clone()
    stats = ppo.update(b, 0)
    assert stats["kl_loss"] > 0.0 and not torch.equal(model.log_std.detach(), log_std)
