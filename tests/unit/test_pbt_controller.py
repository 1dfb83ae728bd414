"""The PBT controller on the driver (appo/driver/pbt_controller.py): when it writes pbt_state.json, how a resumed
controller continues the population's schedule and draws, and what it does with a state file it cannot use."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from appo.config.pbt import Population
from appo.driver.pbt_controller import PBT_STATE_FILE, PbtController
from appo.driver.stats import PolicyStats
from appo.protocol.messages import CopyPolicy
from appo.utils.logging import log
from tests.unit.test_pbt import MID, make_cfg


def controller_cfg(**overrides):
    return make_cfg(**{"with_pbt": True, "pbt_target_objective": "train_return", "pbt_mutation_rate": 0.5, **overrides})


def stats(env_steps: int, with_returns: bool = True) -> list[PolicyStats]:
    """Four policies at `env_steps` each; with returns, objectives 10, 20, 30, 40."""
    out = []
    for pid in range(4):
        p = PolicyStats()
        p.env_steps = env_steps
        if with_returns:
            p.returns.extend([10.0 * (pid + 1)] * 10)
        out.append(p)
    return out


def test_controller_writes_state_only_when_it_changes(tmp_path: Path):
    path = tmp_path / PBT_STATE_FILE
    controller = PbtController(controller_cfg(), tmp_path)
    assert controller.tick(stats(500)) == [] and not path.exists()  # no boundary crossed: nothing to write
    assert controller.tick(stats(1200)) and path.exists()
    assert json.loads(path.read_text())["next_period"] == [2000] * 4
    path.unlink()
    controller.tick(stats(1500))
    assert not path.exists()
    controller.on_hparams(0, dict(MID, learning_rate=0.02))  # a learner's restored hyperparameters
    controller.tick(stats(1500))
    assert json.loads(path.read_text())["hparams"][0]["learning_rate"] == 0.02
    path.unlink()
    controller.close()
    assert json.loads(path.read_text()) == json.loads(json.dumps(controller.population.state_dict()))
    assert not list(tmp_path.glob("*.tmp"))

    off = PbtController(make_cfg(with_pbt=False, pbt_target_objective="train_return"), tmp_path / "off")
    off.tick(stats(5000))
    off.close()
    assert not (tmp_path / "off").exists()


def test_resumed_controller_waits_for_the_saved_boundary_and_continues_the_draws(tmp_path: Path):
    cfg = controller_cfg()
    first = PbtController(cfg, tmp_path)
    assert first.tick(stats(2500))  # decisions at the first boundary; the next is 3000
    first.close()

    resumed = PbtController(cfg, tmp_path)
    assert resumed.population.next_period == [3000] * 4
    # Right after a resume the stats hold the restored env steps and no returns yet: not a boundary.
    assert resumed.tick(stats(2600, with_returns=False)) == []
    assert resumed.population.next_period == [3000] * 4
    assert resumed.tick(stats(2900)) == []
    # Without the saved state the first tick would cross a boundary with no objectives and lose the period.
    fresh = PbtController(cfg, tmp_path / "fresh")
    assert fresh.tick(stats(2600, with_returns=False)) == [] and fresh.population.next_period == [3000] * 4

    messages = resumed.tick(stats(3000))
    assert messages and resumed.population.next_period == [4000] * 4
    assert messages == first.tick(stats(3000))  # the rng goes on where the first run left it
    assert resumed.population.state_dict() == first.population.state_dict()


def test_restored_learner_hparams_win_over_the_saved_ones(tmp_path: Path):
    cfg = controller_cfg()
    first = PbtController(cfg, tmp_path)
    first.tick(stats(2500))
    first.close()
    resumed = PbtController(cfg, tmp_path)
    assert resumed.population.hparams == first.population.hparams
    resumed.on_hparams(1, dict(MID, gamma=0.98))
    assert resumed.population.hparams[1] == dict(MID, gamma=0.98)


@pytest.mark.parametrize(
    "content",
    [
        b"{not json",
        b"\xff\xfe",
        b"[]",
        json.dumps(Population(make_cfg(num_policies=2)).state_dict()).encode(),  # another population size
        json.dumps({**Population(make_cfg()).state_dict(), "rng": [3, [0] * 10, None]}).encode(),
    ],
    ids=["not-json", "not-utf8", "not-a-dict", "two-policies", "bad-rng"],
)
def test_unusable_state_file_is_ignored_with_a_warning(tmp_path: Path, caplog, monkeypatch, content: bytes):
    (tmp_path / PBT_STATE_FILE).write_bytes(content)
    monkeypatch.setattr(log, "propagate", True)  # init_logging in another test may have turned it off
    with caplog.at_level(logging.WARNING, logger="appo"):
        controller = PbtController(controller_cfg(), tmp_path)
    assert any(PBT_STATE_FILE in r.getMessage() and r.levelno == logging.WARNING for r in caplog.records)
    assert controller.population.next_period == [1000] * 4 and controller.population.hparams == [MID] * 4
    assert controller.tick(stats(1200))  # the run goes on with a fresh schedule


def test_the_true_objective_is_the_average_of_what_the_envs_reported_not_the_returns(tmp_path: Path):
    """--pbt_target_objective=true_objective: each policy's objective is the mean of its last episodes'
    info['true_objective'] (a win rate here), with none until it has MIN_EPISODES of them; a replaced policy forgets
    its own, so that its new weights are judged alone."""
    controller = PbtController(controller_cfg(pbt_target_objective="true_objective"), tmp_path)
    policies = stats(1200)  # returns 10, 20, 30, 40: the order the win rates below reverse
    for pid, p in enumerate(policies):
        p.objectives.extend([1.0] * (4 - pid) + [0.0] * (6 + pid) if pid < 3 else [1.0] * 5)
    assert controller.objectives(policies) == [0.4, 0.3, 0.2, None]  # policy 3: 5 games, too few
    policies[3].objectives.extend([0.0] * 5)
    assert controller.objectives(policies) == [0.4, 0.3, 0.2, 0.5]
    messages = controller.tick(policies)
    replaced = [m for m in messages if isinstance(m, CopyPolicy)]
    assert replaced and all(m.policy_id in (0, 3) and m.target in (1, 2) for m in replaced), messages
    for m in replaced:
        assert not policies[m.target].objectives and not policies[m.target].returns
    controller.write_best(policies)
    best = json.loads((tmp_path / "best_policy.json").read_text())
    assert best["objective"] == "true_objective" and best["policy_index"] == 3


def test_the_true_objective_is_a_known_objective_name():
    from appo.config.cfg import Cfg
    from appo.config.verify import verify

    assert verify(Cfg(env="paddle_duel", num_policies=4, with_pbt=True, pbt_target_objective="true_objective")) == []
    errors = verify(Cfg(env="paddle_duel", num_policies=4, with_pbt=True, pbt_target_objective="win_rate"))
    assert errors == ["--pbt_target_objective=win_rate: must be one of train_return, eval_return, true_objective"], (
        errors
    )
