"""Running mean/variance statistics used for observation and return normalisation.

This module owns :class:`RunningMeanStd`, a ``torch.nn.Module`` that keeps streaming first and second moments of a
stream of tensors. The model embeds one to normalise observations and the learner keeps one to normalise returns;
both rely on the statistics living in registered buffers so they are saved in ``state_dict()`` checkpoints and
follow ``.to(device)``.
"""

from __future__ import annotations

import torch
from torch import Tensor


class RunningMeanStd(torch.nn.Module):
    """Streaming mean and (population) variance over the leading dims of a stream of tensors.

    Statistics are kept in float64 because they accumulate over millions of samples; float32 would lose precision in
    the count-weighted merge long before training ends.

    Buffers:
        mean: ``[*shape]`` float64, running mean.
        var: ``[*shape]`` float64, running population variance (initialised to 1 so normalising before the first
            update is the identity up to ``epsilon``).
        count: ``[]`` float64, number of samples merged so far.
    """

    mean: Tensor
    var: Tensor
    count: Tensor

    def __init__(self, shape: tuple[int, ...], epsilon: float = 1e-5, clip: float | None = 5.0) -> None:
        """Create empty statistics.

        Args:
            shape: per-sample shape of the tensors being tracked (``()`` for scalars such as returns).
            epsilon: added to the variance before the square root so constant features do not divide by zero.
            clip: normalised outputs are clamped to ``[-clip, clip]``; ``None`` or ``<= 0`` disables clipping.
        """
        super().__init__()
        self.shape: tuple[int, ...] = tuple(shape)
        self.epsilon = float(epsilon)
        self.clip: float | None = float(clip) if clip is not None and clip > 0 else None
        self.register_buffer("mean", torch.zeros(self.shape, dtype=torch.float64))
        self.register_buffer("var", torch.ones(self.shape, dtype=torch.float64))
        self.register_buffer("count", torch.zeros((), dtype=torch.float64))

    @torch.no_grad()
    def update(self, x: Tensor) -> None:
        """Fold a batch into the statistics.

        Args:
            x: ``[..., *shape]``; every leading dim is treated as a sample dim. An empty batch is a no-op.
        """
        n_feat = len(self.shape)
        if x.dim() < n_feat or tuple(x.shape[x.dim() - n_feat :]) != self.shape:
            raise ValueError(f"expected trailing shape {self.shape}, got tensor of shape {tuple(x.shape)}")
        # Flatten leading dims to one sample dim and compute in float64 on the buffers' device.
        flat = x.detach().to(device=self.mean.device, dtype=torch.float64).reshape(-1, *self.shape)
        batch_count = flat.shape[0]
        if batch_count == 0:
            return
        batch_mean = flat.mean(dim=0)
        # Population variance (correction=0): the merge formula combines sums of squared deviations M2 = var * n.
        batch_var = flat.var(dim=0, correction=0)
        self.merge(batch_mean, batch_var, batch_count)

    @torch.no_grad()
    def merge(self, batch_mean: Tensor, batch_var: Tensor, batch_count: int | float | Tensor) -> None:
        """Combine externally computed batch statistics into the running ones (Chan et al. parallel variance).

        With ``delta = batch_mean - mean`` and ``n = count + batch_count``:
        ``mean' = mean + delta * batch_count / n`` and
        ``M2' = var * count + batch_var * batch_count + delta**2 * count * batch_count / n``, ``var' = M2' / n``.
        This is exact, so merging the statistics of two parts equals the statistics of their concatenation.

        Args:
            batch_mean: ``[*shape]`` mean of the batch.
            batch_var: ``[*shape]`` population variance of the batch.
            batch_count: number of samples in the batch (python number or 0-dim tensor).
        """
        dev = self.mean.device
        b_mean = torch.as_tensor(batch_mean, dtype=torch.float64, device=dev)
        b_var = torch.as_tensor(batch_var, dtype=torch.float64, device=dev)
        b_count = torch.as_tensor(batch_count, dtype=torch.float64, device=dev)
        # Stay on-device: a python-side check of the count would force a GPU sync on every update.
        total = self.count + b_count
        # Guard against 0/0 when both sides are empty; the result is then unchanged because both weights are 0.
        safe_total = torch.clamp(total, min=1.0)
        delta = b_mean - self.mean
        new_mean = self.mean + delta * (b_count / safe_total)
        m2 = self.var * self.count + b_var * b_count + delta.square() * (self.count * b_count / safe_total)
        new_var = torch.where(total > 0, m2 / safe_total, self.var)
        self.mean.copy_(new_mean)
        self.var.copy_(new_var)
        self.count.copy_(total)

    def normalize(self, x: Tensor) -> Tensor:
        """Standardise ``x`` with the running statistics.

        Args:
            x: ``[..., *shape]``.

        Returns:
            ``[..., *shape]`` tensor ``((x - mean) / sqrt(var + epsilon))`` clamped to ``[-clip, clip]`` when
            clipping is enabled, in ``x``'s dtype (the float64 stats are cast down so the model stays float32).
        """
        mean = self.mean.to(dtype=x.dtype)
        std = torch.sqrt(self.var + self.epsilon).to(dtype=x.dtype)
        out = (x - mean) / std
        if self.clip is not None:
            out = out.clamp(-self.clip, self.clip)
        return out

    def denormalize(self, x: Tensor) -> Tensor:
        """Inverse of :meth:`normalize` without clipping (e.g. map normalised value predictions back to returns).

        Args:
            x: ``[..., *shape]``.

        Returns:
            ``[..., *shape]`` tensor ``x * sqrt(var + epsilon) + mean`` in ``x``'s dtype.
        """
        mean = self.mean.to(dtype=x.dtype)
        std = torch.sqrt(self.var + self.epsilon).to(dtype=x.dtype)
        return x * std + mean

    def extra_repr(self) -> str:
        """Shown by ``print(module)``."""
        return f"shape={self.shape}, epsilon={self.epsilon}, clip={self.clip}"


def merge_moments(counts: Tensor, means: Tensor, variances: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """The count, mean and population variance of the union of P parts, from each part's own: counts [P],
    means and variances [P, *shape] (float64). Merged in part order by the formula of `RunningMeanStd.merge`
    (Chan et al.), so it is exact, and the same inputs give bitwise the same result wherever it runs (the
    learner ranks merge their parts of a batch this way: appo/learning/distributed.py). Empty parts (count 0)
    change nothing. Returns (count [], mean [*shape], var [*shape])."""
    count, mean, var = counts[0], means[0], variances[0]
    for b_count, b_mean, b_var in zip(counts[1:], means[1:], variances[1:], strict=True):
        total = count + b_count
        safe_total = torch.clamp(total, min=1.0)
        delta = b_mean - mean
        mean = mean + delta * (b_count / safe_total)
        m2 = var * count + b_var * b_count + delta.square() * (count * b_count / safe_total)
        var = torch.where(total > 0, m2 / safe_total, var)
        count = total
    return count, mean, var
