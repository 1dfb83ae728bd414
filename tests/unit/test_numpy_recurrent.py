"""Recurrent models act in numpy: the GRU / LSTM pass of NumpyActorCritic (one policy) and NumpyPolicyStack (a
population) is the torch model's `act` on the same weights and states, and the states it hands on, reset where
episodes end as the env runner resets them, are the ones the learner's replay (`evaluate` with dones) computes.

Every comparison is within 1e-5: values, log-probs of the numpy-sampled actions under torch's distribution,
next states, and deterministic (mode) actions."""

from __future__ import annotations

import warnings

import gymnasium as gym
import numpy as np
import pytest
import torch

from appo.config.cfg import Cfg
from appo.models.numpy_twins import NumpyActorCritic
from appo.numpy_policy.actor_critic import NumpyPolicyStack
from tests.unit.test_numpy_policy import random_model

TOL = {"rtol": 0.0, "atol": 1e-5}
N, T = 11, 20  # envs, steps of the sequence
SPACES = {"box": gym.spaces.Box(-1, 1, (3,), np.float32), "discrete": gym.spaces.Discrete(4)}


def recurrent_cfg(rnn_type: str) -> Cfg:
    return Cfg(use_rnn=True, rnn_type=rnn_type, rnn_size=16, encoder_mlp_layers=[32, 24])


def state_size(rnn_type: str) -> int:
    return 32 if rnn_type == "lstm" else 16


