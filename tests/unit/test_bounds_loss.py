"""PPO's bounds loss: zero for Gaussian means inside the action box, the squared excess in half-widths
outside it, and a gradient that points back into the box (appo/algorithms/ppo/algorithm.py)."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from appo.algorithms.common.losses import bounds_loss
from appo.config.cfg import Cfg
from appo.models.registry import make_model


def test_zero_inside_and_squared_half_widths_outside() -> None:
    centre, half = torch.tensor([0.0, 1.0]), torch.tensor([0.1, 0.5])
    inside = torch.tensor([[0.05, 1.4], [-0.1, 0.5]])
    assert bounds_loss(inside, centre, half).item() == 0.0
    # Row 0: dim 0 is 0.2 beyond +0.1 -> 2 half-widths -> 4; dim 1 inside. Row 1: dim 1 is 0.25 below 0.5 -> 0.25.
    outside = torch.tensor([[0.3, 1.0], [0.0, 0.25]])
    assert bounds_loss(outside, centre, half).item() == pytest.approx((4.0 + 0.25) / 2)


def test_gradient_points_back_into_the_box() -> None:
    mean = torch.tensor([[0.5, -0.7]], requires_grad=True)
    bounds_loss(mean, torch.zeros(2), torch.full((2,), 0.1)).backward()
    assert mean.grad[0, 0] > 0 and mean.grad[0, 1] < 0, mean.grad


def test_model_knows_its_action_box_only_when_finite() -> None:
    obs = gym.spaces.Box(-1, 1, (3,), np.float32)
    model = make_model(Cfg(), obs, gym.spaces.Box(-0.1, 0.1, (2,), np.float32))
    low, high = model.action_bounds
    assert np.allclose(low, -0.1) and np.allclose(high, 0.1)
    assert make_model(Cfg(), obs, gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)).action_bounds is None
    assert make_model(Cfg(), obs, gym.spaces.Discrete(3)).action_bounds is None
