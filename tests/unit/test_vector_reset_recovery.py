"""An env that changes policy at a rollout's end is reset (appo/sampling/env_runner.py `_cut_episode`); where that
reset raises, the env is rebuilt. A native vector env is rebuilt whole (appo/sampling/vector_split.py), which starts
every one of its games anew: each env of the split must start the next rollout from its new game's first
observation, its episode under way cut at the rollout's end like a time limit and not reported."""

from __future__ import annotations

from functools import partial

import numpy as np

from appo.sampling.vector_split import VectorEnvRunner
from tests.support.drive_runner import drive, make_runner
from tests.support.scripted_atari_vector import ScriptedAtariVector

T = 4
LONG_GAME = [5] * 1000  # no game ends in the test


def test_a_failed_reset_rebuilds_the_vector_and_every_env_starts_its_new_game() -> None:
    built: list[ScriptedAtariVector] = []

    def vector_fn(n: int) -> ScriptedAtariVector:
        built.append(ScriptedAtariVector(n, [LONG_GAME], build=len(built) + 1))
        return built[-1]

    space = ScriptedAtariVector.single_observation_space
    runner, views = make_runner(
        lambda i: None,
        space,
        ScriptedAtariVector.single_action_space,
        2,
        T,
        partial(VectorEnvRunner, vector_fn=vector_fn),
        num_policies=2,
    )
    requests = runner.init(seed=0)
    runner.env_policy[:] = runner.next_policy[:] = runner.env_weights[:] = runner.next_weights[:] = 0
    first = runner.first

    def before_step(k: int) -> None:
        if k == T - 1:  # env 0 is assigned policy 1 from the next rollout on; its reset will raise
            runner.next_policy[0] = runner.next_weights[0] = 1
            built[-1].fail_resets = 1

    requests = drive(runner, views, T, lambda _: np.zeros(2, np.int64), requests, before_step)
    assert len(built) == 2 and built[0].closed
    slots = slice(first, first + 2)
    # Both games were under way: cut at the rollout's last step like a time limit (bootstrapped), not reported.
    assert views["dones"][slots, T - 1].tolist() == [1, 1] and views["truncated"][slots, T - 1].tolist() == [1, 1]
    assert views["dones"][slots, : T - 1].sum() == 0
    assert runner.finished == [] and runner.ep_returns.tolist() == [0, 0] and runner.ep_lengths.tolist() == [0, 0]
    # The next rollout starts from the rebuilt vector's games: [build 2, its first game, step 0].
    new_first = runner.first
    assert new_first != first and runner.env_policy.tolist() == [1, 0]
    assert views["obs"][new_first : new_first + 2, 0].tolist() == [[2, 1, 0], [2, 1, 0]]
    assert views["rnn_states"][new_first : new_first + 2, 0].sum() == 0
    drive(runner, views, 2, lambda _: np.zeros(2, np.int64), requests)
    assert views["obs"][new_first : new_first + 2, 2].tolist() == [[2, 1, 2], [2, 1, 2]]
    assert runner.ep_lengths.tolist() == [2, 2]
