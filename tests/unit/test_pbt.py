"""PBT decision logic: mutation ranges and rate, ranking, reward-gap thresholds, period boundaries, determinism,
and the population's state across a resume (pbt_state.json)."""

from __future__ import annotations

import json
import math
import random
import time
import types

import pytest

from appo.config.algorithms.ppo import PPO_PBT_RANGES as HPARAMS
from appo.config.pbt import Event, Population, initial_hparams, mutate

MID = {  # well inside every range, so that no perturbation by a factor <= 1.5 is clamped
    "learning_rate": 1e-4,
    "exploration_loss_coeff": 3e-3,
    "ppo_clip_ratio": 0.1,
    "ppo_clip_value": 1.0,
    "value_loss_coeff": 0.5,
    "max_grad_norm": 4.0,
    "gamma": 0.99,
    "gae_lambda": 0.95,
}


def make_cfg(**overrides):
    values = dict(
        MID,
        algo="appo",
        num_policies=4,
        seed=0,
        pbt_period_env_steps=1000,
        pbt_start_mutation=0,
        pbt_replace_fraction=0.3,
        pbt_mutation_rate=0.15,
        pbt_replace_reward_gap=0.1,
        pbt_replace_reward_gap_absolute=1e-6,
        pbt_perturb_min=1.05,
        pbt_perturb_max=1.5,
    )
    values.update(overrides)
    return types.SimpleNamespace(**values)


def _ratio(key: str, old: float, new: float) -> float:
    return new / old if HPARAMS[key][2] == "scale" else (1.0 - new) / (1.0 - old)


def test_hparams_keys_and_initial_values():
    assert set(HPARAMS) == set(MID)
    assert all(kind in ("scale", "discount") and lo < hi for lo, hi, kind in HPARAMS.values())
    assert initial_hparams(make_cfg(learning_rate=0.02)) == dict(MID, learning_rate=0.02)


def test_mutate_rate_one_changes_every_value_by_a_bounded_factor():
    rng = random.Random(1)
    for _ in range(200):
        new = mutate(MID, rng, 1.0, 1.05, 1.5, HPARAMS)
        for key, old in MID.items():
            assert new[key] != old
            ratio = _ratio(key, old, new[key])
            assert 1.05 - 1e-9 <= ratio <= 1.5 + 1e-9 or 1 / 1.5 - 1e-9 <= ratio <= 1 / 1.05 + 1e-9, (key, ratio)


def test_mutate_moves_both_ways_and_returns_a_new_dict():
    rng = random.Random(2)
    ratios = [_ratio("gamma", 0.99, mutate(MID, rng, 1.0, 1.05, 1.5, HPARAMS)["gamma"]) for _ in range(100)]
    assert any(r > 1 for r in ratios) and any(r < 1 for r in ratios)
    original = dict(MID)
    assert mutate(original, rng, 1.0, 1.05, 1.5, HPARAMS) is not original
    assert original == MID


def test_repeated_mutation_stays_in_range_and_gamma_below_one():
    rng = random.Random(3)
    hparams = dict(MID)
    for _ in range(1000):
        hparams = mutate(hparams, rng, 1.0, 1.05, 1.5, HPARAMS)
        for key, (lo, hi, _) in HPARAMS.items():
            assert lo <= hparams[key] <= hi, (key, hparams[key])
        assert hparams["gamma"] < 1.0
    assert hparams["gamma"] <= HPARAMS["gamma"][1]
    assert mutate({"gamma": 0.99999}, rng, 1.0, 1.05, 1.5, HPARAMS)["gamma"] <= HPARAMS["gamma"][1]
    assert mutate({"learning_rate": 1.0}, rng, 1.0, 1.05, 1.5, HPARAMS)["learning_rate"] == HPARAMS["learning_rate"][1]


def test_mutate_rate_zero_changes_nothing():
    assert mutate(MID, random.Random(4), 0.0, 1.05, 1.5, HPARAMS) == MID


