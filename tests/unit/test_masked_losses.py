"""Every term of PPO's loss averages over the same steps: the `valid` ones. Steps with `valid` 0 (agents out of
their game, whose rows hold zeros; a self-play pool's snapshots) must not pull the policy through the bounds loss
or the KL loss either (appo/algorithms/ppo/algorithm.py)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from appo.algorithms.base import NonFiniteGuard
from appo.algorithms.common.losses import bounds_loss
from appo.algorithms.ppo.algorithm import PPO, Part
from appo.config.derive import derive
from appo.models.distributions import DiagGaussian
from appo.models.registry import make_model
from tests.unit.test_learner import small_cfg

BOX = (gym.spaces.Box(-1, 1, (3,), np.float32), gym.spaces.Box(-2, 2, (2,), np.float32))


def loss_terms(mean: torch.Tensor, old_mean: torch.Tensor, valid: torch.Tensor) -> dict[str, float]:
    """PPO's loss terms on 6 steps of a Gaussian policy over the box [-2, 2]^2 with the bounds and KL losses on."""
    cfg = small_cfg(env="Pendulum-v1", with_vtrace=False, bounds_loss_coeff=1.0, kl_loss_coeff=1.0)
    ppo = PPO(cfg, derive(cfg), make_model(cfg, *BOX), "cpu", guard=NonFiniteGuard(0))
    n = mean.shape[0]
    log_std = torch.zeros(n, 2)
    zeros = torch.zeros(n)
    adv = torch.linspace(-1.0, 1.0, n)
    _, terms = ppo._loss(
        zeros, zeros, zeros, zeros, zeros, adv, zeros, DiagGaussian(mean, log_std), DiagGaussian(old_mean, log_std),
        Part(n, n), valid,
    )  # fmt: skip
    return terms


def test_bounds_and_kl_losses_skip_the_steps_out_of_the_game():
    valid = torch.tensor([1.0, 1.0, 0.0, 1.0, 0.0, 0.0])
    inside = valid > 0
    mean = torch.tensor([[2.5, 0.0], [0.0, -3.0], [40.0, 40.0], [1.0, 1.0], [-50.0, 9.0], [30.0, -30.0]])
    old_mean = mean.clone()
    old_mean[~inside] = 0.0  # only the invalid steps moved since the behaviour policy
    terms = loss_terms(mean, old_mean, valid)
    # The valid steps' own bounds loss: (0.25^2 + 0.5^2 + 0) / 3; the invalid rows' huge excess must not count.
    assert terms["bounds_loss"] == pytest.approx(
        float(bounds_loss(mean[inside], torch.zeros(2), torch.full((2,), 2.0)))
    )
    assert terms["bounds_loss"] == pytest.approx((0.25**2 + 0.5**2) / 3)
    assert terms["kl_loss"] == pytest.approx(0.0, abs=1e-7)  # the valid steps did not move


def test_all_valid_steps_keep_the_plain_means():
    valid = torch.ones(4)
    mean = torch.tensor([[3.0, 0.0], [0.0, 0.0], [0.0, 0.0], [0.0, 0.0]])
    old_mean = torch.zeros(4, 2)
    terms = loss_terms(mean, old_mean, valid)
    assert terms["bounds_loss"] == pytest.approx(0.25 / 4)
    assert terms["kl_loss"] == pytest.approx(0.5 * 9.0 / 4)  # KL of unit Gaussians 3 apart in one dim, over 4 steps
