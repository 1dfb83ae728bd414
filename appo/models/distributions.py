"""Action distributions with a single interface, so the learner has no discrete/continuous branches.

This module owns :class:`DiagGaussian` (``gymnasium.spaces.Box`` actions) and :class:`Categorical`
(``gymnasium.spaces.Discrete`` actions), which both expose ``sample``, ``log_prob``, ``entropy``, ``kl`` and ``mode``
with per-sample ``[B]`` outputs, plus :func:`action_dim` and :func:`num_action_params`, which tell the model how
wide the action tensor and the policy head are for a given action space.

The formulas are written out directly instead of going through ``torch.distributions``: that avoids argument
validation, broadcasting bookkeeping and object overhead on the hot path of both the rollout workers and the learner.
"""

from __future__ import annotations

import math

import gymnasium
import torch
from torch import Tensor

# 0.5 * log(2 * pi), the per-dimension constant of the Gaussian log-density.
HALF_LOG_2PI = 0.5 * math.log(2.0 * math.pi)


def gaussian_log_prob(x: Tensor, mean: Tensor, log_std: Tensor) -> Tensor:
    """log N(x; mean, exp(log_std)^2) summed over the last dim: torch's one diagonal-Gaussian log-density (PPO's
    DiagGaussian, SAC's squashed Gaussian, MAML's policy)."""
    z = (x - mean) / log_std.exp()
    return (-0.5 * z.square() - log_std - HALF_LOG_2PI).sum(dim=-1)


class DiagGaussian:
    """Diagonal Gaussian over ``A`` independent action dims; all per-sample quantities are summed over dims.

    Args:
        mean: ``[B, A]`` action means.
        log_std: log standard deviations broadcastable to ``[B, A]`` (typically a state-independent ``[A]``
            parameter).
    """

    def __init__(self, mean: Tensor, log_std: Tensor) -> None:
        self.mean: Tensor = mean
        # Materialise the broadcast once so every method sees [B, A] and entropy has the right per-sample shape.
        self.log_std: Tensor = log_std.expand_as(mean)
        self.std: Tensor = self.log_std.exp()

    def sample(self) -> Tensor:
        """Draw actions without gradient (actions are data, not part of the graph).

        Returns:
            ``[B, A]`` sampled actions.
        """
        with torch.no_grad():
            return self.mean + self.std * torch.randn_like(self.mean)

    def log_prob(self, actions: Tensor) -> Tensor:
        """Log-density of ``actions``.

        Args:
            actions: ``[B, A]``.

        Returns:
            ``[B]`` log-probabilities summed over action dims.
        """
        return gaussian_log_prob(actions, self.mean, self.log_std)

    def entropy(self) -> Tensor:
        """Differential entropy.

        Returns:
            ``[B]`` entropy summed over action dims: ``sum(log_std + 0.5 + 0.5 * log(2 pi))``.
        """
        return (self.log_std + (0.5 + HALF_LOG_2PI)).sum(dim=-1)

    def kl(self, other: DiagGaussian) -> Tensor:
        """``KL(self || other)``.

        Args:
            other: distribution with the same ``[B, A]`` shape.

        Returns:
            ``[B]`` KL divergence summed over action dims.
        """
        var_ratio = (self.std / other.std).square()
        t = ((self.mean - other.mean) / other.std).square()
        return (0.5 * (var_ratio + t - 1.0 - var_ratio.log())).sum(dim=-1)

    def rows(self, index: Tensor) -> DiagGaussian:
        """The distributions of the samples ``index`` (``[n]`` indices into ``B``)."""
        return DiagGaussian(self.mean[index], self.log_std[index])

    def frozen(self) -> DiagGaussian:
        """A copy without gradient that later in-place updates of the weights leave as it is (a state-independent
        log_std is a view of the parameter)."""
        return DiagGaussian(self.mean.detach().clone(), self.log_std.detach().clone())

    def mode(self) -> Tensor:
        """Deterministic action (the mean), used for evaluation.

        Returns:
            ``[B, A]``.
        """
        return self.mean