def test_zero_learning_rate_stays_zero_and_unknown_keys_pass_through():
    rng = random.Random(5)
    for _ in range(50):
        new = mutate({"learning_rate": 0.0, "my_flag": 7.5, "gamma": 0.99}, rng, 1.0, 1.05, 1.5, HPARAMS)
        assert new["learning_rate"] == 0.0
        assert new["my_flag"] == 7.5
        assert new["gamma"] != 0.99


def test_mutation_rate_statistic():
    rng = random.Random(6)
    changed = sum(
        mutate(MID, rng, 0.15, 1.05, 1.5, HPARAMS)["learning_rate"] != MID["learning_rate"] for _ in range(2000)
    )
    assert 0.12 <= changed / 2000 <= 0.18


def test_ranking_none_best_and_worst():
    objectives = [10.0, 50.0, 30.0, None]
    pop = Population(make_cfg())
    for _ in range(20):
        assert pop.decide(3, 5000, objectives) is None  # no objective: not taking part
        assert pop.decide(1, 5000, objectives) is None  # best k=1 of 3: left alone
    event = pop.decide(0, 5000, objectives)
    assert event is not None and event.kind == "replace" and event.target == 0 and event.source == 1
    assert event.env_steps == 5000 and event.objectives == objectives
    assert pop.hparams[0] == event.new_hparams


def test_middle_policy_only_mutates():
    pop = Population(make_cfg(pbt_mutation_rate=1.0))
    event = pop.decide(2, 5000, [10.0, 50.0, 30.0, None])
    assert event is not None and event.kind == "mutate" and event.source is None
    assert event.old_hparams == MID and event.new_hparams != MID and pop.hparams[2] == event.new_hparams


def test_fewer_than_two_participants_decide_nothing():
    pop = Population(make_cfg(pbt_mutation_rate=1.0))
    assert pop.decide(0, 5000, [10.0, None, None, None]) is None
    assert pop.decide(0, 5000, [10.0, float("nan"), None, None]) is None
    assert pop.hparams[0] == MID


def test_best_and_worst_sets_never_overlap():
    pop = Population(make_cfg(num_policies=2, pbt_replace_fraction=0.9, pbt_mutation_rate=0.0))
    assert pop.decide(1, 5000, [10.0, 100.0]) is None  # k = 2 is cut to 1: the best is left alone
    event = pop.decide(0, 5000, [10.0, 100.0])
    assert event is not None and event.kind == "replace" and event.source == 1


@pytest.mark.parametrize("rate", [0.0, 1.0])
def test_small_relative_gap_does_not_replace(rate):
    pop = Population(make_cfg(num_policies=2, pbt_mutation_rate=rate))
    for _ in range(20):
        event = pop.decide(0, 5000, [100.0, 101.0])
        assert event is None or event.kind == "mutate"
    assert (event is None) == (rate == 0.0)


def test_large_relative_gap_replaces():
    pop = Population(make_cfg(num_policies=2))
    event = pop.decide(0, 5000, [10.0, 100.0])
    assert event is not None and event.kind == "replace" and event.source == 1


def test_absolute_gap_threshold():
    cfg = make_cfg(num_policies=2, pbt_mutation_rate=0.0, pbt_replace_reward_gap_absolute=1.0)
    assert Population(cfg).decide(0, 5000, [0.5, 1.0]) is None  # relative gap 0.5 but absolute only 0.5
    cfg.pbt_replace_reward_gap_absolute = 0.25
    event = Population(cfg).decide(0, 5000, [0.5, 1.0])
    assert event is not None and event.kind == "replace"


