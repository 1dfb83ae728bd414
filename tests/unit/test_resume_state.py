"""What a resumed learner goes on with (appo/learning/resume_state.py, Learner.init): a hyperparameter flag changed on
the resuming command line wins over the checkpoint's value while PBT's own changes to the others are kept; and the
best checkpoint on disk counts even when it is newer than the checkpoint resumed from (a kill between the two)."""

from __future__ import annotations

from appo.learning.checkpoint import best_metric, find_best
from appo.learning.resume_state import resumed_hparams
from tests.unit.test_learner import make_learner, small_cfg


def test_a_flag_changed_on_resume_wins_and_pbt_s_other_changes_stay(tmp_path):
    learner = make_learner(small_cfg(learning_rate=1e-3, gamma=0.99), tmp_path)
    learner.set_hparams({"gamma": 0.995, "ppo_clip_ratio": 0.15})  # as PBT's mutations would
    learner.version = 4
    learner.save()
    resumed = make_learner(small_cfg(learning_rate=3e-4, gamma=0.99), tmp_path)  # --learning_rate=3e-4 typed now
    assert resumed.version == 4
    assert resumed.cfg.learning_rate == 3e-4 and resumed.hparams["learning_rate"] == 3e-4
    assert resumed.cfg.gamma == 0.995 and resumed.cfg.ppo_clip_ratio == 0.15  # the population's, kept
    again = make_learner(small_cfg(learning_rate=3e-4, gamma=0.99), tmp_path)  # the same flags again: nothing moves
    assert again.cfg.learning_rate == 3e-4 and again.cfg.gamma == 0.995


def test_a_checkpoint_without_its_flags_keeps_its_hyperparameters():
    state = {"hparams": {"learning_rate": 1e-3, "gamma": 0.995}}
    assert resumed_hparams(state, {"learning_rate": 3e-4, "gamma": 0.99}) == (state["hparams"], [])


def test_a_best_checkpoint_newer_than_the_resumed_one_is_not_replaced_by_a_worse_return(tmp_path):
    learner = make_learner(small_cfg(), tmp_path)
    learner.version = 10
    learner.save()
    learner.version, learner.latest_return = 12, 15.0
    learner.maybe_save()  # a new best after the last regular checkpoint; then the run is killed
    best = find_best(tmp_path / "checkpoint_p0")
    assert best is not None and best_metric(tmp_path / "checkpoint_p0") == 15.0
    resumed = make_learner(small_cfg(), tmp_path)
    assert resumed.version == 10 and resumed.best_return == 15.0
    resumed.version, resumed.latest_return = 11, 5.0
    resumed.maybe_save()
    assert find_best(tmp_path / "checkpoint_p0") == best, "a worse return replaced the best checkpoint"