def sequence(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Observations [N, T, 5] (random_model's observation space; some beyond the normaliser's clip) and dones
    [N, T] at random steps: each env ends an episode (a trial, for task envs: the engine sees one done either way)
    a few times."""
    rng = np.random.default_rng(seed)
    obs = (rng.standard_normal((N, T, 5)) * 4).astype(np.float32)
    dones = (rng.random((N, T)) < 0.15).astype(np.float32)
    dones[0, [3, 4, 12]] = 1.0  # back-to-back episode ends, and one after the reset state has been used
    dones[1] = 0.0  # one env never resets
    return obs, dones


def torch_step(model, obs: np.ndarray, states: np.ndarray, actions: np.ndarray):
    """torch's one-step values, next states and log-probs of `actions` for obs [B, 5], states [B, S]: the pieces
    of `ActorCritic.act`, with the log-prob taken of given actions instead of torch's own samples."""
    with torch.no_grad():
        out = model.act(torch.from_numpy(obs), torch.from_numpy(states))
        x = model.encoder(model.normalize_obs(torch.from_numpy(obs)).flatten(1))
        features, next_states = model.core_step(x, torch.from_numpy(states))
        taken = torch.from_numpy(actions)
        log_probs = model.distribution(features).log_prob(taken.squeeze(-1) if model.is_discrete else taken)
    torch.testing.assert_close(out.rnn_states, next_states, rtol=0.0, atol=0.0)  # act's own states, exactly
    return out.values.numpy(), out.rnn_states.numpy(), log_probs.numpy()


def step_numpy(act, obs: np.ndarray, dones: np.ndarray, S: int) -> dict[str, np.ndarray]:
    """Run `act(obs_t, states_t)` over the sequence, zeroing the states after each done as the env runner does.
    Returns the states before every step ([N, T + 1, S], as the rnn_states buffer holds them), and the actions,
    log-probs, values and next states (before the reset) of every step."""
    states = np.zeros((N, T + 1, S), np.float32)
    out: dict[str, list[np.ndarray]] = {"actions": [], "log_probs": [], "values": [], "next": []}
    for t in range(T):
        actions, log_probs, values, nxt = act(obs[:, t], states[:, t])
        assert nxt.shape == (N, S) and nxt.dtype == np.float32
        for name, x in zip(out, (actions, log_probs, values, nxt), strict=True):
            out[name].append(x)
        states[:, t + 1] = nxt
        states[:, t + 1][dones[:, t] > 0] = 0.0  # a new episode starts from the zero state
    return {"states": states, **{name: np.stack(xs, axis=1) for name, xs in out.items()}}


def check_against_torch(model, run: dict[str, np.ndarray], obs: np.ndarray, dones: np.ndarray, mine: np.ndarray):
    """Env rows `mine` of a numpy run against `model`: step by step with the same states, as one torch chain of
    its own, and as the learner replays the whole sequence (every recurrence the learner may use)."""
    states = run["states"][mine]
    n = int(mine.sum())
    chain = torch.zeros(n, states.shape[-1])
    for t in range(T):
        values, nxt, log_probs = torch_step(model, obs[mine, t], states[:, t], run["actions"][mine, t])
        np.testing.assert_allclose(run["values"][mine, t], values, **TOL)
        np.testing.assert_allclose(run["next"][mine, t], nxt, **TOL)
        np.testing.assert_allclose(run["log_probs"][mine, t], log_probs, **TOL)
        # torch stepping on its own states: the numpy states do not drift from it over the sequence.
        np.testing.assert_allclose(states[:, t], chain.numpy(), **TOL)
        with torch.no_grad():
            chain = model.act(torch.from_numpy(obs[mine, t]), chain).rnn_states
            chain = chain * (1.0 - torch.from_numpy(dones[mine, t])).unsqueeze(-1)
    # The learner's replay: from the stored state at each chunk start, reset after every done.
    with torch.no_grad():
        for recurrence in (T, 5, 1):
            ev = model(
                torch.from_numpy(obs[mine]),
                torch.from_numpy(run["actions"][mine]),
                torch.from_numpy(states[:, :T]),
                torch.from_numpy(dones[mine]),
                recurrence,
            )
            np.testing.assert_allclose(run["values"][mine], ev.values.numpy(), **TOL)
            np.testing.assert_allclose(run["log_probs"][mine], ev.log_probs.numpy(), **TOL)


@pytest.mark.parametrize("space", ["box", "discrete"])
@pytest.mark.parametrize("rnn_type", ["gru", "lstm"])
def test_one_recurrent_policy_is_the_torch_model(rnn_type, space):
    model = random_model(recurrent_cfg(rnn_type), SPACES[space], seed=1)
    fast = NumpyActorCritic(model, seed=2)
    obs, dones = sequence(3)
    run = step_numpy(fast.act, obs, dones, state_size(rnn_type))
    assert dones.sum() >= 10 and np.abs(run["states"]).max() > 0.1  # resets and states that matter
    check_against_torch(model, run, obs, dones, np.ones(N, bool))


@pytest.mark.parametrize("space", ["box", "discrete"])
@pytest.mark.parametrize("rnn_type", ["gru", "lstm"])
def test_a_recurrent_population_acts_with_each_envs_own_policy(rnn_type, space):
    """Three policies of different weights in one stacked pass: every env's values, log-probs and states are its
    own policy's, with uneven groups (padding rows in the stacked cell)."""
    models = [random_model(recurrent_cfg(rnn_type), SPACES[space], seed=s) for s in (4, 5, 6)]
    stack = NumpyPolicyStack([NumpyActorCritic(m, seed=s) for s, m in enumerate(models)], seed=7)
    owner = np.array([0, 2, 1, 2, 2, 0, 1, 2, 2, 0, 2])
    obs, dones = sequence(8)
    run = step_numpy(lambda o, h: stack.act(o, owner, h), obs, dones, state_size(rnn_type))
    for k, model in enumerate(models):
        check_against_torch(model, run, obs, dones, owner == k)
    # The same policies' weights give different states: each env really ran its own.
    assert not np.allclose(run["next"][owner == 0][:1], run["next"][owner == 2][:1])


@pytest.mark.parametrize("space", ["box", "discrete"])
@pytest.mark.parametrize("rnn_type", ["gru", "lstm"])
def test_deterministic_actions_are_torchs_mode(rnn_type, space):
    models = [random_model(recurrent_cfg(rnn_type), SPACES[space], seed=s) for s in (1, 2)]
    rng = np.random.default_rng(9)
    obs = (rng.standard_normal((N, 5)) * 3).astype(np.float32)
    states = rng.standard_normal((N, state_size(rnn_type))).astype(np.float32) * 0.5
    owner = np.arange(N) % 2
    single = NumpyActorCritic(models[0], seed=0).act(obs, states, deterministic=True)
    stacked = NumpyPolicyStack([NumpyActorCritic(m, seed=0) for m in models], seed=0).act(obs, owner, states, True)
    for out, mine, model in [(single, np.ones(N, bool), models[0])] + [
        (stacked, owner == k, models[k]) for k in (0, 1)
    ]:
        with torch.no_grad():
            expected = model.act(torch.from_numpy(obs[mine]), torch.from_numpy(states[mine]), deterministic=True)
        if space == "discrete":
            np.testing.assert_array_equal(out.actions[mine], expected.actions.numpy())
        else:
            np.testing.assert_allclose(out.actions[mine], expected.actions.numpy(), **TOL)
        np.testing.assert_allclose(out.log_probs[mine], expected.log_probs.numpy(), **TOL)
        np.testing.assert_allclose(out.values[mine], expected.values.numpy(), **TOL)
        np.testing.assert_allclose(out.rnn_states[mine], expected.rnn_states.numpy(), **TOL)


@pytest.mark.parametrize("rnn_type", ["gru", "lstm"])
def test_saturated_gates_raise_no_warnings(rnn_type):
    """Gate pre-activations far beyond float32 exp's range (|x| ~ 200; 1 / (1 + exp(-x)) overflows below about
    -88): no overflow warning, and still torch's numbers. Shifted by biases rather than scaled weights, so the
    pre-activations themselves stay as well conditioned as in the other tests."""
    model = random_model(recurrent_cfg(rnn_type), SPACES["box"], seed=3)
    with torch.no_grad():
        bias = model.core.bias_ih
        bias.add_(torch.where(torch.rand_like(bias) < 0.5, -200.0, 200.0))
    rng = np.random.default_rng(1)
    obs = (rng.standard_normal((N, 5)) * 4).astype(np.float32)
    states = rng.standard_normal((N, state_size(rnn_type))).astype(np.float32)
    with warnings.catch_warnings(), np.errstate(all="raise"):
        warnings.simplefilter("error")
        out = NumpyActorCritic(model, seed=0).act(obs, states, deterministic=True)
    with torch.no_grad():
        expected = model.act(torch.from_numpy(obs), torch.from_numpy(states), deterministic=True)
    np.testing.assert_allclose(out.values, expected.values.numpy(), **TOL)
    np.testing.assert_allclose(out.rnn_states, expected.rnn_states.numpy(), **TOL)


def test_core_weights_are_reread_and_states_are_required():
    model = random_model(recurrent_cfg("gru"), SPACES["box"], seed=0)
    fast = NumpyActorCritic(model, seed=0)
    obs, states = np.ones((2, 5), np.float32), np.zeros((2, 16), np.float32)
    before = fast.act(obs, states).rnn_states
    with torch.no_grad():
        model.core.bias_ih.add_(1.0)
    np.testing.assert_array_equal(fast.act(obs, states).rnn_states, before)  # a copy, not a view into torch
    fast.load(model)
    with torch.no_grad():
        expected = model.act(torch.from_numpy(obs), torch.from_numpy(states)).rnn_states.numpy()
    np.testing.assert_allclose(fast.act(obs, states).rnn_states, expected, **TOL)
    with pytest.raises(ValueError, match="needs rnn_states"):
        fast.act(obs)
    # A stack of recurrent and feed-forward members, or of other cells or sizes, is refused.
    for other in [Cfg(), recurrent_cfg("lstm"), Cfg(use_rnn=True, rnn_size=8, encoder_mlp_layers=[32, 24])]:
        with pytest.raises(ValueError, match="another architecture"):
            NumpyPolicyStack([fast, NumpyActorCritic(random_model(other, SPACES["box"]), seed=1)], seed=0)
