"""Tests for appo.algorithms.common.losses on tiny cases whose expected values are worked out by hand."""

from __future__ import annotations

import math

import pytest
import torch

from appo.algorithms.common.losses import entropy_loss, policy_loss, value_loss

CLIP = 0.2


def _log_probs(ratios: list[float]) -> tuple[torch.Tensor, torch.Tensor]:
    """(log_prob, old_log_prob) in float64 whose exp-difference equals the given ratios."""
    old_log_prob = torch.full((len(ratios),), -1.0, dtype=torch.float64)
    log_prob = (old_log_prob + torch.tensor(ratios, dtype=torch.float64).log()).requires_grad_(True)
    return log_prob, old_log_prob


def test_policy_loss_positive_advantage_is_clipped() -> None:
    log_prob, old_log_prob = _log_probs([1.5])
    advantages = torch.tensor([2.0], dtype=torch.float64)
    loss, _ = policy_loss(log_prob, old_log_prob, advantages, CLIP)
    # unclipped 1.5 * 2 = 3.0, clipped 1.2 * 2 = 2.4 -> min 2.4 -> loss -2.4
    assert loss.item() == pytest.approx(-2.4)
    # The clipped branch is constant in log_prob, so no gradient pushes the ratio further up.
    loss.backward()
    assert log_prob.grad is not None
    assert log_prob.grad.item() == pytest.approx(0.0)


def test_policy_loss_negative_advantage_picks_unclipped() -> None:
    log_prob, old_log_prob = _log_probs([1.5])
    advantages = torch.tensor([-1.0], dtype=torch.float64)
    loss, _ = policy_loss(log_prob, old_log_prob, advantages, CLIP)
    # unclipped 1.5 * -1 = -1.5, clipped 1.2 * -1 = -1.2 -> min -1.5 -> loss 1.5
    assert loss.item() == pytest.approx(1.5)
    # d(-ratio * A)/d log_prob = -ratio * A = -1.5 * -1 = 1.5: the gradient still pulls the ratio back down.
    loss.backward()
    assert log_prob.grad is not None
    assert log_prob.grad.item() == pytest.approx(1.5)


def test_policy_loss_low_ratio_cases_and_batch_mean() -> None:
    log_prob, old_log_prob = _log_probs([1.5, 1.5, 0.5, 0.5])
    advantages = torch.tensor([2.0, -1.0, 1.0, -1.0], dtype=torch.float64)
    loss, stats = policy_loss(log_prob, old_log_prob, advantages, CLIP)
    # per-sample min(ratio * A, clip(ratio) * A):
    #   r=1.5, A= 2: min(3.0, 2.4)   =  2.4
    #   r=1.5, A=-1: min(-1.5, -1.2) = -1.5
    #   r=0.5, A= 1: min(0.5, 0.8)   =  0.5   (unclipped: no credit for raising a low ratio past 0.8)
    #   r=0.5, A=-1: min(-0.5, -0.8) = -0.8
    # mean = (2.4 - 1.5 + 0.5 - 0.8) / 4 = 0.15 -> loss -0.15
    assert loss.item() == pytest.approx(-0.15)
    # all |r - 1| = 0.5 > 0.2 -> clip_fraction 1; ratio_mean = (1.5 + 1.5 + 0.5 + 0.5) / 4 = 1.0
    assert stats["clip_fraction"].item() == pytest.approx(1.0)
    assert stats["ratio_mean"].item() == pytest.approx(1.0)


def test_policy_loss_clip_fraction() -> None:
    log_prob, old_log_prob = _log_probs([1.0, 1.1, 1.5, 0.7])
    advantages = torch.ones(4, dtype=torch.float64)
    _, stats = policy_loss(log_prob, old_log_prob, advantages, CLIP)
    # |r - 1| = 0.0, 0.1, 0.5, 0.3 -> two of four exceed 0.2
    assert stats["clip_fraction"].item() == pytest.approx(0.5)


def test_policy_loss_approx_kl() -> None:
    # Identical policies: ratio 1 everywhere -> (1 - 1) - log 1 = 0, and the loss is just -mean(A).
    old_log_prob = torch.tensor([-0.3, -1.2, -2.0], dtype=torch.float64)
    log_prob = old_log_prob.clone().requires_grad_(True)
    advantages = torch.tensor([1.0, -2.0, 4.0], dtype=torch.float64)
    loss, stats = policy_loss(log_prob, old_log_prob, advantages, CLIP)
    assert stats["approx_kl"].item() == 0.0
    assert stats["clip_fraction"].item() == 0.0
    assert stats["ratio_mean"].item() == pytest.approx(1.0)
    assert loss.item() == pytest.approx(-1.0)  # -(1 - 2 + 4) / 3

    # ratio 2: k3 = (2 - 1) - log 2 = 1 - 0.693147... = 0.306853...
    log_prob, old_log_prob = _log_probs([2.0])
    _, stats = policy_loss(log_prob, old_log_prob, torch.ones(1, dtype=torch.float64), CLIP)
    assert stats["approx_kl"].item() == pytest.approx(1.0 - math.log(2.0))


def test_policy_loss_stats_are_detached() -> None:
    log_prob, old_log_prob = _log_probs([1.3, 0.6])
    _, stats = policy_loss(log_prob, old_log_prob, torch.ones(2, dtype=torch.float64), CLIP)
    assert set(stats) == {"approx_kl", "clip_fraction", "ratio_mean"}
    for value in stats.values():
        assert not value.requires_grad
        assert value.dim() == 0


