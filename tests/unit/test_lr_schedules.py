"""Learning-rate schedules. --lr_schedule=linear_decay follows whichever budget ends the run.
--lr_schedule=kl_adaptive_minibatch / kl_adaptive_epoch: on a real learner and real batches, the rate moves by 1.5
per minibatch (or per epoch) the way the approximate KL says, stays within its bounds, reaches tensorboard's
train/learning_rate through the stats, and a resumed learner goes on from the rate it saved.
--exploration_schedule=linear_decay takes the entropy bonus to 0 on the same clock."""

from __future__ import annotations

import pytest
import torch

from appo.algorithms.base import NonFiniteGuard
from appo.algorithms.ppo.algorithm import PPO
from appo.config.cfg import Cfg
from appo.config.derive import derive
from appo.config.verify import verify
from appo.models.registry import make_model
from tests.unit.test_learner import SPACES, fill, make_learner, params_of, small_cfg, take_batch

# small_cfg: 2 epochs of 2 minibatches per iteration.
MINIBATCHES = 4


def train_once(learner, seed: int, perturb: float = 0.0) -> dict[str, float]:
    fill(learner, 0, 16, seed=seed)  # acted by the learner's weights
    if perturb:  # the policy that trains is no longer the one that acted: every minibatch sees a KL > 0
        with torch.no_grad():
            for p in learner.model.parameters():
                p.add_(perturb * torch.randn_like(p))
    return learner.train(take_batch(learner)).stats


def test_a_policy_that_barely_moves_raises_the_rate_each_minibatch_up_to_its_ceiling(tmp_path):
    torch.manual_seed(0)
    cfg = small_cfg(lr_schedule="kl_adaptive_minibatch", learning_rate=1e-4, lr_schedule_kl_threshold=1e3)
    learner = make_learner(cfg, tmp_path)
    assert train_once(learner, 1)["learning_rate"] == pytest.approx(1e-4 * 1.5**MINIBATCHES)
    for i in range(12):
        stats = train_once(learner, 2 + i)
    assert stats["learning_rate"] == pytest.approx(cfg.lr_adaptive_max)
    assert learner.algorithm.optimizer.param_groups[0]["lr"] == pytest.approx(cfg.lr_adaptive_max)


def test_a_policy_that_moves_too_far_lowers_the_rate_down_to_its_floor(tmp_path):
    torch.manual_seed(0)
    cfg = small_cfg(
        lr_schedule="kl_adaptive_minibatch", learning_rate=1e-3, lr_schedule_kl_threshold=1e-9, lr_adaptive_min=1e-5
    )
    learner = make_learner(cfg, tmp_path)
    stats = train_once(learner, 1, perturb=0.3)
    assert stats["approx_kl_before"] > 1e-8, stats
    assert stats["learning_rate"] == pytest.approx(1e-3 / 1.5**MINIBATCHES)
    for i in range(12):
        stats = train_once(learner, 2 + i, perturb=0.3)
    assert stats["learning_rate"] == pytest.approx(1e-5)


def test_the_epoch_schedule_moves_once_per_epoch(tmp_path):
    torch.manual_seed(0)
    cfg = small_cfg(lr_schedule="kl_adaptive_epoch", learning_rate=1e-4, lr_schedule_kl_threshold=1e3)
    learner = make_learner(cfg, tmp_path)
    assert train_once(learner, 1)["learning_rate"] == pytest.approx(1e-4 * 1.5**cfg.num_epochs)


def test_a_resumed_learner_goes_on_from_the_rate_it_saved(tmp_path):
    torch.manual_seed(0)
    cfg = small_cfg(lr_schedule="kl_adaptive_minibatch", learning_rate=1e-4, lr_schedule_kl_threshold=1e3)
    learner = make_learner(cfg, tmp_path)
    saved = train_once(learner, 1)["learning_rate"]
    learner.save()
    resumed = make_learner(cfg, tmp_path)
    assert resumed.algorithm.adaptive.lr == pytest.approx(saved)
    assert train_once(resumed, 2)["learning_rate"] == pytest.approx(saved * 1.5**MINIBATCHES)


@pytest.mark.parametrize("final", [0.0, 1e-9])
def test_a_decaying_kl_target_turns_the_rate_down_as_the_budget_is_spent(tmp_path, final):
    """--lr_schedule_kl_threshold_final: the target goes from the threshold (here so large that any step is too
    small) to the final value (so small that any step is too large) as the budget is spent. The first iteration
    (budget 0) raises the rate each minibatch either way; the second, with the budget spent, lowers it where the
    target decays and raises it again where it stays."""
    torch.manual_seed(0)
    cfg = small_cfg(
        lr_schedule="kl_adaptive_minibatch",
        learning_rate=1e-4,
        lr_schedule_kl_threshold=1e3,
        lr_schedule_kl_threshold_final=final,
        train_for_iterations=1,
    )
    learner = make_learner(cfg, tmp_path)
    assert train_once(learner, 1, perturb=0.3)["learning_rate"] == pytest.approx(1e-4 * 1.5**MINIBATCHES)
    stats = train_once(learner, 2, perturb=0.3)
    assert stats["approx_kl_before"] > 1e-8, stats
    expected = 1e-4 if final else 1e-4 * 1.5 ** (2 * MINIBATCHES)
    assert stats["learning_rate"] == pytest.approx(expected)


