"""Advantage and return targets for the learner.

This module owns the off-policy-corrected value targets (V-trace, Espeholt et al. 2018, "IMPALA") and
Generalized Advantage Estimation (Schulman et al. 2016, "GAE"). Both are pure functions on time-major
tensors: every per-step input is ``[T, B]`` (time first, batch second) and the bootstrap value for the
state after the last step is ``[B]``.

Episode boundaries are folded into ``discounts``: ``discounts[t] = gamma * (1 - done[t])``, so a zero
discount stops both bootstrapping and the backward accumulation at the end of an episode.

The outputs are regression / policy-gradient *targets*, so they are computed under ``torch.no_grad()``:
gradients never flow through them even when the inputs (e.g. ``values`` from the current network)
require grad. `batch_targets` applies them to a batch of trajectories [N, T] as PPO's learner holds them.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import Tensor


def _check_time_major(bootstrap_value: Tensor, **per_step: Tensor) -> None:
    """Validate that every per-step tensor is ``[T, B]`` and ``bootstrap_value`` is ``[B]``."""
    shapes = {name: tuple(t.shape) for name, t in per_step.items()}
    ref_name, ref_shape = next(iter(shapes.items()))
    if len(ref_shape) != 2:
        raise ValueError(f"{ref_name} must be time-major [T, B], got shape {ref_shape}")
    for name, shape in shapes.items():
        if shape != ref_shape:
            raise ValueError(f"{name} has shape {shape}, expected {ref_shape} (same as {ref_name})")
    if tuple(bootstrap_value.shape) != ref_shape[1:]:
        raise ValueError(f"bootstrap_value must be [B]={ref_shape[1:]}, got shape {tuple(bootstrap_value.shape)}")


@torch.no_grad()
def vtrace(
    log_rhos: Tensor,
    discounts: Tensor,
    rewards: Tensor,
    values: Tensor,
    bootstrap_value: Tensor,
    rho_bar: float = 1.0,
    c_bar: float = 1.0,
    pg_rho_bar: float | None = None,
) -> tuple[Tensor, Tensor]:
    """V-trace value targets and policy-gradient advantages (Espeholt et al. 2018, Sec. 4.1 / Remark 1).

    With ``rho_t = pi(a_t|x_t) / mu(a_t|x_t)``::

        rho_t-bar   = min(rho_bar, rho_t)            (clipped_rhos, in delta_t V)
        c_t         = min(c_bar, rho_t)              (cs, trace cutting)
        delta_t V   = rho_t-bar * (r_t + gamma_t V(x_{t+1}) - V(x_t))
        v_s         = V(x_s) + sum_{t>=s} (prod_{i=s}^{t-1} gamma_i c_i) delta_t V
                    = V(x_s) + delta_s V + gamma_s c_s (v_{s+1} - V(x_{s+1}))
        A_s         = min(pg_rho_bar, rho_s) * (r_s + gamma_s v_{s+1} - V(x_s))

    where ``V(x_T) = v_T = bootstrap_value``.

    Args:
        log_rhos: ``[T, B]`` float, ``log pi(a_t|x_t) - log mu(a_t|x_t)`` (target minus behaviour policy).
        discounts: ``[T, B]`` float, ``gamma * (1 - done_t)``; 0 where the episode ended at step t.
        rewards: ``[T, B]`` float, ``r_t``.
        values: ``[T, B]`` float, ``V(x_t)`` under the current value function.
        bootstrap_value: ``[B]`` float, ``V(x_T)`` for the state following the last step.
        rho_bar: truncation level for the importance weights in ``delta_t V`` (may be ``float('inf')``).
        c_bar: truncation level for the trace coefficients ``c_i`` (may be ``float('inf')``).
        pg_rho_bar: truncation level for the policy-gradient importance weight; ``None`` means ``rho_bar``.

    Returns:
        ``(vs, pg_advantages)``, both ``[T, B]`` with the dtype of ``values``, detached (no grad).
    """
    _check_time_major(bootstrap_value, log_rhos=log_rhos, discounts=discounts, rewards=rewards, values=values)
    if pg_rho_bar is None:
        pg_rho_bar = rho_bar

    rhos = torch.exp(log_rhos)
    # clamp(max=inf) is a no-op, so infinite truncation levels need no special casing.
    clipped_rhos = torch.clamp(rhos, max=rho_bar)
    cs = torch.clamp(rhos, max=c_bar)

    values_t_plus_1 = torch.cat([values[1:], bootstrap_value.unsqueeze(0)], dim=0)
    deltas = clipped_rhos * (rewards + discounts * values_t_plus_1 - values)

    # Backward recursion acc_t = delta_t + gamma_t c_t acc_{t+1}, acc_T = 0; acc_t = v_t - V(x_t).
    # Precomputing gamma_t c_t keeps the Python loop to one fused multiply-add per time step.
    discounted_cs = discounts * cs
    vs_minus_v_xs = torch.empty_like(deltas)
    acc = torch.zeros_like(bootstrap_value, dtype=deltas.dtype)
    for t in range(deltas.shape[0] - 1, -1, -1):
        acc = deltas[t] + discounted_cs[t] * acc
        vs_minus_v_xs[t] = acc
    vs = values + vs_minus_v_xs

    vs_t_plus_1 = torch.cat([vs[1:], bootstrap_value.unsqueeze(0)], dim=0)
    clipped_pg_rhos = torch.clamp(rhos, max=pg_rho_bar)
    pg_advantages = clipped_pg_rhos * (rewards + discounts * vs_t_plus_1 - values)
    return vs, pg_advantages


@torch.no_grad()
def gae(
    discounts: Tensor,
    rewards: Tensor,
    values: Tensor,
    bootstrap_value: Tensor,
    lam: float,
) -> tuple[Tensor, Tensor]:
    """Generalized Advantage Estimation (Schulman et al. 2016, Eq. 16) on time-major tensors.

    ::

        delta_t = r_t + gamma_t V(x_{t+1}) - V(x_t)
        A_t     = delta_t + gamma_t lambda A_{t+1}        (A_T = 0)
        R_t     = A_t + V(x_t)

    where ``V(x_T) = bootstrap_value``. ``lam=1`` gives the bootstrapped Monte-Carlo return,
    ``lam=0`` the one-step TD target.

    Args:
        discounts: ``[T, B]`` float, ``gamma * (1 - done_t)``; 0 where the episode ended at step t.
        rewards: ``[T, B]`` float, ``r_t``.
        values: ``[T, B]`` float, ``V(x_t)``.
        bootstrap_value: ``[B]`` float, ``V(x_T)`` for the state following the last step.
        lam: the GAE ``lambda`` in ``[0, 1]``.

    Returns:
        ``(advantages, returns)``, both ``[T, B]`` with the dtype of ``values``, detached (no grad).
    """
    _check_time_major(bootstrap_value, discounts=discounts, rewards=rewards, values=values)

    values_t_plus_1 = torch.cat([values[1:], bootstrap_value.unsqueeze(0)], dim=0)
    deltas = rewards + discounts * values_t_plus_1 - values

    discounted_lams = discounts * lam
    advantages = torch.empty_like(deltas)
    acc = torch.zeros_like(bootstrap_value, dtype=deltas.dtype)
    for t in range(deltas.shape[0] - 1, -1, -1):
        acc = deltas[t] + discounted_lams[t] * acc
        advantages[t] = acc
    returns = advantages + values
    return advantages, returns


@torch.no_grad()
def return_to_go(rewards: Tensor, gamma: float = 1.0, mask: Tensor | None = None) -> Tensor:
    """Z_t = sum_k gamma^k r_{t+k} along the last dim, within each episode: rewards [..., T] (CPU); `mask` [..., T]
    1.0 on the steps taken, 0 on padding after an episode's end (None: all taken). Accumulated in float64 and
    returned in the dtype of `rewards`; padding gets 0. The one return-to-go: UDRL's relabelling (gamma 1), RCP-R's
    conditioning and MAML's baseline targets."""
    r = rewards.double().numpy()
    m = None if mask is None else mask.double().numpy()
    out = np.empty_like(r)
    running = np.zeros(r.shape[:-1])
    for t in range(r.shape[-1] - 1, -1, -1):
        if m is None:
            running = r[..., t] + gamma * running
            out[..., t] = running
        else:
            running = r[..., t] + gamma * running * m[..., t]
            out[..., t] = running * m[..., t]
    return torch.from_numpy(out).to(rewards.dtype)


