"""Tests for appo.algorithms.common.returns: V-trace and GAE against slow, paper-notation references."""

from __future__ import annotations

import math

import pytest
import torch

from appo.algorithms.common.returns import gae, vtrace

T, B = 13, 5
GAMMA = 0.97


def _random_rollout(seed: int, T: int = T, B: int = B) -> dict[str, torch.Tensor]:
    """Random float64 rollout with episode ends and importance ratios on both sides of 1."""
    g = torch.Generator().manual_seed(seed)
    # Spread log-ratios so rho = exp(log_rho) ranges roughly over [0.2, 5]: clipping at 1.0 / 0.9 is active.
    log_rhos = torch.empty(T, B, dtype=torch.float64).uniform_(-1.6, 1.6, generator=g)
    dones = torch.rand(T, B, generator=g, dtype=torch.float64) < 0.2
    dones[T // 2, 0] = True  # guarantee at least one episode end
    discounts = GAMMA * (1.0 - dones.to(torch.float64))
    rewards = torch.randn(T, B, generator=g, dtype=torch.float64)
    values = torch.randn(T, B, generator=g, dtype=torch.float64)
    bootstrap_value = torch.randn(B, generator=g, dtype=torch.float64)
    return {
        "log_rhos": log_rhos,
        "discounts": discounts,
        "rewards": rewards,
        "values": values,
        "bootstrap_value": bootstrap_value,
    }


def _vtrace_reference(
    log_rhos: torch.Tensor,
    discounts: torch.Tensor,
    rewards: torch.Tensor,
    values: torch.Tensor,
    bootstrap_value: torch.Tensor,
    rho_bar: float,
    c_bar: float,
    pg_rho_bar: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Element-wise Python loops over the closed-form sum of Espeholt et al. 2018, Eq. (1).

    v_s = V(x_s) + sum_{t=s}^{T-1} (prod_{i=s}^{t-1} gamma_i c_i) delta_t V,
    delta_t V = rho_t-bar (r_t + gamma_t V(x_{t+1}) - V(x_t)), V(x_T) = v_T = bootstrap.
    """
    n_t, n_b = values.shape
    vs = [[0.0] * n_b for _ in range(n_t)]
    pg = [[0.0] * n_b for _ in range(n_t)]
    for b in range(n_b):
        rho = [math.exp(log_rhos[t, b].item()) for t in range(n_t)]
        gamma = [discounts[t, b].item() for t in range(n_t)]
        r = [rewards[t, b].item() for t in range(n_t)]
        V = [values[t, b].item() for t in range(n_t)] + [bootstrap_value[b].item()]
        delta = [min(rho_bar, rho[t]) * (r[t] + gamma[t] * V[t + 1] - V[t]) for t in range(n_t)]
        c = [min(c_bar, rho[t]) for t in range(n_t)]
        v = [0.0] * n_t + [bootstrap_value[b].item()]
        for s in range(n_t):
            total = 0.0
            for t in range(s, n_t):
                prod = 1.0
                for i in range(s, t):
                    prod *= gamma[i] * c[i]
                total += prod * delta[t]
            v[s] = V[s] + total
        for s in range(n_t):
            vs[s][b] = v[s]
            pg[s][b] = min(pg_rho_bar, rho[s]) * (r[s] + gamma[s] * v[s + 1] - V[s])
    return torch.tensor(vs, dtype=torch.float64), torch.tensor(pg, dtype=torch.float64)


def _gae_reference(
    discounts: torch.Tensor,
    rewards: torch.Tensor,
    values: torch.Tensor,
    bootstrap_value: torch.Tensor,
    lam: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Element-wise closed form A_t = sum_{l>=0} (prod_{i<l} gamma_{t+i} lambda) delta_{t+l}."""
    n_t, n_b = values.shape
    adv = [[0.0] * n_b for _ in range(n_t)]
    for b in range(n_b):
        gamma = [discounts[t, b].item() for t in range(n_t)]
        V = [values[t, b].item() for t in range(n_t)] + [bootstrap_value[b].item()]
        delta = [rewards[t, b].item() + gamma[t] * V[t + 1] - V[t] for t in range(n_t)]
        for t in range(n_t):
            total, weight = 0.0, 1.0
            for k in range(t, n_t):
                total += weight * delta[k]
                weight *= gamma[k] * lam
            adv[t][b] = total
    advantages = torch.tensor(adv, dtype=torch.float64)
    return advantages, advantages + values


@pytest.mark.parametrize(
    ("rho_bar", "c_bar", "pg_rho_bar"),
    [(1.0, 0.9, 1.3), (1.0, 1.0, 0.8), (2.0, 0.9, None), (math.inf, math.inf, math.inf)],
)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_vtrace_matches_closed_form_reference(
    seed: int, rho_bar: float, c_bar: float, pg_rho_bar: float | None
) -> None:
    data = _random_rollout(seed)
    rhos = data["log_rhos"].exp()
    # The inputs must actually exercise clipping, otherwise the test proves little.
    assert (rhos > 1.3).any() and (rhos < 0.8).any()
    assert (data["discounts"] == 0).any()

    vs, pg_adv = vtrace(**data, rho_bar=rho_bar, c_bar=c_bar, pg_rho_bar=pg_rho_bar)
    ref_pg_rho_bar = rho_bar if pg_rho_bar is None else pg_rho_bar
    ref_vs, ref_pg = _vtrace_reference(**data, rho_bar=rho_bar, c_bar=c_bar, pg_rho_bar=ref_pg_rho_bar)

    assert vs.shape == (T, B) and pg_adv.shape == (T, B)
    assert vs.dtype == torch.float64 and pg_adv.dtype == torch.float64
    torch.testing.assert_close(vs, ref_vs, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(pg_adv, ref_pg, rtol=1e-10, atol=1e-10)


def test_vtrace_pg_rho_bar_none_means_rho_bar() -> None:
    data = _random_rollout(3)
    vs_a, pg_a = vtrace(**data, rho_bar=1.0, c_bar=0.9, pg_rho_bar=None)
    vs_b, pg_b = vtrace(**data, rho_bar=1.0, c_bar=0.9, pg_rho_bar=1.0)
    torch.testing.assert_close(vs_a, vs_b, rtol=0, atol=0)
    torch.testing.assert_close(pg_a, pg_b, rtol=0, atol=0)


def test_vtrace_on_policy_equals_n_step_returns() -> None:
    data = _random_rollout(4)
    log_rhos = torch.zeros_like(data["log_rhos"])  # pi == mu
    discounts, rewards, values, bootstrap = data["discounts"], data["rewards"], data["values"], data["bootstrap_value"]

    vs, pg_adv = vtrace(log_rhos, discounts, rewards, values, bootstrap, rho_bar=math.inf, c_bar=math.inf)

    # On-policy, untruncated V-trace reduces to the n-step bootstrapped return G_t = r_t + gamma_t G_{t+1}.
    expected = torch.zeros_like(rewards)
    for b in range(B):
        g = bootstrap[b].item()
        for t in reversed(range(T)):
            g = rewards[t, b].item() + discounts[t, b].item() * g
            expected[t, b] = g
    torch.testing.assert_close(vs, expected, rtol=1e-10, atol=1e-10)
    # ... and the policy-gradient advantage is then r_t + gamma_t G_{t+1} - V(x_t) = G_t - V(x_t).
    torch.testing.assert_close(pg_adv, expected - values, rtol=1e-10, atol=1e-10)


def test_vtrace_episode_end_blocks_bootstrap() -> None:
    # A single step that ends the episode: v_0 = V_0 + rho-bar (r_0 - V_0), bootstrap must not leak in.
    log_rhos = torch.tensor([[math.log(2.0)]], dtype=torch.float64)
    discounts = torch.zeros(1, 1, dtype=torch.float64)
    rewards = torch.tensor([[1.0]], dtype=torch.float64)
    values = torch.tensor([[0.5]], dtype=torch.float64)
    bootstrap = torch.tensor([100.0], dtype=torch.float64)
    vs, pg_adv = vtrace(log_rhos, discounts, rewards, values, bootstrap, rho_bar=1.0, c_bar=1.0, pg_rho_bar=1.5)
    # rho = 2 -> clipped to 1: v_0 = 0.5 + 1 * (1 - 0.5) = 1.0; pg = min(1.5, 2) * (1 - 0.5) = 0.75.
    torch.testing.assert_close(vs, torch.tensor([[1.0]], dtype=torch.float64))
    torch.testing.assert_close(pg_adv, torch.tensor([[0.75]], dtype=torch.float64))


def test_vtrace_outputs_carry_no_grad() -> None:
    data = _random_rollout(5)
    data = {k: v.clone().requires_grad_(True) for k, v in data.items()}
    vs, pg_adv = vtrace(**data)
    assert not vs.requires_grad
    assert not pg_adv.requires_grad
    assert vs.grad_fn is None and pg_adv.grad_fn is None


def test_vtrace_float32_matches_float64() -> None:
    data = _random_rollout(6)
    vs64, pg64 = vtrace(**data, rho_bar=1.0, c_bar=0.9)
    vs32, pg32 = vtrace(**{k: v.float() for k, v in data.items()}, rho_bar=1.0, c_bar=0.9)
    assert vs32.dtype == torch.float32
    torch.testing.assert_close(vs32, vs64.float(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(pg32, pg64.float(), rtol=1e-5, atol=1e-5)


def test_vtrace_rejects_bad_shapes() -> None:
    data = _random_rollout(7)
    with pytest.raises(ValueError):
        vtrace(**{**data, "bootstrap_value": data["values"]})
    with pytest.raises(ValueError):
        vtrace(**{**data, "rewards": data["rewards"][:-1]})


@pytest.mark.parametrize("lam", [0.0, 0.95, 1.0])
@pytest.mark.parametrize("seed", [0, 1])
def test_gae_matches_reference(seed: int, lam: float) -> None:
    data = _random_rollout(seed)
    del data["log_rhos"]
    assert (data["discounts"] == 0).any()
    advantages, returns = gae(**data, lam=lam)
    ref_adv, ref_ret = _gae_reference(**data, lam=lam)
    assert advantages.shape == (T, B) and returns.shape == (T, B)
    torch.testing.assert_close(advantages, ref_adv, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(returns, ref_ret, rtol=1e-10, atol=1e-10)


def test_gae_constant_value_has_zero_advantage() -> None:
    # With V constant and r = (1 - gamma) V, every TD error is r + gamma V - V = 0, so A_t = 0 for any lambda.
    v = 3.0
    values = torch.full((T, B), v, dtype=torch.float64)
    rewards = torch.full((T, B), (1.0 - GAMMA) * v, dtype=torch.float64)
    discounts = torch.full((T, B), GAMMA, dtype=torch.float64)
    bootstrap = torch.full((B,), v, dtype=torch.float64)
    advantages, returns = gae(discounts, rewards, values, bootstrap, lam=0.95)
    torch.testing.assert_close(advantages, torch.zeros_like(advantages), rtol=0, atol=1e-12)
    torch.testing.assert_close(returns, values, rtol=0, atol=1e-12)


def test_gae_lambda_one_is_bootstrapped_monte_carlo_return() -> None:
    data = _random_rollout(8)
    discounts = torch.full((T, B), GAMMA, dtype=torch.float64)  # no episode ends
    rewards, values, bootstrap = data["rewards"], data["values"], data["bootstrap_value"]
    _, returns = gae(discounts, rewards, values, bootstrap, lam=1.0)
    # G_t = sum_{k=t}^{T-1} gamma^{k-t} r_k + gamma^{T-t} V(x_T), independent of the values V(x_t).
    expected = torch.zeros_like(rewards)
    for t in range(T):
        for b in range(B):
            g = sum(GAMMA ** (k - t) * rewards[k, b].item() for k in range(t, T))
            expected[t, b] = g + GAMMA ** (T - t) * bootstrap[b].item()
    torch.testing.assert_close(returns, expected, rtol=1e-10, atol=1e-10)


def test_gae_outputs_carry_no_grad() -> None:
    data = _random_rollout(9)
    del data["log_rhos"]
    data = {k: v.clone().requires_grad_(True) for k, v in data.items()}
    advantages, returns = gae(**data, lam=0.95)
    assert not advantages.requires_grad and not returns.requires_grad
