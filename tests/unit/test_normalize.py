"""Unit tests for appo.models.normalize.RunningMeanStd: exact merging, round trips, clipping, state_dict persistence."""

from __future__ import annotations

import pytest
import torch

from appo.models.normalize import RunningMeanStd


def _batches() -> tuple[torch.Tensor, torch.Tensor]:
    """Two batches of different sizes and clearly nonzero, different means/scales, shape [N, 3]."""
    g = torch.Generator().manual_seed(0)
    a = torch.randn(37, 3, generator=g, dtype=torch.float64) * 2.0 + torch.tensor([5.0, -3.0, 100.0])
    b = torch.randn(113, 3, generator=g, dtype=torch.float64) * 0.5 + torch.tensor([-1.0, 7.0, 90.0])
    return a, b


def test_merge_two_batches_equals_concatenation() -> None:
    a, b = _batches()
    rms = RunningMeanStd((3,))
    rms.update(a)
    rms.update(b)
    cat = torch.cat([a, b])
    torch.testing.assert_close(rms.mean, cat.mean(0), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(rms.var, cat.var(0, correction=0), rtol=1e-12, atol=1e-12)
    assert rms.count.item() == cat.shape[0]


def test_merge_of_part_statistics_equals_concatenation() -> None:
    # Merging precomputed statistics (as a learner would from several workers) is exact too.
    a, b = _batches()
    rms = RunningMeanStd((3,))
    rms.merge(a.mean(0), a.var(0, correction=0), a.shape[0])
    rms.merge(b.mean(0), b.var(0, correction=0), torch.tensor(b.shape[0]))
    cat = torch.cat([a, b])
    torch.testing.assert_close(rms.mean, cat.mean(0), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(rms.var, cat.var(0, correction=0), rtol=1e-12, atol=1e-12)


def test_update_flattens_leading_dims_and_keeps_float64() -> None:
    x = torch.randn(4, 5, 2) + 3.0  # [T, B, *shape] float32
    rms = RunningMeanStd((2,))
    rms.update(x)
    flat = x.double().reshape(-1, 2)
    torch.testing.assert_close(rms.mean, flat.mean(0))
    torch.testing.assert_close(rms.var, flat.var(0, correction=0))
    assert rms.mean.dtype == rms.var.dtype == rms.count.dtype == torch.float64
    assert rms.count.item() == 20


def test_scalar_shape_for_returns() -> None:
    r = torch.randn(64) * 10 + 2
    rms = RunningMeanStd(())
    rms.update(r)
    assert rms.mean.shape == torch.Size([])
    torch.testing.assert_close(rms.mean, r.double().mean())


def test_wrong_trailing_shape_raises() -> None:
    rms = RunningMeanStd((3,))
    with pytest.raises(ValueError, match="trailing shape"):
        rms.update(torch.zeros(4, 2))


def test_empty_batch_is_noop() -> None:
    rms = RunningMeanStd((3,))
    rms.update(torch.zeros(0, 3))
    assert rms.count.item() == 0
    torch.testing.assert_close(rms.var, torch.ones(3, dtype=torch.float64))


def test_normalize_denormalize_round_trip() -> None:
    a, b = _batches()
    rms = RunningMeanStd((3,), clip=None)
    rms.update(torch.cat([a, b]))
    x = (torch.randn(10, 3) * 2 + torch.tensor([2.0, 2.0, 95.0])).float()
    y = rms.normalize(x)
    assert y.dtype == torch.float32
    back = rms.denormalize(y)
    assert back.dtype == torch.float32
    torch.testing.assert_close(back, x, rtol=1e-5, atol=1e-4)


def test_normalize_standardises_the_stream() -> None:
    x = torch.randn(5000, 2) * torch.tensor([3.0, 0.1]) + torch.tensor([10.0, -4.0])
    rms = RunningMeanStd((2,), clip=None)
    rms.update(x)
    y = rms.normalize(x)
    torch.testing.assert_close(y.mean(0), torch.zeros(2), atol=1e-4, rtol=0)
    torch.testing.assert_close(y.std(0, correction=0), torch.ones(2), atol=1e-2, rtol=0)


@pytest.mark.parametrize("clip", [None, 0.0, -1.0])
def test_clip_disabled(clip: float | None) -> None:
    rms = RunningMeanStd((1,), clip=clip)
    rms.update(torch.tensor([[0.0], [2.0]]))  # mean 1, var 1
    y = rms.normalize(torch.tensor([[1000.0]]))
    assert y.item() > 100.0


def test_clip_applied() -> None:
    rms = RunningMeanStd((1,), clip=5.0)
    rms.update(torch.tensor([[0.0], [2.0]]))  # mean 1, var 1
    y = rms.normalize(torch.tensor([[1000.0], [-1000.0], [2.0]]))
    assert y[0].item() == 5.0
    assert y[1].item() == -5.0
    assert y[2].item() == pytest.approx(1.0 / (1.0 + 1e-5) ** 0.5, rel=1e-6)
    # denormalize never clips
    assert rms.denormalize(torch.tensor([[100.0]])).item() == pytest.approx(100.0 * (1.0 + 1e-5) ** 0.5 + 1.0)


def test_state_dict_round_trip() -> None:
    a, b = _batches()
    src = RunningMeanStd((3,))
    src.update(a)
    src.update(b)
    sd = src.state_dict()
    assert set(sd) == {"mean", "var", "count"}
    dst = RunningMeanStd((3,))
    dst.load_state_dict(sd)
    for k in ("mean", "var", "count"):
        assert torch.equal(getattr(dst, k), getattr(src, k))
    x = torch.randn(8, 3).float()
    assert torch.equal(dst.normalize(x), src.normalize(x))


def test_no_grad_through_update() -> None:
    x = torch.randn(6, 2, requires_grad=True)
    rms = RunningMeanStd((2,))
    rms.update(x)
    assert not rms.mean.requires_grad
    assert rms.normalize(x).requires_grad  # normalize itself stays differentiable w.r.t. x


def test_module_moves_with_to() -> None:
    rms = RunningMeanStd((2,)).to("meta")
    assert rms.mean.device.type == "meta" and rms.count.device.type == "meta"
    assert rms.mean.dtype == torch.float64


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_update_and_normalize() -> None:
    rms = RunningMeanStd((3,)).cuda()
    x = torch.randn(16, 3, device="cuda")
    rms.update(x)
    y = rms.normalize(x)
    assert y.device.type == "cuda" and y.dtype == torch.float32
    cpu = RunningMeanStd((3,))
    cpu.update(x.cpu())
    torch.testing.assert_close(rms.mean.cpu(), cpu.mean)