def test_value_loss_clipping_picks_larger_error() -> None:
    values = torch.tensor([1.0], dtype=torch.float64, requires_grad=True)
    old_values = torch.tensor([0.0], dtype=torch.float64)
    targets = torch.tensor([1.0], dtype=torch.float64)
    loss = value_loss(values, old_values, targets, clip_value=0.2)
    # unclipped (1 - 1)^2 = 0; clipped v = 0 + clamp(1, -0.2, 0.2) = 0.2 -> (0.2 - 1)^2 = 0.64
    # max = 0.64 -> loss 0.5 * 0.64 = 0.32, and the clipped branch gives no gradient.
    assert loss.item() == pytest.approx(0.32)
    loss.backward()
    assert values.grad is not None
    assert values.grad.item() == pytest.approx(0.0)


def test_value_loss_clipping_keeps_unclipped_when_larger() -> None:
    values = torch.tensor([1.0, -0.5], dtype=torch.float64)
    old_values = torch.tensor([0.0, 0.0], dtype=torch.float64)
    targets = torch.tensor([0.0, 0.0], dtype=torch.float64)
    loss = value_loss(values, old_values, targets, clip_value=0.2)
    # sample 0: unclipped (1 - 0)^2 = 1,      clipped (0.2 - 0)^2 = 0.04  -> 1
    # sample 1: unclipped (-0.5 - 0)^2 = 0.25, clipped (-0.2 - 0)^2 = 0.04 -> 0.25
    # 0.5 * mean(1, 0.25) = 0.3125
    assert loss.item() == pytest.approx(0.3125)


@pytest.mark.parametrize("clip_value", [None, 0.0, -1.0])
def test_value_loss_without_clipping(clip_value: float | None) -> None:
    values = torch.tensor([1.0, 3.0], dtype=torch.float64)
    # Far from values: with clipping on, old + clamp(v - old) ~ 4.8 would dominate the max and change the result.
    old_values = torch.tensor([5.0, 5.0], dtype=torch.float64)
    targets = torch.tensor([0.0, 0.0], dtype=torch.float64)
    # 0.5 * mean(1^2, 3^2) = 0.5 * 5 = 2.5
    assert value_loss(values, old_values, targets, clip_value).item() == pytest.approx(2.5)


def test_huber_value_loss_is_squared_below_the_delta_and_linear_beyond_it() -> None:
    """MAPPO's Huber value loss (delta 10): 0.5 e^2 for |e| <= delta, delta * (|e| - delta / 2) beyond; clipped, the
    larger of the clipped and unclipped values' losses, as the squared error's."""
    values, targets = torch.tensor([1.0, 30.0, -20.0]), torch.zeros(3)
    expected = [0.5, 10.0 * (30.0 - 5.0), 10.0 * (20.0 - 5.0)]
    loss = value_loss(values, values, targets, clip_value=None, huber_delta=10.0)
    assert loss.item() == pytest.approx(sum(expected) / 3)
    assert value_loss(values, values, targets, None).item() == pytest.approx((0.5 + 450.0 + 200.0) / 3)
    # clipped: old values 0, clip 0.2 -> clipped values 0.2, 0.2, -0.2 (errors below the delta): the unclipped win
    clipped = value_loss(values, torch.zeros(3), targets, clip_value=0.2, huber_delta=10.0)
    assert clipped.item() == pytest.approx(sum(expected) / 3)
    small = torch.tensor([0.5], requires_grad=True)  # clipped error 0.7 vs 0.5: the clipped one is larger
    clipped = value_loss(small, torch.tensor([0.9]), torch.tensor([0.0]), clip_value=0.2, huber_delta=10.0)
    assert clipped.item() == pytest.approx(0.5 * 0.7**2)


def test_entropy_loss() -> None:
    entropy = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64, requires_grad=True)
    loss = entropy_loss(entropy)
    # -(1 + 2 + 3) / 3 = -2; gradient -1/3 per element (minimising raises entropy)
    assert loss.item() == pytest.approx(-2.0)
    loss.backward()
    assert entropy.grad is not None
    torch.testing.assert_close(entropy.grad, torch.full((3,), -1.0 / 3.0, dtype=torch.float64))


def test_ppo_loss_trains_on_valid_steps_only_and_not_at_all_without_any(tmp_path):
    """Multi-agent rows out of their game carry `valid` 0: PPO's loss over a minibatch is its loss over the valid
    steps alone, and a minibatch with none gives a zero loss and zero gradients (not a loss over the invalid steps)."""
    from appo.algorithms.ppo.algorithm import Part
    from tests.unit.test_learner import make_learner, small_cfg

    algo = make_learner(small_cfg(), tmp_path).algorithm
    gen = torch.Generator().manual_seed(0)
    n = 12
    values = torch.randn(n, generator=gen, requires_grad=True)
    log_probs = torch.randn(n, generator=gen, requires_grad=True)
    inputs = [torch.randn(n, generator=gen) for _ in range(5)]  # old log-probs, entropy, old values, adv, targets

    def loss(valid, rows=slice(None)):
        old_lp, entropy, old_v, adv, targets = (x[rows] for x in inputs)
        lp, v = log_probs[rows], values[rows]
        return algo._loss(lp, old_lp, entropy, v, old_v, adv, targets, None, None, Part(n, n), valid)[0]

    valid = torch.tensor([1.0, 0.0] * (n // 2))
    assert loss(valid).item() == pytest.approx(loss(None, slice(0, n, 2)).item(), rel=1e-6)
    none = loss(torch.zeros(n))
    assert none.item() == 0.0
    none.backward()
    assert torch.count_nonzero(values.grad) == 0 and torch.count_nonzero(log_probs.grad) == 0