def test_the_kl_target_is_a_straight_line_over_the_budget():
    from appo.algorithms.common.lr_schedule import kl_target

    cfg = Cfg(lr_schedule_kl_threshold=0.008, lr_schedule_kl_threshold_final=0.0005)
    assert [kl_target(cfg, f) for f in (0.0, 0.5, 1.0, 1.7)] == pytest.approx([0.008, 0.00425, 0.0005, 0.0005])
    assert kl_target(Cfg(lr_schedule_kl_threshold=0.008), 0.9) == 0.008  # no final value: the target stays


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        ({"lr_schedule": "kl"}, "--lr_schedule=kl: must be one of constant, linear_decay, kl_adaptive_minibatch"),
        ({"lr_schedule": "kl_adaptive_epoch", "learning_rate": 0.1}, "--learning_rate=0.1: with --lr_schedule="),
        ({"lr_schedule_kl_threshold": 0.0}, "--lr_schedule_kl_threshold=0.0: must be > 0"),
        ({"lr_schedule_kl_threshold_final": -0.1}, "--lr_schedule_kl_threshold_final=-0.1: must be > 0"),
    ],
)
def test_bad_schedule_flags_are_named(flags, expected):
    errors = verify(small_cfg(**flags))
    assert any(e.startswith(expected) for e in errors), errors


def test_budget_fraction_follows_whichever_budget_ends_the_run():
    from appo.config.derive import budget_fraction

    assert budget_fraction(Cfg(train_for_env_steps=1000), 250, 3, 5.0) == pytest.approx(0.25)
    assert budget_fraction(Cfg(train_for_seconds=20.0), 250, 3, 5.0) == pytest.approx(0.25)
    assert budget_fraction(Cfg(train_for_env_steps=1000, train_for_seconds=10.0), 250, 3, 5.0) == pytest.approx(0.5)
    assert budget_fraction(Cfg(train_for_iterations=4), 250, 3, 5.0) == pytest.approx(0.75)
    assert budget_fraction(Cfg(), 10**6, 10**4, 3600.0) < 1e-3  # no budget set: next to nothing


def test_linear_decay_follows_the_budget_used():
    cfg = Cfg(lr_schedule="linear_decay", learning_rate=0.01, train_for_seconds=100.0)
    model = make_model(cfg, *SPACES)
    algorithm = PPO(cfg, derive(cfg), model, "cpu", NonFiniteGuard(0))
    assert algorithm._set_learning_rate(0) == pytest.approx(0.01)
    algorithm.budget_used = 0.75
    assert algorithm._set_learning_rate(0) == pytest.approx(0.0025)
    assert algorithm.optimizer.param_groups[0]["lr"] == pytest.approx(0.0025)
    algorithm.budget_used = 1.2
    assert algorithm._set_learning_rate(0) == 0.0


def _trained_params(tmp_path, seconds: float, **overrides) -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    learner = make_learner(small_cfg(train_for_seconds=seconds, **overrides), tmp_path)
    train_once(learner, 1)
    return params_of(learner.model)


@pytest.mark.parametrize("spent", [False, True])
def test_a_decaying_entropy_bonus_is_whole_at_the_start_and_gone_when_the_budget_is_spent(tmp_path, spent):
    """The same batch on the same weights, a large entropy bonus against none: with the budget untouched the
    decaying bonus trains as the constant one does; with the budget spent it trains as no bonus does."""
    # Untouched: a budget so long that the seconds the learner has run, however slow the machine, leave the bonus's
    # factor 1 - seconds / budget at exactly 1 in float32 (1e6 did not: 0.1 s on a loaded machine moved it a step).
    seconds = 1e-6 if spent else 1e12
    none = _trained_params(tmp_path / "none", seconds, exploration_loss_coeff=0.0)
    constant = _trained_params(tmp_path / "constant", seconds, exploration_loss_coeff=5.0)
    decaying = _trained_params(
        tmp_path / "decaying", seconds, exploration_loss_coeff=5.0, exploration_schedule="linear_decay"
    )
    same_as, differs_from = (none, constant) if spent else (constant, none)
    assert all(torch.equal(decaying[k], same_as[k]) for k in decaying)
    assert not all(torch.allclose(decaying[k], differs_from[k]) for k in decaying)