class Categorical:
    """Categorical distribution over ``n`` discrete actions.

    Args:
        logits: ``[B, n]`` unnormalised log-probabilities.
    """

    def __init__(self, logits: Tensor) -> None:
        # Store normalised log-probs once; every method needs them and log_softmax is numerically stable.
        self.logits: Tensor = logits - logits.logsumexp(dim=-1, keepdim=True)

    @property
    def probs(self) -> Tensor:
        """``[B, n]`` action probabilities."""
        return self.logits.exp()

    def sample(self) -> Tensor:
        """Draw actions without gradient.

        Returns:
            ``[B]`` int64 actions.
        """
        with torch.no_grad():
            # Gumbel-max trick: argmax(logits + Gumbel) is an exact categorical sample and cheaper than multinomial
            # for a batch. -log(Exp(1)) is a Gumbel(0, 1) sample; the clamp keeps it finite so a -inf logit (masked
            # action) can never turn into nan and be picked.
            expo = torch.empty_like(self.logits).exponential_().clamp_(min=torch.finfo(self.logits.dtype).tiny)
            gumbel = -expo.log()
            return (self.logits + gumbel).argmax(dim=-1)

    def log_prob(self, actions: Tensor) -> Tensor:
        """Log-probability of ``actions``.

        Args:
            actions: ``[B]`` or ``[B, 1]`` integer actions (the rollout buffer may store a trailing action dim).

        Returns:
            ``[B]`` log-probabilities.
        """
        idx = actions.long()
        if idx.dim() == self.logits.dim() - 1:
            idx = idx.unsqueeze(-1)
        return self.logits.gather(-1, idx).squeeze(-1)

    def entropy(self) -> Tensor:
        """Shannon entropy.

        Returns:
            ``[B]``.
        """
        # xlogy-style guard: a -inf logit has p = 0 and must contribute 0, not 0 * -inf = nan.
        p_logp = torch.where(self.logits.isneginf(), torch.zeros_like(self.logits), self.probs * self.logits)
        return -p_logp.sum(dim=-1)

    def kl(self, other: Categorical) -> Tensor:
        """``KL(self || other)``.

        Args:
            other: distribution with the same ``[B, n]`` shape.

        Returns:
            ``[B]``.
        """
        terms = self.probs * (self.logits - other.logits)
        # Actions impossible under self contribute nothing, even where other also has probability 0.
        terms = torch.where(self.logits.isneginf(), torch.zeros_like(terms), terms)
        return terms.sum(dim=-1)

    def rows(self, index: Tensor) -> Categorical:
        """The distributions of the samples ``index`` (``[n]`` indices into ``B``)."""
        return Categorical(self.logits[index])

    def frozen(self) -> Categorical:
        """A copy without gradient that later in-place updates of the weights leave as it is."""
        return Categorical(self.logits.detach().clone())

    def mode(self) -> Tensor:
        """Most likely action, used for evaluation.

        Returns:
            ``[B]`` int64.
        """
        return self.logits.argmax(dim=-1)


def action_dim(space: gymnasium.spaces.Space) -> int:
    """Width of one action as stored in rollout buffers.

    Args:
        space: the environment's action space.

    Returns:
        ``A`` for a 1-D ``Box`` of shape ``[A]``, ``1`` for ``Discrete``.

    Raises:
        ValueError: for any other space.
    """
    if isinstance(space, gymnasium.spaces.Box):
        return _box_dim(space)
    if isinstance(space, gymnasium.spaces.Discrete):
        return 1
    raise ValueError(f"unsupported action space {space!r}: only Box (1-D) and Discrete are supported")


def num_action_params(space: gymnasium.spaces.Space) -> int:
    """Output width of the policy head for ``space``.

    Args:
        space: the environment's action space.

    Returns:
        ``A`` for a 1-D ``Box`` (means only; the log-std is a separate state-independent parameter), ``n`` for
        ``Discrete(n)``.

    Raises:
        ValueError: for any other space.
    """
    if isinstance(space, gymnasium.spaces.Box):
        return _box_dim(space)
    if isinstance(space, gymnasium.spaces.Discrete):
        return int(space.n)
    raise ValueError(f"unsupported action space {space!r}: only Box (1-D) and Discrete are supported")


def _box_dim(space: gymnasium.spaces.Box) -> int:
    """``A`` for a Box of shape ``[A]``; multi-dim boxes would need flattening the model does not do."""
    if len(space.shape) != 1:
        raise ValueError(f"unsupported Box action space with shape {space.shape}: only 1-D Box spaces are supported")
    return int(space.shape[0])
