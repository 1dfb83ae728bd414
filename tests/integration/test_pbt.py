"""Population-based training end to end: four CartPole policies in one run of real processes, one of them
crippled (learning rate 0). Everything is read back from what the run leaves: pbt.jsonl, best_policy.json,
each policy's tensorboard run (with tensorboard's own reader) and checkpoints."""

from __future__ import annotations

import json

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from appo.config.algorithms.ppo import PPO_PBT_RANGES as HPARAMS
from appo.learning.checkpoint import load_latest
from tests.conftest import run_script

PERIOD = 20_000
POLICIES = 4


def scalars(folder, tag: str) -> list[tuple[int, float]]:
    acc = EventAccumulator(str(folder), size_guidance={"scalars": 0})
    acc.Reload()
    return [(e.step, e.value) for e in acc.Scalars(tag)] if tag in acc.Tags()["scalars"] else []


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_population_learns_cartpole_and_replaces_the_crippled_policy(train_dir):
    args = [
        "--env=CartPole-v1",
        f"--train_dir={train_dir}",
        "--experiment=pbt",
        "--num_workers=2",
        f"--num_policies={POLICIES}",
        "--with_pbt",
        f"--pbt_period_env_steps={PERIOD}",
        f"--pbt_start_mutation={PERIOD}",
        "--train_for_env_steps=120000",  # per policy; the single-policy CartPole test has 400k
        '--policy_hparams={"3": {"learning_rate": 0}}',
        "--report_interval=2",
        "--seed=1",
    ]
    run_script("train_appo.py", args, timeout=280, check=True)
    run = train_dir / "pbt"

    events = [json.loads(line) for line in (run / "pbt.jsonl").read_text().splitlines()]
    replaced = [e for e in events if e["kind"] == "replace"]
    assert replaced, f"no replacement in {len(events)} PBT decisions"
    for e in events:
        for key, value in e["new_hparams"].items():
            lowest, highest, _ = HPARAMS[key]
            assert value == 0.0 or lowest <= value <= highest, f"{key}={value} out of range in {e}"
    for e in replaced:
        assert e["objectives"][e["source"]] > e["objectives"][e["target"]]

    # The crippled policy is replaced at one of its first decisions and learns from then on.
    crippled = [e for e in replaced if e["target"] == 3]
    assert crippled, f"policy 3 (learning rate 0) was never replaced: {[(e['kind'], e['target']) for e in events]}"
    assert crippled[0]["env_steps"] < 4 * PERIOD
    assert crippled[0]["old_hparams"]["learning_rate"] == 0.0 and crippled[0]["new_hparams"]["learning_rate"] > 0
    lr = scalars(run / "summaries" / "3", "hparams/learning_rate")
    assert lr[0][1] == 0.0 and lr[-1][1] > 0.0

    # Every policy has its own summaries; the population's best meets the single-policy target.
    best = {}
    for pid in range(POLICIES):
        curve = scalars(run / "summaries" / str(pid), "episode/return_mean")
        assert curve, f"policy {pid} has no return summaries"
        best[pid] = max(v for _, v in curve)
    assert max(best.values()) >= 450, f"best average returns per policy {best}"

    chosen = json.loads((run / "best_policy.json").read_text())
    assert 0 <= chosen["policy_index"] < POLICIES and len(chosen["objectives"]) == POLICIES
    objectives = [o for o in chosen["objectives"] if o is not None]
    assert chosen["value"] == max(objectives)

    # The population's state is in the checkpoints: policy 3's hyperparameters are its last PBT values.
    last_for_3 = [e for e in events if e["target"] == 3][-1]["new_hparams"]
    state, _ = load_latest(run / "checkpoint_p3")
    assert state["hparams"] == pytest.approx(last_for_3)

    # pbt_state.json, for a resume to go on with the schedule: the same hyperparameters, and every policy's
    # next boundary on the period grid past its last decision.
    pbt_state = json.loads((run / "pbt_state.json").read_text())
    assert pbt_state["hparams"][3] == pytest.approx(last_for_3)
    for pid in range(POLICIES):
        boundary = pbt_state["next_period"][pid]
        assert boundary % PERIOD == 0
        assert all(boundary > e["env_steps"] for e in events if e["target"] == pid)
