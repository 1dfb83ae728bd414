"""PPO loss terms for the learner.

Pure functions that turn per-sample tensors (any shape, typically flattened ``[T * B]``) into scalar
losses. Each returns a quantity to *minimise*; weighting by coefficients (value/entropy coefficients)
is left to the caller so these stay independently testable.
"""

from __future__ import annotations

import torch
from torch import Tensor


def policy_loss(
    log_prob: Tensor,
    old_log_prob: Tensor,
    advantages: Tensor,
    clip_ratio: float,
) -> tuple[Tensor, dict[str, Tensor]]:
    """PPO clipped surrogate objective (Schulman et al. 2017, Eq. 7), negated for minimisation.

    ``ratio = exp(log_prob - old_log_prob)``;
    ``loss = -mean(min(ratio * A, clamp(ratio, 1 - clip_ratio, 1 + clip_ratio) * A))``.

    Args:
        log_prob: float tensor, ``log pi_theta(a|s)`` under the current policy (carries grad).
        old_log_prob: float tensor, same shape, ``log pi_theta_old(a|s)`` from the behaviour policy.
        advantages: float tensor, same shape, advantage estimates (treated as constants).
        clip_ratio: PPO ``epsilon``, e.g. 0.2.

    Returns:
        ``(loss, stats)``: ``loss`` is a scalar tensor; ``stats`` holds detached scalars
        ``approx_kl`` (k3 estimator of KL(old || new)), ``clip_fraction`` (share of samples with
        ``|ratio - 1| > clip_ratio``) and ``ratio_mean``.
    """
    # Advantages are targets; detaching guards against callers passing a graph-connected tensor.
    advantages = advantages.detach()
    log_ratio = log_prob - old_log_prob
    ratio = torch.exp(log_ratio)
    surr_unclipped = ratio * advantages
    surr_clipped = torch.clamp(ratio, 1.0 - clip_ratio, 1.0 + clip_ratio) * advantages
    loss = -torch.min(surr_unclipped, surr_clipped).mean()

    with torch.no_grad():
        # k3 = (r - 1) - log r: unbiased for KL(old || new), always >= 0 and lower variance than
        # -log r (http://joschu.net/blog/kl-approx.html).
        approx_kl = ((ratio - 1.0) - log_ratio).mean()
        clip_fraction = ((ratio - 1.0).abs() > clip_ratio).to(ratio.dtype).mean()
        ratio_mean = ratio.mean()
    stats = {"approx_kl": approx_kl, "clip_fraction": clip_fraction, "ratio_mean": ratio_mean}
    return loss, stats


def value_loss(
    values: Tensor,
    old_values: Tensor,
    targets: Tensor,
    clip_value: float | None,
    huber_delta: float = 0.0,
) -> Tensor:
    """Squared-error value loss, optionally with PPO-style value clipping; with ``huber_delta`` > 0 the squared error
    0.5 e^2 becomes the Huber loss (the same below the delta, delta * (|e| - delta / 2) beyond it: MAPPO's, delta 10),
    clipped or not.

    With clipping (``clip_value`` not ``None`` and ``> 0``)::

        v_clipped = old_v + clamp(v - old_v, -clip_value, clip_value)
        loss      = 0.5 * mean(max((v - target)^2, (v_clipped - target)^2))

    Taking the max makes the loss pessimistic: moving the value further than ``clip_value`` away from
    the behaviour-time estimate earns no reduction in loss. Without clipping,
    ``loss = 0.5 * mean((v - target)^2)``.

    Args:
        values: float tensor, ``V_theta(s)`` from the current network (carries grad).
        old_values: float tensor, same shape, value estimates recorded at rollout time.
        targets: float tensor, same shape, regression targets (e.g. V-trace ``vs`` or GAE returns).
        clip_value: clipping range for ``v - old_v``; ``None`` or ``<= 0`` disables clipping.

    Returns:
        Scalar loss tensor.
    """
    targets = targets.detach()
    unclipped = _error_loss(values - targets, huber_delta)
    if clip_value is None or clip_value <= 0:
        return unclipped.mean()
    old_values = old_values.detach()
    values_clipped = old_values + torch.clamp(values - old_values, -clip_value, clip_value)
    return torch.max(unclipped, _error_loss(values_clipped - targets, huber_delta)).mean()


def _error_loss(error: Tensor, huber_delta: float) -> Tensor:
    """0.5 e^2 per element, or the Huber loss with `huber_delta` > 0 (linear beyond the delta)."""
    if huber_delta > 0:
        return torch.nn.functional.huber_loss(error, torch.zeros_like(error), reduction="none", delta=huber_delta)
    return 0.5 * error.pow(2)


def entropy_loss(entropy: Tensor) -> Tensor:
    """Negative mean policy entropy; minimising it (times a positive coefficient) encourages exploration.

    Args:
        entropy: float tensor of per-sample policy entropies (any shape, carries grad).

    Returns:
        Scalar tensor ``-mean(entropy)``.
    """
    return -entropy.mean()


def bounds_loss(mean: Tensor, centre: Tensor, half_width: Tensor) -> Tensor:
    """Mean over steps of the squared excess of each Gaussian mean beyond the action box, in half-widths:
    0 inside the box. The env sees clipped actions, so a mean outside the box gets no gradient from the
    returns (every sample near it clips to the same action) and drifts; navigation2d, whose reward has no action
    cost, was seen to walk away from its goals for good that way (rl_games' bounds_loss plays the same role)."""
    excess = ((mean - centre).abs() - half_width).clamp(min=0.0) / half_width
    return excess.pow(2).sum(-1).mean()