def test_a_gap_equal_to_the_threshold_up_to_float_rounding_does_not_replace():
    cfg = make_cfg(num_policies=2, pbt_mutation_rate=0.0, pbt_replace_reward_gap=0.0)
    cfg.pbt_replace_reward_gap_absolute = 0.01  # win rates over 100 games: 0.54 - 0.53 is 0.010000000000000009
    assert Population(cfg).decide(0, 5000, [0.53, 0.54]) is None
    event = Population(cfg).decide(0, 5000, [0.53, 0.55])
    assert event is not None and event.kind == "replace" and event.source == 1


def test_negative_objectives_use_the_source_magnitude():
    pop = Population(make_cfg(num_policies=2, pbt_mutation_rate=0.0))
    assert pop.decide(0, 5000, [-100.0, -95.0]) is None  # gap 5 < 0.1 * 95
    event = pop.decide(0, 5000, [-100.0, -50.0])
    assert event is not None and event.kind == "replace"


def test_replacement_copies_source_hparams():
    source_hparams = dict(MID, learning_rate=3e-3, gamma=0.995)
    pop = Population(make_cfg(num_policies=2, pbt_mutation_rate=0.0), hparams=[dict(MID), source_hparams])
    event = pop.decide(0, 5000, [10.0, 100.0])
    assert event is not None and event.kind == "replace"
    assert event.old_hparams == MID and event.new_hparams == source_hparams and pop.hparams[0] == source_hparams
    assert pop.hparams[1] == source_hparams


def test_replacement_mutates_the_copied_hparams():
    source_hparams = dict(MID, learning_rate=3e-3)
    pop = Population(make_cfg(num_policies=2, pbt_mutation_rate=1.0), hparams=[dict(MID), source_hparams])
    event = pop.decide(0, 5000, [10.0, 100.0])
    assert event is not None and event.kind == "replace"
    assert 1 / 1.5 <= event.new_hparams["learning_rate"] / 3e-3 <= 1.5
    assert event.new_hparams != source_hparams


def test_set_hparams_and_default_population():
    pop = Population(make_cfg())
    assert pop.hparams == [MID] * 4
    pop.hparams[0]["learning_rate"] = 1.0
    assert pop.hparams[1] == MID  # every policy holds its own dict
    pop.set_hparams(2, dict(MID, gamma=0.98))
    assert pop.hparams[2]["gamma"] == 0.98


def test_wrong_population_size_is_rejected():
    with pytest.raises(ValueError):
        Population(make_cfg(), hparams=[dict(MID)])
    with pytest.raises(ValueError):
        Population(make_cfg(), env_steps=[0, 0])


def test_due_every_period():
    pop = Population(make_cfg(num_policies=2))
    assert [s for s in range(0, 5001, 100) if pop.due(0, s)] == [1000, 2000, 3000, 4000, 5000]
    assert not pop.due(1, 999) and pop.due(1, 2500) and not pop.due(1, 2999) and pop.due(1, 3000)


def test_due_waits_for_start_mutation():
    pop = Population(make_cfg(num_policies=1, pbt_start_mutation=2500))
    assert [s for s in range(0, 5001, 100) if pop.due(0, s)] == [3000, 4000, 5000]
    pop = Population(make_cfg(num_policies=1, pbt_start_mutation=2500))
    assert not pop.due(0, 2400)  # boundary 1000 passes silently and the next is 3000, not 2500
    assert not pop.due(0, 2600) and pop.due(0, 3000)


def test_due_resumes_from_env_steps():
    pop = Population(make_cfg(num_policies=2), env_steps=[2500, 0])
    assert not pop.due(0, 2999) and pop.due(0, 3000) and not pop.due(0, 3500)
    assert pop.due(1, 1000)


def _script(pop: Population) -> list[str]:
    rng = random.Random(11)
    events = []
    for step in range(1, 200):
        policy = step % 4
        objectives = [rng.uniform(0, 100) if rng.random() > 0.1 else None for _ in range(4)]
        if pop.due(policy, step * 300):
            event = pop.decide(policy, step * 300, objectives)
            if event is not None:
                events.append(json.dumps(event._asdict()))
    return events


