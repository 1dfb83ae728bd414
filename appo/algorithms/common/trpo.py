"""TRPO's outer step (Schulman et al. 2015, appendix C), as pure functions on flat parameter vectors: conjugate
gradient on a Hessian-vector product, the step scaled to the KL bound, and a backtracking line search that
accepts only an improvement within the bound. MAML-TRPO (appo/maml/algorithm.py) takes its meta-step here.

The line search never writes the parameters it is searching from: it evaluates candidates as vectors and returns
the accepted one, or the starting vector itself when none is accepted, so a rejected step leaves every parameter
bit-identical (the caller writes parameters only on acceptance)."""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch
from torch import Tensor


def conjugate_gradient(hvp: Callable[[Tensor], Tensor], b: Tensor, iters: int = 10, tol: float = 1e-10) -> Tensor:
    """x with hvp(x) ~ b after at most `iters` iterations (H symmetric positive definite); x starts at 0."""
    x = torch.zeros_like(b)
    r = b.clone()
    p = b.clone()
    rr = torch.dot(r, r)
    for _ in range(iters):
        if float(rr) < tol:
            break
        Hp = hvp(p)
        alpha = rr / torch.dot(p, Hp)
        x = x + alpha * p
        r = r - alpha * Hp
        rr_new = torch.dot(r, r)
        p = r + (rr_new / rr) * p
        rr = rr_new
    return x


class LineSearchResult(NamedTuple):
    params: Tensor  # the accepted parameters, or the starting ones (the same tensor object) when rejected
    is_accepted: bool
    steps: int  # candidates evaluated
    loss: float  # the loss at `params`
    kl: float  # the KL at `params` (0 when rejected)


def line_search(
    evaluate: Callable[[Tensor], tuple[float, float]],
    params: Tensor,
    full_step: Tensor,
    loss_before: float,
    max_kl: float,
    max_steps: int = 15,
    backtrack_ratio: float = 0.8,
) -> LineSearchResult:
    """Try params - ratio^k * full_step for k = 0..max_steps-1; accept the first whose loss is lower than
    `loss_before` and whose KL (`evaluate` returns (loss, kl)) is within `max_kl`."""
    for k in range(max_steps):
        candidate = params - backtrack_ratio**k * full_step
        loss, kl = evaluate(candidate)
        if loss < loss_before and kl <= max_kl:  # NaN fails both tests
            return LineSearchResult(candidate, True, k + 1, loss, kl)
    return LineSearchResult(params, False, max_steps, loss_before, 0.0)


def step_direction(
    grad: Tensor, hvp: Callable[[Tensor], Tensor], max_kl: float, cg_iters: int, damping: float
) -> tuple[Tensor, float]:
    """The full step s * sqrt(2 max_kl / s^T H s), s = (H + damping I)^-1 grad, and s^T H s."""

    def damped(v: Tensor) -> Tensor:
        return hvp(v) + damping * v

    s = conjugate_gradient(damped, grad, cg_iters)
    shs = float(torch.dot(s, damped(s)))
    if not shs > 0:  # also NaN: no step the bound can scale
        return torch.zeros_like(s), shs
    return s * (2.0 * max_kl / shs) ** 0.5, shs
