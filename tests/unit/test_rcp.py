"""Reward-Conditioned Policies' pieces: discounted returns-to-go, TD(lambda) targets, the exponential weights on a
fixed batch, the FIFO replay, one RCP-R and one RCP-A iteration on hand-made trajectories, and the checkpoint
round trip."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from appo.algorithms.base import NonFiniteGuard
from appo.algorithms.common.returns import return_to_go
from appo.algorithms.reward_conditioned.rcp import (
    RCP,
    RCPA,
    EpisodeFifo,
    exponential_weights,
    lambda_returns,
)
from appo.config.algorithms import algorithm_defaults
from appo.config.cfg import make_cfg
from appo.config.derive import derive
from appo.config.verify import verify
from appo.envs import make_run_env
from appo.models.registry import make_model
from appo.protocol.buffers import allocate_control
from tests.unit.test_udrl import CHAIN, chain_batch

# Small networks: one torch thread is faster than two fighting over a busy machine (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("one_torch_thread")


def rcp_cfg(algo: str = "rcp_r", **overrides):
    base = {"algo": algo, "env": CHAIN, "num_workers": 1, "num_envs_per_worker": 2, "rollout": 8}
    return make_cfg(base | algorithm_defaults(algo) | overrides)


def test_discounted_return_to_go_and_lambda_returns_by_hand():
    rewards = torch.tensor([1.0, 0.0, 2.0])
    torch.testing.assert_close(return_to_go(rewards, 0.5), torch.tensor([1.5, 1.0, 2.0]))
    values = torch.tensor([10.0, 20.0, 30.0])
    # G2 = 2; G1 = 0 + 0.5 (0.5 * 30 + 0.5 * 2) = 8; G0 = 1 + 0.5 (0.5 * 20 + 0.5 * 8) = 8
    torch.testing.assert_close(lambda_returns(rewards, values, 0.5, 0.5), torch.tensor([8.0, 8.0, 2.0]))
    # lambda = 1 is the discounted return; lambda = 0 the one-step TD target
    torch.testing.assert_close(lambda_returns(rewards, values, 0.5, 1.0), return_to_go(rewards, 0.5))
    torch.testing.assert_close(lambda_returns(rewards, values, 0.5, 0.0), torch.tensor([11.0, 15.0, 2.0]))


def test_exponential_weights_on_a_fixed_batch():
    targets = torch.tensor([0.0, 1.0, 2.0, 3.0, 10.0])
    mean, std = 3.2, math.sqrt(float(((targets - 3.2) ** 2).mean()))
    expected = [min(math.exp((z - mean) / std / 0.5), 5.0) for z in targets.tolist()]
    torch.testing.assert_close(exponential_weights(targets, 0.5, 5.0), torch.tensor(expected))
    assert exponential_weights(targets, 0.5, 5.0)[-1] == 5.0  # capped
    torch.testing.assert_close(exponential_weights(torch.full((4,), 7.0), 1.0, 20.0), torch.ones(4))


def test_fifo_keeps_the_newest_episodes_within_capacity():
    fifo = EpisodeFifo(25)
    for k in range(10):
        fifo.add(torch.full((10, 2), float(k)), torch.zeros(10, 1), torch.ones(10))
    assert fifo.transitions == 20 and [int(e[0][0, 0]) for e in fifo.episodes] == [8, 9]
    other = EpisodeFifo(25)
    other.load_state_dict(fifo.state_dict())
    assert [int(e[0][0, 0]) for e in other.episodes] == [8, 9]


def make_rcp(algo: str, **overrides):
    cfg = rcp_cfg(algo, **overrides)
    env = make_run_env(cfg)
    model = make_model(cfg, env.observation_space, env.action_space)
    cls = RCPA if algo == "rcp_a" else RCP
    rcp = cls(cfg, derive(cfg), model, "cpu", NonFiniteGuard(0))
    rcp.control = allocate_control(cfg, derive(cfg))
    return rcp


def rcp_batch(rights: list[list[int]]) -> dict[str, torch.Tensor]:
    """Chain trajectories with a one-dimensional command (RCP's observation: state + 1)."""
    batch = chain_batch(rights)
    batch["obs"] = batch["obs"][..., :3]
    return batch


@pytest.mark.parametrize("algo", ["rcp_r", "rcp_a"])
def test_an_iteration_weights_the_likelihood_and_draws_a_command_per_env(algo):
    torch.manual_seed(0)
    rcp = make_rcp(algo, udrl_warmup_episodes=11, rcp_updates_per_iteration=300, gamma=1.0)
    rights = [[int(t < k) for t in range(10)] for k in range(11)]  # returns 0..10
    stats = rcp.update(rcp_batch(rights), 0)
    assert rcp.iterations == 1 and int(rcp.model.updates) == 300 and math.isfinite(stats["loss"])
    commands = rcp.control["commands"]
    assert torch.isnan(commands[:, 1]).all() and commands[:, 0].std() > 0  # one draw per env
    data = rcp.targets()
    if algo == "rcp_r":
        # gamma 1: the episodes' returns 0..10; the command distribution is N(mean + std, std)
        assert sorted(data["starts"].tolist()) == [float(k) for k in range(11)]
        assert stats["rcp/command_mean"] == pytest.approx(5.0 + np.std(np.arange(11)))
    else:
        assert "value_loss" in stats and math.isfinite(stats["value_loss"])
    # The better the target, the more the policy moves right: the weighted fit prefers high-target actions.
    state = torch.tensor([[0.0, 0.0]])
    scale = rcp.cfg.command_scale[0]
    low = torch.softmax(rcp.model(torch.cat([state, torch.tensor([[-5.0 * scale]])], 1)), -1)[0, 1]
    high = torch.softmax(rcp.model(torch.cat([state, torch.tensor([[10.0 * scale]])], 1)), -1)[0, 1]
    if algo == "rcp_r":
        assert high > low


def test_rcp_a_value_function_fits_the_td_lambda_targets():
    torch.manual_seed(1)
    rcp = make_rcp("rcp_a", udrl_warmup_episodes=11, rcp_updates_per_iteration=200, gamma=1.0)
    rcp.update(rcp_batch([[int(t < k) for t in range(10)] for k in range(11)]), 0)
    first = rcp.last["value_loss"]
    rcp.iteration()
    assert rcp.iteration()["value_loss"] < first


def test_rcp_checkpoint_round_trip():
    torch.manual_seed(2)
    rcp = make_rcp("rcp_a", udrl_warmup_episodes=4, rcp_updates_per_iteration=5)
    rcp.update(rcp_batch(np.random.default_rng(2).integers(0, 2, size=(4, 10)).tolist()), 0)
    fresh = make_rcp("rcp_a")
    fresh.model.load_state_dict(rcp.model.state_dict())
    fresh.load_state_dict(rcp.state_dict())
    fresh.load_replay_state(rcp.replay_state())
    assert (fresh.episodes, fresh.iterations, len(fresh.replay)) == (4, 1, 4)
    for a, b in zip(fresh.value.parameters(), rcp.value.parameters(), strict=True):
        assert torch.equal(a, b)
    assert torch.equal(fresh.targets()["targets"], rcp.targets()["targets"])
    # A resumed run draws every env's target from the saved N(mean + std, std) again, not the mean for all.
    assert fresh.target == rcp.target and rcp.target[1] > 0
    assert torch.equal(fresh.model.command, rcp.model.command)
    commands = fresh.control["commands"][:, 0]
    assert len(commands) > 1 and commands.std() > 0


def test_rcp_flags():
    cfg = rcp_cfg("rcp_r")
    assert (cfg.learning_rate, cfg.batch_size, cfg.command_mlp_layers, cfg.command_scale) == (
        1e-3,
        256,
        [64, 64],
        [0.025],
    )
    assert verify(cfg) == []
    assert any(e.startswith("--command_scale") for e in verify(rcp_cfg("rcp_r", command_scale=[0.1, 0.1])))
    assert any(e.startswith("--rcp_lambda") for e in verify(rcp_cfg("rcp_a", rcp_lambda=1.5)))
    assert any(e.startswith("--rcp_beta") for e in verify(rcp_cfg("rcp_a", rcp_beta=0.0)))


@pytest.mark.parametrize(("algo", "condition"), [("rcp_r", "episode"), ("rcp_r", "step"), ("rcp_a", "episode")])
def test_acting_conditions_each_step_on_the_target_training_labels_it_with(algo, condition):
    """Regression: RCP-R trained step t on its own Z_t but acted on the first step's target at every step
    (reward 1 for 200 steps, gamma 0.99: labels 86.6 at t=0, 1.0 at t=199, every acting step asked 86.6). An
    episode played again with its own first-step target as the command must see, at each step, the label the
    learner gives that step: with --rcp_condition=episode every label is the episode's return and the command holds,
    with step each label is the step's own return-to-go and the command follows it. RCP-A's labels are advantages
    of different steps: its command holds."""
    rcp = make_rcp(algo, env="CartPole-v1", gamma=0.99, rcp_condition=condition)
    env = make_run_env(rcp.cfg)
    actions = [int(a) for a in np.random.default_rng(0).integers(0, 2, 500)]
    scale = rcp.cfg.command_scale[0]

    def play(command: float) -> tuple[list[np.ndarray], list[float], list[float]]:
        obs, _ = env.reset(seed=5, options={"command": [command]})
        states, rewards, commands = [], [], []
        for action in actions:
            states.append(obs[:-1])
            commands.append(float(obs[-1]) / scale)
            obs, reward, terminated, truncated, _ = env.step(action)
            rewards.append(float(reward))
            if terminated or truncated:
                return states, rewards, commands
        raise AssertionError("the episode did not end")

    states, rewards, _ = play(0.0)
    assert len(rewards) > 5
    rcp.replay.add(torch.tensor(np.array(states)), torch.tensor(actions[: len(rewards)]), torch.tensor(rewards))
    labels = rcp.targets()["targets"].double().numpy()
    _, again, commands = play(float(labels[0]))
    assert again == rewards  # the same episode
    if algo == "rcp_r":
        np.testing.assert_allclose(commands, labels, rtol=1e-5)
        last = 1.0 if condition == "step" else labels[0]  # the last step's own reward, or the episode's return
        assert commands[-1] == pytest.approx(last, rel=1e-5) and labels[0] > 5
    else:
        assert commands == [commands[0]] * len(commands)


def slow_return_to_go(rewards: list[float], gamma: float) -> list[float]:
    """Z_t = sum_{k >= t} gamma^(k - t) r_k, by the definition (Kumar et al. 2019, section 4.1), a double loop."""
    return [sum(gamma ** (k - t) * rewards[k] for k in range(t, len(rewards))) for t in range(len(rewards))]


def slow_lambda_returns(rewards: list[float], values: list[float], gamma: float, lam: float) -> list[float]:
    """TD(lambda) returns by their definition: a weighted sum of every n-step return, the episode ending terminal
    (G^lambda_t = (1 - lambda) sum_{n >= 1} lambda^(n-1) G^(n)_t, the remaining weight on the full return)."""
    L = len(rewards)
    out = []
    for t in range(L):
        n_step = []
        for n in range(1, L - t + 1):
            g = sum(gamma**i * rewards[t + i] for i in range(n))
            if t + n < L:
                g += gamma**n * values[t + n]
            n_step.append(g)
        total = sum((1 - lam) * lam ** (n - 1) * n_step[n - 1] for n in range(1, L - t))
        out.append(total + lam ** (L - t - 1) * n_step[-1])
    return out


@pytest.mark.parametrize(("algo", "condition"), [("rcp_r", "step"), ("rcp_r", "episode"), ("rcp_a", "episode")])
def test_targets_of_ragged_episodes_against_slow_loops_from_the_paper(algo, condition):
    """RCP's targets from the definitions, on episodes of different lengths: RCP-R the discounted return-to-go of
    each step (or, --rcp_condition=episode, its episode's whole discounted return), RCP-A the TD(lambda) return
    less V(s) with the algorithm's own value net."""
    torch.manual_seed(4)
    rcp = make_rcp(algo, gamma=0.9, rcp_lambda=0.7, rcp_condition=condition)
    rng = np.random.default_rng(4)
    episodes = []
    for length in (1, 4, 9):
        rewards = rng.normal(size=length).round(2).tolist()
        states = torch.tensor(rng.normal(size=(length, 2)), dtype=torch.float32)
        rcp.replay.add(states, torch.zeros(length, 1, dtype=torch.int64), torch.tensor(rewards))
        episodes.append((states, rewards))
    data = rcp.targets()
    expected, to_go = [], []
    for states, rewards in episodes:
        to_go += slow_return_to_go(rewards, 0.9)
        if algo == "rcp_a":
            with torch.no_grad():
                values = rcp.value(states).squeeze(-1).tolist()
            returns = slow_lambda_returns(rewards, values, 0.9, 0.7)
            expected += [g - v for g, v in zip(returns, values, strict=True)]
        else:
            z = slow_return_to_go(rewards, 0.9)
            expected += z if condition == "step" else [z[0]] * len(z)
    np.testing.assert_allclose(data["targets"].double().numpy(), expected, rtol=1e-5, atol=1e-5)
    # The exponential weights of RCP-R come from each step's own return-to-go (--rcp_weight_by's default), RCP-A's
    # from its advantages.
    weighted = to_go if algo == "rcp_r" else expected
    np.testing.assert_allclose(data["weight_targets"].double().numpy(), weighted, rtol=1e-5, atol=1e-5)