def test_same_seed_same_events_other_seed_other_events():
    a, b = _script(Population(make_cfg(seed=3))), _script(Population(make_cfg(seed=3)))
    assert len(a) > 10 and a == b
    assert _script(Population(make_cfg(seed=4))) != a


def test_event_to_json_round_trips():
    event = Event("replace", 0, 2, 12345, [1.5, None, 9.0], dict(MID), dict(MID, gamma=0.995))
    line = event.to_json()
    assert "\n" not in line
    data = json.loads(line)
    assert math.isclose(data.pop("time"), time.time(), abs_tol=60)
    assert data == event._asdict()
    assert Event(**data) == event


def test_best_policy():
    pop = Population(make_cfg())
    assert pop.best_policy([10.0, 50.0, 30.0, None]) == 1
    assert pop.best_policy([None, 7.0, 7.0, 2.0]) == 1
    assert pop.best_policy([-3.0, None, -1.0, float("nan")]) == 2
    assert pop.best_policy([None, None, None, None]) is None


def _run(pop: Population, steps: range, seed: int) -> list[str]:
    """Like _script, over a slice of steps: the events, as JSON, of a population fed seeded objectives."""
    rng = random.Random(seed)
    events = []
    for step in steps:
        policy = step % 4
        objectives = [rng.uniform(0, 100) if rng.random() > 0.1 else None for _ in range(4)]
        if pop.due(policy, step * 300):
            event = pop.decide(policy, step * 300, objectives)
            if event is not None:
                events.append(json.dumps(event._asdict()))
    return events


def test_saved_and_loaded_population_takes_the_same_next_decisions():
    cfg = make_cfg(seed=3)
    original = Population(cfg)
    assert len(_run(original, range(1, 100), seed=11)) > 5
    state = json.loads(json.dumps(original.state_dict(), allow_nan=False))  # through strict JSON, as on disk
    resumed = Population(cfg)
    resumed.load_state_dict(state)
    assert resumed.next_period == original.next_period and resumed.hparams == original.hparams

    expected = _run(original, range(100, 200), seed=12)
    assert len(expected) > 5
    assert _run(resumed, range(100, 200), seed=12) == expected
    assert resumed.next_period == original.next_period and resumed.hparams == original.hparams
    # What the state carries matters: a population restarted from the seed decides otherwise.
    assert _run(Population(cfg), range(100, 200), seed=12) != expected


def test_load_state_dict_rejects_what_does_not_fit_and_changes_nothing():
    source = Population(make_cfg(num_policies=2))
    source.due(0, 2500)
    good = json.loads(json.dumps(source.state_dict()))
    pop = Population(make_cfg())
    draws = pop.rng.getstate()
    bad_states = [
        good,  # saved for 2 policies, this population has 4
        None,
        {**good, "version": 99},
        {**good, "next_period": [1000, "x", 1000, 1000], "hparams": [MID] * 4},
        {**good, "next_period": [1000] * 4, "hparams": [{"gamma": "high"}] * 4},
        {**good, "next_period": [1000] * 4, "hparams": [MID] * 4, "rng": [3, [1, 2], None]},
        {**good, "next_period": [1000] * 4, "hparams": [MID] * 4, "rng": "seed"},
    ]
    for state in bad_states:
        with pytest.raises(ValueError):
            pop.load_state_dict(state)
        assert pop.next_period == [1000] * 4 and pop.hparams == [MID] * 4 and pop.rng.getstate() == draws


def test_loaded_boundaries_follow_a_changed_period():
    old = Population(make_cfg(num_policies=2))
    assert old.due(0, 2500) and old.next_period == [3000, 1000]
    pop = Population(make_cfg(num_policies=2, pbt_period_env_steps=500))
    pop.load_state_dict(old.state_dict())
    assert pop.next_period == [2500, 500]  # one new period after the last boundary crossed (2000 and 0)
