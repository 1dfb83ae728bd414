"""--std_ceiling_final: a ceiling on a Gaussian policy's log-std that falls on the run's budget clock from
--initial_log_std to log(--std_ceiling_final); the learned std is free below it and the other weights are untouched.
--std_floor: a fixed lowest std, the same way."""

from __future__ import annotations

import math

import pytest
import torch

from appo.algorithms.common.lr_schedule import log_std_bounds, log_std_ceiling
from appo.config.verify import verify
from tests.unit.test_learner import small_cfg
from tests.unit.test_ppo_diagnostics import gaussian_update


def test_the_ceiling_runs_from_the_initial_log_std_to_the_final_std_and_stays():
    cfg = small_cfg(initial_log_std=-0.5, std_ceiling_final=math.exp(-2.5))
    assert log_std_ceiling(cfg, 0.0) == pytest.approx(-0.5)
    assert log_std_ceiling(cfg, 0.5) == pytest.approx(-1.5)
    assert log_std_ceiling(cfg, 1.0) == pytest.approx(-2.5)
    assert log_std_ceiling(cfg, 3.0) == pytest.approx(-2.5)
    assert log_std_ceiling(small_cfg(initial_log_std=-0.5), 0.7) is None  # the default, 0: no ceiling


@pytest.mark.parametrize(("budget_used", "ceiling"), [(1.0, math.log(0.05)), (0.5, (-0.5 + math.log(0.05)) / 2)])
def test_the_std_is_held_under_the_ceiling_and_nothing_else_changes(budget_used, ceiling):
    free, free_stats = gaussian_update(budget_used)
    capped, stats = gaussian_update(budget_used, std_ceiling_final=0.05)
    assert torch.all(free["log_std"] > ceiling + 0.5)  # one iteration from -0.5 stays near it
    assert torch.allclose(capped["log_std"], torch.full_like(capped["log_std"], ceiling))
    assert stats["std"] == pytest.approx(math.exp(ceiling), rel=1e-5)
    assert free_stats["std"] == pytest.approx(float(free["log_std"].exp().mean()), rel=1e-5)
    assert all(torch.equal(capped[k], free[k]) for k in free if k != "log_std")


def test_a_negative_final_std_is_refused():
    errors = verify(small_cfg(std_ceiling_final=-0.1))
    assert any(e.startswith("--std_ceiling_final=-0.1") for e in errors), errors


def test_the_floor_is_fixed_and_absent_by_default():
    assert log_std_bounds(small_cfg(std_floor=0.1), 0.0) == (pytest.approx(math.log(0.1)), None)
    assert log_std_bounds(small_cfg(std_floor=0.1), 1.0) == (pytest.approx(math.log(0.1)), None)
    assert log_std_bounds(small_cfg(), 0.5) == (None, None)


def test_the_std_is_held_over_the_floor_and_nothing_else_changes():
    free, free_stats = gaussian_update(0.5)
    floored, stats = gaussian_update(0.5, std_floor=1.0)  # above the start's exp(-0.5): every log-std is raised to 0
    assert torch.all(free["log_std"] < -0.4)
    assert torch.equal(floored["log_std"], torch.zeros_like(floored["log_std"]))
    assert stats["std"] == pytest.approx(1.0)
    assert all(torch.equal(floored[k], free[k]) for k in free if k != "log_std")
    low, _ = gaussian_update(0.5, std_floor=0.01)  # far below: the learned std is untouched
    assert torch.equal(low["log_std"], free["log_std"])


def test_where_floor_and_ceiling_cross_the_ceiling_wins():
    capped, stats = gaussian_update(1.0, std_floor=0.5, std_ceiling_final=0.05)
    assert torch.allclose(capped["log_std"], torch.full_like(capped["log_std"], math.log(0.05)))


def test_a_negative_floor_is_refused():
    errors = verify(small_cfg(std_floor=-0.1))
    assert any(e.startswith("--std_floor=-0.1") for e in errors), errors
