"""--ppo_target_kl: an iteration stops its remaining minibatch updates once the policy has moved past 1.5x
the target from the one that acted (Spinning Up's and Stable-Baselines3's early stop). On a real learner and real
batches, both minibatch paths."""

from __future__ import annotations

import pytest

from appo.config.verify import verify
from tests.unit.test_kl_loss import train_once  # one iteration from the same weights on a batch they acted
from tests.unit.test_learner import small_cfg


@pytest.mark.parametrize("with_vtrace", [False, True], ids=["single_steps", "trajectories"])
def test_the_updates_stop_once_the_policy_has_moved_past_the_target(tmp_path, with_vtrace):
    flags = dict(learning_rate=0.003, num_epochs=8, with_vtrace=with_vtrace)
    free = train_once(small_cfg(**flags), tmp_path / "free")
    target = free["approx_kl_after"] / 20  # reached well within the iteration
    held = train_once(small_cfg(ppo_target_kl=target, **flags), tmp_path / "held")
    assert free["updates_done"] == 1.0
    assert 0.0 < held["updates_done"] < 0.5, held
    assert held["approx_kl_after"] < 0.5 * free["approx_kl_after"], (held, free)


def test_a_target_never_reached_changes_nothing(tmp_path):
    flags = dict(learning_rate=0.05, num_epochs=2)
    free = train_once(small_cfg(**flags), tmp_path / "free")
    held = train_once(small_cfg(ppo_target_kl=100.0, **flags), tmp_path / "held")
    assert held["updates_done"] == 1.0
    assert held["approx_kl_after"] == pytest.approx(free["approx_kl_after"], rel=1e-5)


def test_a_negative_target_is_named():
    errors = verify(small_cfg(ppo_target_kl=-0.01))
    assert any(e.startswith("--ppo_target_kl=-0.01: must be >= 0") for e in errors), errors
