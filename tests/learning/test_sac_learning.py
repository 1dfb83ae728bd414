"""SAC must learn: Pendulum-v1 with two actor workers, judged by the evaluator's deterministic episodes (the mean
return of 5, `eval/return_mean`), read back from the run's tensorboard file: the last evaluation of the run, the one
a user reads. Random play scores about -1,200. Locally, and on Ray's two-node simulation with the replay in a replay
actor, through kill -9 of a rollout actor."""

from __future__ import annotations

import os
import re
import signal

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from tests.conftest import run_script
from tests.integration.test_ray_backend import ACTOR_LINE, Run, actors
from tests.support.ray_cluster import cluster, needs_ray  # noqa: F401 - the fixture

# The acceptance: an evaluation at or before 20,000 env steps (30,000 on Ray) must reach -300. The runs are shorter:
# seed 1 evaluated at -153 by 6,000 and -124 by 10,000 (2026-11-23). Six more runs:
# the last evaluation worse than -300 at 7,000 at the latest, every one from 8,000 on -122 to -148, and at 10,000 all at
# -122 or -123; so 10,000 steps keep 3,000 past the latest crossing. 64x64 networks instead of the default 256x256:
# an update costs a fraction as much on one core (the default networks need several minutes for these updates on two
# cores).
BUDGET, RAY_BUDGET = 20_000, 30_000
STEPS = 10_000
LEARNING_FLAGS = ["--actor_mlp_layers", "64", "64", "--critic_mlp_layers", "64", "64", "--learning_starts=2000"]
PENDULUM = ["--algo=sac", "--env=Pendulum-v1", "--num_workers=2", "--eval_interval=1000", "--eval_episodes=5"]
PENDULUM += ["--report_interval=2", "--seed=1", *LEARNING_FLAGS]


def evaluations(summaries) -> list[tuple[int, float]]:
    acc = EventAccumulator(str(summaries), size_guidance={"scalars": 0})
    acc.Reload()
    return [(e.step, e.value) for e in acc.Scalars("eval/return_mean")]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_sac_pendulum_reaches_minus_300_within_20k_steps(train_dir):
    args = [*PENDULUM, f"--train_dir={train_dir}", "--experiment=sac", f"--train_for_env_steps={STEPS}"]
    run_script("train_appo.py", args, timeout=280, check=True)
    evals = evaluations(train_dir / "sac" / "summaries" / "0")
    step, last = evals[-1]
    assert step <= BUDGET and last >= -300, f"last evaluation {last:.1f} at {step} env steps; {evals}"


@needs_ray
@pytest.mark.slow
@pytest.mark.timeout(420)
def test_sac_on_ray_learns_through_kill_9_with_a_replay_actor_fed_by_every_worker(cluster, train_dir):  # noqa: F811
    c, _ = cluster
    flags = [*PENDULUM, "--backend=ray", f"--ray_address={c.address}", f"--train_for_env_steps={STEPS + 2000}"]
    with Run(train_dir, flags) as run:
        found = run.wait_for(ACTOR_LINE.pattern, timeout=90, count=2)
        run.wait_for(r"steps (?:[4-9]\d{3}|\d{5,})/", timeout=150)  # past the warm-up: the learner samples
        victim_worker, victim = int(found[0][1]), int(found[0][4])
        os.kill(victim, signal.SIGKILL)
        status = run.finish(timeout=300)
    text = run.text()
    assert status == 0, run.output()
    assert f"actor_worker_{victim_worker} died" in text, text[-3000:]
    assert [inc for w, inc in actors(text) if w == victim_worker and inc > 0] == [1], text[-3000:]
    # The replay actor received transitions from both rollout actors (the learner never saw a transition).
    shard = re.search(r"replay shard 0: (\d+) transitions held, \d+ chunks received \((.*)\)", text)
    assert shard, text[-3000:]
    received = {int(w): int(n) for w, n in re.findall(r"worker (\d+): (\d+)", shard[2])}
    assert set(received) == {0, 1} and min(received.values()) > 1000, shard[0]
    assert int(shard[1]) >= STEPS, shard[0]
    evals = evaluations(train_dir / "run" / "summaries" / "0")
    step, last = evals[-1]
    assert step <= RAY_BUDGET and last >= -300, f"last evaluation {last:.1f} at {step} env steps; {evals}"