def batch_targets(
    cfg: Any, returns_normalizer: Any, b: dict[str, Tensor], values_n: Tensor, log_rhos: Tensor | None
) -> tuple[Tensor, Tensor]:
    """PPO's advantages and value targets [N, T] (raw reward units) for a batch of trajectories b (rewards, dones,
    truncated [N, T]) from their normalised values values_n [N, T + 1] (the bootstrap step's last): V-trace's where
    `log_rhos` [N, T] are given, else GAE's; `returns_normalizer` (or None) takes the values to reward units."""
    rn = returns_normalizer
    values = rn.denormalize(values_n) if rn is not None else values_n
    rewards = b["rewards"]
    if cfg.value_bootstrap:
        # A time-limit truncation is not a death: add the discounted value of the state instead of
        # zero. V(s_t) stands in for V(s_{t+1}) because the post-step observation was replaced by reset.
        rewards = rewards + cfg.gamma * values[:, :-1] * b["truncated"]
    discounts = cfg.gamma * (1.0 - b["dones"])
    tm = lambda x: x.transpose(0, 1)  # noqa: E731 - [N, T] -> time-major [T, N]
    if log_rhos is not None:
        vs, adv = vtrace(
            tm(log_rhos), tm(discounts), tm(rewards), tm(values[:, :-1]), values[:, -1], cfg.vtrace_rho, cfg.vtrace_c
        )
        return tm(adv), tm(vs)
    adv, returns = gae(tm(discounts), tm(rewards), tm(values[:, :-1]), values[:, -1], cfg.gae_lambda)
    return tm(adv), tm(returns)
