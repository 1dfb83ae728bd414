"""The numpy forward pass of CPU policy workers is the torch model's `act`, not an approximation: same values,
log-probs that the torch distribution agrees with, and samples from the same distribution; and it refuses every
model it does not compute (other cores, other classes) instead of running it as the MLP. Recurrent models:
tests/unit/test_numpy_recurrent.py."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from appo.config.cfg import Cfg
from appo.models.actor_critic import ActorCritic, ActOutput
from appo.models.numpy_twins import NumpyActorCritic
from appo.models.registry import MODELS, make_model, register_model
from appo.numpy_policy.actor_critic import NumpyPolicyStack

OBS = gym.spaces.Box(-np.inf, np.inf, (5,), np.float32)


def random_model(cfg: Cfg, action_space: gym.Space, seed: int = 0):
    torch.manual_seed(seed)
    model = make_model(cfg, OBS, action_space).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.3)
    model.obs_normalizer.update(torch.randn(500, 5, dtype=torch.float64) * 4 + 2)
    return model


@pytest.mark.parametrize("nonlinearity", ["tanh", "relu", "elu"])
def test_gaussian_values_and_log_probs_match_torch(nonlinearity):
    model = random_model(Cfg(nonlinearity=nonlinearity), gym.spaces.Box(-1, 1, (3,), np.float32))
    fast = NumpyActorCritic(model, seed=1)
    obs = (np.random.default_rng(2).standard_normal((64, 5)) * 6).astype(np.float32)  # some beyond the clip
    actions, log_probs, values, states = fast.act(obs)
    assert states is None  # no core: the (absent) states pass through
    with torch.no_grad():
        x = model.encoder(model.normalize_obs(torch.from_numpy(obs)))
        dist = model.distribution(x)
        np.testing.assert_allclose(values, model.value_head(x).squeeze(-1).numpy(), rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(log_probs, dist.log_prob(torch.from_numpy(actions)).numpy(), rtol=1e-4, atol=1e-4)
    # Samples come from that Gaussian: mean and spread over many draws of one observation.
    many = fast.act(np.repeat(obs[:1], 20000, axis=0))[0]
    np.testing.assert_allclose(many.mean(0), dist.mean[0].numpy(), atol=0.05)
    np.testing.assert_allclose(many.std(0), dist.std[0].numpy(), rtol=0.05)
    assert actions.dtype == np.float32 and log_probs.shape == values.shape == (64,)


def test_categorical_matches_torch():
    model = random_model(Cfg(), gym.spaces.Discrete(4))
    fast = NumpyActorCritic(model, seed=3)
    obs = np.random.default_rng(4).standard_normal((32, 5)).astype(np.float32)
    actions, log_probs, values, _ = fast.act(obs)
    assert actions.shape == (32, 1) and actions.dtype == np.int64
    with torch.no_grad():
        x = model.encoder(model.normalize_obs(torch.from_numpy(obs)))
        dist = model.distribution(x)
        np.testing.assert_allclose(log_probs, dist.log_prob(torch.from_numpy(actions)).numpy(), atol=1e-5)
        np.testing.assert_allclose(values, model.value_head(x).squeeze(-1).numpy(), rtol=1e-4, atol=1e-5)
    draws = fast.act(np.repeat(obs[:1], 40000, axis=0))[0][:, 0]
    freq = np.bincount(draws, minlength=4) / len(draws)
    np.testing.assert_allclose(freq, dist.probs[0].numpy(), atol=0.01)


def test_weights_are_reread_after_a_pull():
    model = random_model(Cfg(), gym.spaces.Box(-1, 1, (3,), np.float32))
    fast = NumpyActorCritic(model, seed=0)
    obs = np.ones((2, 5), np.float32)
    before = fast.act(obs)[2]
    with torch.no_grad():
        model.value_head.bias.add_(1.0)
    assert np.allclose(fast.act(obs)[2], before)  # a copy, not a view into torch
    fast.load(model)
    np.testing.assert_allclose(fast.act(obs)[2], before + 1.0, rtol=1e-5)


def test_other_cores_and_gpus_keep_torch():
    for rnn_type in ("gru", "lstm"):
        rnn = make_model(Cfg(use_rnn=True, rnn_type=rnn_type), OBS, gym.spaces.Discrete(2))
        assert NumpyActorCritic.supports(rnn, "cpu") and not NumpyActorCritic.supports(rnn, "cuda")
    # Anything but exactly a GRUCell or LSTMCell with biases, matching rnn_type, is refused.
    cases = [
        (torch.nn.RNNCell(64, 8), "RNNCell, not GRUCell or LSTMCell"),
        (torch.nn.GRUCell(64, 8, bias=False), "no biases"),
        (type("MyGRUCell", (torch.nn.GRUCell,), {})(64, 8), "MyGRUCell, not GRUCell"),
        (torch.nn.LSTMCell(64, 8), "LSTMCell but rnn_type is 'gru'"),
    ]
    for core, reason in cases:
        model = make_model(Cfg(use_rnn=True, rnn_size=8), OBS, gym.spaces.Discrete(2))
        model.core = core
        assert not NumpyActorCritic.supports(model, "cpu")
        with pytest.raises(ValueError, match=reason):
            NumpyActorCritic(model, seed=0)
    plain = make_model(Cfg(), OBS, gym.spaces.Discrete(2))
    assert NumpyActorCritic.supports(plain, "cpu") and NumpyActorCritic.supports(plain, torch.device("cpu"))
    assert not NumpyActorCritic.supports(plain, "cuda") and not NumpyActorCritic.supports(plain, "cuda:0")
    assert NumpyActorCritic.supports(make_model(Cfg(separate_value_trunk=True), OBS, gym.spaces.Discrete(2)), "cpu")


class ShiftedValues(ActorCritic):
    """An ActorCritic in every attribute the numpy pass reads, whose `act` computes something else."""

    def act(self, obs: torch.Tensor, rnn_states: torch.Tensor, deterministic: bool = False) -> ActOutput:
        out = super().act(obs, rnn_states, deterministic)
        return out._replace(values=out.values + 1.0)


def test_other_registered_models_keep_torch():
    """Only exactly ActorCritic runs in numpy: a subclass (another registered kind) could compute anything."""
    try:
        register_model("test_shifted_values")(ShiftedValues)
        model = make_model(Cfg(), OBS, gym.spaces.Discrete(2), kind="test_shifted_values")
        assert isinstance(model, ActorCritic) and model.core is None
        assert not NumpyActorCritic.supports(model, "cpu")
        with pytest.raises(ValueError, match="ShiftedValues is not ActorCritic"):
            NumpyActorCritic(model, seed=0)
        # Nor can a supported member's weights be swapped for an unsupported model's on a pull.
        fast = NumpyActorCritic(make_model(Cfg(), OBS, gym.spaces.Discrete(2)), seed=0)
        with pytest.raises(ValueError, match="not ActorCritic"):
            fast.load(model)
    finally:
        MODELS.pop("test_shifted_values", None)


def test_a_stack_refuses_members_of_other_architectures():
    space = gym.spaces.Box(-1, 1, (3,), np.float32)
    base = NumpyActorCritic(random_model(Cfg(), space), seed=0)
    for other in [Cfg(nonlinearity="relu"), Cfg(encoder_mlp_layers=[64, 32]), Cfg(separate_value_trunk=True)]:
        with pytest.raises(ValueError, match="member 1 has another architecture"):
            NumpyPolicyStack([base, NumpyActorCritic(random_model(other, space), seed=1)], seed=0)
    trunk = NumpyActorCritic(random_model(Cfg(separate_value_trunk=True), space), seed=0)
    wide = NumpyActorCritic(random_model(Cfg(separate_value_trunk=True, value_mlp_layers=[64, 32]), space), seed=1)
    with pytest.raises(ValueError, match="member 1 has another architecture"):
        NumpyPolicyStack([trunk, wide], seed=0)
    discrete = NumpyActorCritic(random_model(Cfg(), gym.spaces.Discrete(3)), seed=1)
    with pytest.raises(ValueError, match="another architecture"):
        NumpyPolicyStack([base, discrete], seed=0)
    with pytest.raises(ValueError, match="one or more"):
        NumpyPolicyStack([], seed=0)


@pytest.mark.parametrize("value_layers", [[], [48, 16, 8]])
@pytest.mark.parametrize("discrete", [False, True])
def test_separate_value_trunk_matches_torch(discrete, value_layers):
    """Values from the value trunk (of the policy's widths or its own) and log-probs from the policy's encoder,
    alone and in a stack."""
    space = gym.spaces.Discrete(4) if discrete else gym.spaces.Box(-1, 1, (3,), np.float32)
    cfg = Cfg(separate_value_trunk=True, nonlinearity="elu", value_mlp_layers=value_layers)
    models = [random_model(cfg, space, seed=s) for s in range(3)]
    rng = np.random.default_rng(8)
    obs = (rng.standard_normal((29, 5)) * 6).astype(np.float32)  # some beyond the clip
    owner = rng.integers(0, 3, 29)
    single = NumpyActorCritic(models[0], seed=0).act(obs)
    stacked = NumpyPolicyStack([NumpyActorCritic(m, seed=s) for s, m in enumerate(models)], seed=7).act(obs, owner)
    for k, model in enumerate(models):
        # The single policy's pass is member 0's, over every env.
        cases = [(stacked, owner == k)] + ([(single, np.ones(len(obs), bool))] if k == 0 else [])
        for (actions, log_probs, values, _), mine in cases:
            with torch.no_grad():
                out = model.act(torch.from_numpy(obs[mine]), torch.zeros(int(mine.sum()), 1))
                dist = model.distribution(model.encoder(model.normalize_obs(torch.from_numpy(obs[mine]))))
                taken = torch.from_numpy(actions[mine])
                expected = dist.log_prob(taken.squeeze(-1) if discrete else taken)
            np.testing.assert_allclose(values[mine], out.values.numpy(), rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(log_probs[mine], expected.numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("discrete", [False, True])
def test_a_stack_acts_with_each_envs_own_policy(discrete):
    """A population's stacked pass gives every env the values and log-probs of its own policy's model."""
    space = gym.spaces.Discrete(4) if discrete else gym.spaces.Box(-1, 1, (3,), np.float32)
    models = [random_model(Cfg(), space, seed=s) for s in range(3)]
    stack = NumpyPolicyStack([NumpyActorCritic(m, seed=s) for s, m in enumerate(models)], seed=7)
    rng = np.random.default_rng(5)
    obs = (rng.standard_normal((23, 5)) * 3).astype(np.float32)
    owner = rng.integers(0, 3, 23)
    owner[:2] = [2, 2]  # uneven groups: padding rows in play
    actions, log_probs, values, states = stack.act(obs, owner)
    assert states is None
    assert actions.shape[0] == log_probs.shape[0] == values.shape[0] == 23
    for k, model in enumerate(models):
        mine = owner == k
        with torch.no_grad():
            x = model.encoder(model.normalize_obs(torch.from_numpy(obs[mine])))
            dist = model.distribution(x)
            expected = dist.log_prob(torch.from_numpy(actions[mine])).numpy()
            np.testing.assert_allclose(values[mine], model.value_head(x).squeeze(-1).numpy(), rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(log_probs[mine], expected, rtol=1e-4, atol=1e-4)
    # A batch of one policy takes that member's own pass; after a restack the new weights are used.
    single = stack.act(obs[:4], np.full(4, 1))[2]
    with torch.no_grad():
        expected_single = models[1].value_head(models[1].encoder(models[1].normalize_obs(torch.from_numpy(obs[:4]))))
    np.testing.assert_allclose(single, expected_single.squeeze(-1).numpy(), rtol=1e-4, atol=1e-5)
    with torch.no_grad():
        models[0].value_head.bias.add_(1.0)
    stack.members[0].load(models[0])
    before = values[owner == 0]
    stack.restack()
    np.testing.assert_allclose(stack.act(obs, owner)[2][owner == 0], before + 1.0, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("discrete", "algo"), [(True, "udrl"), (False, "udrl"), (True, "rcp_r"), (False, "rcp_a")])
def test_command_policy_matches_torch(discrete, algo):
    """UDRL's and RCP's CommandPolicy acts in the actor workers in numpy: the torch model's mode, log-probs the torch
    distribution agrees with, samples from its distribution, and the warm-up's uniform actions before any update."""
    from appo.config.cfg import parse_cfg
    from appo.models.command_policy import CommandPolicy
    from appo.models.numpy_twins import NumpyCommandPolicy, make_numpy_policy

    cfg = parse_cfg([f"--algo={algo}", "--env=CartPole-v1"])
    action_space = gym.spaces.Discrete(4) if discrete else gym.spaces.Box(-1, 1, (3,), np.float32)
    torch.manual_seed(5)
    model = make_model(cfg, OBS, action_space).eval()
    assert type(model) is CommandPolicy
    warm = make_numpy_policy(model, "cpu", seed=6)
    assert type(warm) is NumpyCommandPolicy
    obs = (np.random.default_rng(7).standard_normal((48, 5)) * 2).astype(np.float32)
    actions, log_probs, values, _ = warm.act(obs)  # no update yet: uniform actions
    if discrete:
        assert actions.shape == (48, 1) and set(np.unique(actions)) <= {0, 1, 2, 3}
        np.testing.assert_allclose(log_probs, -np.log(4.0), rtol=1e-6)
    else:
        assert actions.shape == (48, 3) and (np.abs(actions) <= 1).all() and actions.std() > 0.4
        assert (log_probs == 0).all()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.3)
        model.updates.fill_(1)
    fast = NumpyCommandPolicy(model, seed=8)
    actions, log_probs, values, _ = fast.act(obs)
    assert (values == 0).all() and log_probs.shape == (48,)
    with torch.no_grad():
        dist = model.distribution(torch.from_numpy(obs))
        taken = torch.from_numpy(actions[:, 0] if discrete else actions)
        np.testing.assert_allclose(log_probs, dist.log_prob(taken).numpy(), rtol=1e-4, atol=1e-4)
        mode = model.act(torch.from_numpy(obs), torch.zeros(48, 1), deterministic=True).actions.numpy()
    np.testing.assert_allclose(fast.act(obs, deterministic=True)[0], mode, rtol=1e-5, atol=1e-5)
    many = fast.act(np.repeat(obs[:1], 40000, axis=0))[0]
    if discrete:
        freq = np.bincount(many[:, 0], minlength=4) / len(many)
        np.testing.assert_allclose(freq, dist.probs[0].numpy(), atol=0.01)
    else:
        np.testing.assert_allclose(many.mean(0), dist.mean[0].numpy(), atol=0.05)
