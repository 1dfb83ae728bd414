"""Unit tests for appo.models.distributions against torch.distributions, plus shapes, modes and space helpers."""

from __future__ import annotations

import gymnasium
import numpy as np
import pytest
import torch
from torch.distributions import Categorical as TorchCategorical
from torch.distributions import Normal, kl_divergence

from appo.models.distributions import Categorical, DiagGaussian, action_dim, num_action_params

B, A, N = 7, 3, 5


def _gaussians() -> tuple[DiagGaussian, DiagGaussian, Normal, Normal]:
    g = torch.Generator().manual_seed(1)
    m1, m2 = torch.randn(B, A, generator=g), torch.randn(B, A, generator=g)
    # A state-independent [A] log-std (as the model uses) and a full [B, A] one, to exercise broadcasting.
    ls1 = torch.randn(A, generator=g) * 0.5
    ls2 = torch.randn(B, A, generator=g) * 0.5
    return DiagGaussian(m1, ls1), DiagGaussian(m2, ls2), Normal(m1, ls1.exp()), Normal(m2, ls2.exp())


def test_diag_gaussian_log_prob_matches_torch() -> None:
    d, _, ref, _ = _gaussians()
    actions = torch.randn(B, A) * 2
    lp = d.log_prob(actions)
    assert lp.shape == (B,)
    torch.testing.assert_close(lp, ref.log_prob(actions).sum(-1))


def test_diag_gaussian_entropy_matches_torch() -> None:
    d, _, ref, _ = _gaussians()
    ent = d.entropy()
    assert ent.shape == (B,)
    torch.testing.assert_close(ent, ref.entropy().sum(-1))


def test_diag_gaussian_kl_matches_torch() -> None:
    d1, d2, r1, r2 = _gaussians()
    kl = d1.kl(d2)
    assert kl.shape == (B,)
    torch.testing.assert_close(kl, kl_divergence(r1, r2).sum(-1))
    torch.testing.assert_close(d2.kl(d1), kl_divergence(r2, r1).sum(-1))
    torch.testing.assert_close(d1.kl(d1), torch.zeros(B), atol=1e-6, rtol=0)


def test_diag_gaussian_sample_shape_mode_and_stats() -> None:
    d, _, _, _ = _gaussians()
    s = d.sample()
    assert s.shape == (B, A) and s.dtype == torch.float32 and not s.requires_grad
    assert torch.equal(d.mode(), d.mean)
    # Empirical moments of many samples match mean/std.
    torch.manual_seed(0)
    mean = torch.tensor([[1.0, -2.0]])
    big = DiagGaussian(mean.expand(20000, 2), torch.log(torch.tensor([0.5, 2.0])))
    xs = big.sample()
    torch.testing.assert_close(xs.mean(0), mean[0], atol=0.05, rtol=0)
    torch.testing.assert_close(xs.std(0), torch.tensor([0.5, 2.0]), atol=0.05, rtol=0)


def test_diag_gaussian_gradients_flow() -> None:
    mean = torch.zeros(B, A, requires_grad=True)
    log_std = torch.zeros(A, requires_grad=True)
    d = DiagGaussian(mean, log_std)
    (d.log_prob(torch.ones(B, A)).sum() + d.entropy().sum()).backward()
    assert mean.grad is not None and log_std.grad is not None and log_std.grad.shape == (A,)


def _categoricals() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(2)
    return torch.randn(B, N, generator=g) * 2, torch.randn(B, N, generator=g) * 2


def test_categorical_log_prob_matches_torch() -> None:
    l1, _ = _categoricals()
    d, ref = Categorical(l1), TorchCategorical(logits=l1)
    actions = torch.randint(0, N, (B,))
    torch.testing.assert_close(d.log_prob(actions), ref.log_prob(actions))
    # A trailing action dim (as stored in rollout buffers) gives the same [B] result.
    lp = d.log_prob(actions.unsqueeze(-1))
    assert lp.shape == (B,)
    torch.testing.assert_close(lp, ref.log_prob(actions))


def test_categorical_entropy_and_kl_match_torch() -> None:
    l1, l2 = _categoricals()
    d1, d2 = Categorical(l1), Categorical(l2)
    r1, r2 = TorchCategorical(logits=l1), TorchCategorical(logits=l2)
    assert d1.entropy().shape == (B,)
    torch.testing.assert_close(d1.entropy(), r1.entropy())
    torch.testing.assert_close(d1.kl(d2), kl_divergence(r1, r2))
    torch.testing.assert_close(d1.kl(d1), torch.zeros(B), atol=1e-6, rtol=0)


def test_categorical_masked_logits_are_finite() -> None:
    logits = torch.tensor([[0.0, float("-inf"), 1.0]])
    d = Categorical(logits)
    assert torch.isfinite(d.entropy()).all()
    torch.testing.assert_close(d.entropy(), TorchCategorical(logits=logits).entropy())
    assert torch.isfinite(d.kl(Categorical(logits))).all()
    for _ in range(50):
        assert d.sample().item() != 1


def test_categorical_sample_shape_mode_and_frequencies() -> None:
    l1, _ = _categoricals()
    d = Categorical(l1)
    s = d.sample()
    assert s.shape == (B,) and s.dtype == torch.int64
    assert ((s >= 0) & (s < N)).all()
    assert torch.equal(d.mode(), l1.argmax(-1))
    torch.manual_seed(0)
    probs = torch.tensor([0.1, 0.6, 0.3])
    big = Categorical(probs.log().expand(30000, 3))
    freq = torch.bincount(big.sample(), minlength=3).float() / 30000
    torch.testing.assert_close(freq, probs, atol=0.02, rtol=0)


def test_action_dim_and_num_action_params() -> None:
    box = gymnasium.spaces.Box(-1.0, 1.0, shape=(4,), dtype=np.float32)
    disc = gymnasium.spaces.Discrete(6)
    assert action_dim(box) == 4 and num_action_params(box) == 4
    assert action_dim(disc) == 1 and num_action_params(disc) == 6


@pytest.mark.parametrize(
    "space",
    [
        gymnasium.spaces.MultiDiscrete([2, 3]),
        gymnasium.spaces.Box(-1.0, 1.0, shape=(2, 2), dtype=np.float32),
        gymnasium.spaces.Tuple((gymnasium.spaces.Discrete(2),)),
    ],
)
def test_unsupported_spaces_raise(space: gymnasium.spaces.Space) -> None:
    with pytest.raises(ValueError, match="unsupported"):
        action_dim(space)
    with pytest.raises(ValueError, match="unsupported"):
        num_action_params(space)
