"""The evaluator acts with the numpy pass of its model where one exists (as the actor workers do), and its results
are the torch model's: the deterministic meta-test of a recurrent policy and the evaluation of a plain env give the
same returns either way, the sampled meta-test comes from the same distribution."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from appo.config.cfg import parse_cfg
from appo.envs import make_run_env
from appo.models.numpy_twins import NumpyActorCritic
from appo.models.registry import make_model
from appo.protocol.messages import EvalReport, EvalRequest
from appo.protocol.param_sync import ParamStore
from appo.sampling.evaluator import Evaluator, adaptation_gain, true_objective

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def evaluate_both(args: list[str]) -> tuple[EvalReport, EvalReport]:
    """One evaluation by an evaluator acting in numpy and one by an evaluator acting in torch, both reading one
    store of random weights."""
    cfg = parse_cfg(args)
    env = make_run_env(cfg)
    spaces = (env.observation_space, env.action_space)
    env.close()
    torch.manual_seed(0)
    model = make_model(cfg, *spaces)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.2)
    store = ParamStore(model)
    store.publish(model, 7)
    fast = Evaluator(cfg, spaces, [store])
    slow = Evaluator(dataclasses.replace(cfg, numpy_inference=False), spaces, [store])
    assert type(fast.fast) is NumpyActorCritic and slow.fast is None
    try:
        return fast.evaluate(EvalRequest(0, 100)), slow.evaluate(EvalRequest(0, 100))
    finally:
        fast.close()
        slow.close()


def test_meta_test_of_a_recurrent_policy_is_the_same_in_numpy_and_torch() -> None:
    a, b = evaluate_both(["--env=navigation2d", "--num_test_tasks=4"])
    assert a.version == b.version == 7
    np.testing.assert_allclose(a.task_returns, b.task_returns, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(a.returns_by_episode, b.returns_by_episode, rtol=1e-4, atol=1e-3)
    assert len(a.task_returns) == 4 and len(a.returns_by_episode) == 2
    for report in (a, b):  # the gain's mean is the difference of the episodes' means, its error over 4 tasks > 0
        for gain, by_episode in (
            (report.adaptation_gain, report.returns_by_episode),
            (report.stochastic_adaptation_gain, report.stochastic_returns_by_episode),
        ):
            assert gain[0] == pytest.approx(by_episode[1] - by_episode[0], abs=1e-4) and gain[1] > 0
    # Sampled actions: other draws, the same policy; over 4 tasks x 100 steps of one navigation trial the means agree
    # loosely (this checks that the numpy pass samples around the same means, not a different policy).
    assert a.stochastic_returns_by_episode != b.stochastic_returns_by_episode
    np.testing.assert_allclose(a.stochastic_returns_by_episode, b.stochastic_returns_by_episode, rtol=0.5)


def test_adaptation_gain_pairs_episodes_by_task() -> None:
    # Tasks differ a lot in difficulty, the second episode beats the first by 1 on each: no spread in the gain.
    assert adaptation_gain(np.array([[-10.0, -9.0], [-30.0, -29.0], [-2.0, -1.0]])) == (1.0, 0.0)
    gain, se = adaptation_gain(np.array([[-5.0, -4.0, -3.0], [-5.0, -6.0, -7.0]]))  # last minus first: 2 and -2
    assert gain == 0.0 and se == pytest.approx(2.0)  # std 2.83 (ddof 1) over sqrt(2)
    assert adaptation_gain(np.array([[-5.0, -4.0]])) == (1.0, 0.0)


def test_evaluation_of_a_plain_env_is_the_same_in_numpy_and_torch() -> None:
    a, b = evaluate_both(["--env=Pendulum-v1", "--eval_episodes=2"])
    assert a.return_mean == pytest.approx(b.return_mean, rel=1e-4)
    assert a.length_mean == b.length_mean == 200


def test_the_evaluator_plays_a_reward_conditioned_policy_with_its_command() -> None:
    """Regression: the engine's evaluator reset a UDRL/RCP env without a command, so it played the env's
    default (0, 1) whatever the learner had reached. It must play the command the weights carry, as enjoy.py and the
    learner's greedy evaluation do."""
    from appo.algorithms.reward_conditioned.udrl import run_command_episode

    cfg = parse_cfg(["--algo=udrl", "--env=CartPole-v1", "--eval_episodes=3", "--numpy_inference=False"])
    env = make_run_env(cfg)
    spaces = (env.observation_space, env.action_space)
    torch.manual_seed(3)
    model = make_model(cfg, *spaces)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p))
        model.updates.fill_(1)  # past the warm-up: the policy acts, not uniformly at random
        model.command.copy_(torch.tensor([400.0, 300.0]))
    store = ParamStore(model)
    store.publish(model, 1)
    report = Evaluator(cfg, spaces, [store]).evaluate(EvalRequest(0, 0))
    model.eval()
    seeds = [cfg.seed + 10_000 + i for i in range(3)]
    with_command = [run_command_episode(env, model, (400.0, 300.0), seed)[0] for seed in seeds]
    default = [run_command_episode(env, model, (0.0, 1.0), seed)[0] for seed in seeds]
    assert with_command != default  # the command changes what this policy does: the test can tell them apart
    assert report.return_mean == pytest.approx(np.mean(with_command))


def test_an_evaluation_reports_the_true_objective_of_the_policys_games() -> None:
    """paddle_duel against its scripted tracker: the true objective is the policy's own row's (1 a win, 0 a loss,
    0.5 a draw), numpy and torch alike; an env that reports none (Pendulum) has none."""
    a, b = evaluate_both(["--env=paddle_duel", "--eval_episodes=4"])
    assert a.true_objective_mean is not None and 0.0 <= a.true_objective_mean <= 1.0
    assert a.true_objective_mean == b.true_objective_mean
    assert evaluate_both(["--env=Pendulum-v1", "--eval_episodes=1"])[0].true_objective_mean is None


def test_true_objective_reads_the_policys_row_of_a_game() -> None:
    game = {"objectives": [1.0, 0.0], "policy_row": 1}
    assert true_objective(game) == 0.0
    assert true_objective({"objectives": [1.0, float("nan"), 0.0]}) == 0.5  # the rows that report one
    assert true_objective({"objectives": [float("nan")]}) is None
    assert true_objective({"true_objective": 3}) == 3.0 and true_objective({}) is None
