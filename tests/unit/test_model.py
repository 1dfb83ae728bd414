"""Model: output shapes, recurrent state reset at episode ends, agreement between the policy worker's
step-by-step `act` and the learner's whole-trajectory `evaluate`, `forward` under `torch.func.functional_call`,
the model registry, and the separate value trunk (off: the parameters of before the option)."""

from __future__ import annotations

from dataclasses import replace

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn
from torch.func import functional_call

from appo.config.cfg import Cfg
from appo.config.verify import verify
from appo.models.actor_critic import ActorCritic
from appo.models.registry import MODELS, make_model, register_model

OBS = gym.spaces.Box(-1, 1, (4,), np.float32)
BOX = gym.spaces.Box(-1, 1, (2,), np.float32)


@pytest.mark.parametrize("action_space", [gym.spaces.Box(-1, 1, (2,), np.float32), gym.spaces.Discrete(3)])
@pytest.mark.parametrize("rnn_type", [None, "gru", "lstm", "separate_value_trunk"])
def test_act_and_evaluate_agree(action_space, rnn_type):
    torch.manual_seed(0)
    trunk = rnn_type == "separate_value_trunk"
    rnn_type = None if trunk else rnn_type
    cfg = Cfg(
        use_rnn=rnn_type is not None,
        rnn_type=rnn_type or "gru",
        rnn_size=8,
        encoder_mlp_layers=[16],
        separate_value_trunk=trunk,
    )
    model = make_model(cfg, OBS, action_space)
    N, T = 3, 6
    H = 16 if rnn_type == "lstm" else 8
    H = H if rnn_type else 1
    obs = torch.randn(N, T, 4)
    dones = torch.zeros(N, T)
    dones[1, 2] = 1.0  # episode of trajectory 1 ends after step 2
    states = torch.zeros(N, T, H)
    h = torch.zeros(N, H)
    step_log_probs, step_values, actions = [], [], []
    for t in range(T):
        states[:, t] = h
        out = model.act(obs[:, t], h)
        step_log_probs.append(out.log_probs)
        step_values.append(out.values)
        actions.append(out.actions)
        h = out.rnn_states * (1 - dones[:, t]).unsqueeze(-1) if rnn_type else h
    actions = torch.stack(actions, 1)
    assert actions.shape[:2] == (N, T)
    ev = model(obs, actions, states, dones, recurrence=T)
    assert ev.log_probs.shape == (N, T) and ev.values.shape == (N, T) and ev.entropy.shape == (N, T)
    torch.testing.assert_close(ev.log_probs, torch.stack(step_log_probs, 1), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ev.values, torch.stack(step_values, 1), atol=1e-5, rtol=1e-5)


def test_rnn_state_reset_at_done_only():
    torch.manual_seed(0)
    cfg = Cfg(use_rnn=True, rnn_size=8, encoder_mlp_layers=[16])
    model = make_model(cfg, OBS, gym.spaces.Box(-1, 1, (2,), np.float32))
    obs = torch.randn(1, 4, 4).expand(2, 4, 4).clone()
    dones = torch.zeros(2, 4)
    dones[1, 1] = 1.0
    feats = model.features(obs, torch.zeros(2, 4, 8), dones, recurrence=4)
    torch.testing.assert_close(feats[0, :2], feats[1, :2])  # same until the done
    fresh = model.features(obs[1:, 2:], torch.zeros(1, 2, 8), torch.zeros(1, 2), recurrence=2)
    torch.testing.assert_close(feats[1, 2:], fresh[0])  # after the done: as if starting from zero
    assert not torch.allclose(feats[0, 2:], feats[1, 2:])


def trajectories(model: nn.Module, rnn_type: str | None, N: int = 3, T: int = 5) -> tuple[torch.Tensor, ...]:
    """(obs [N, T, 4], actions [N, T, A], rnn_states [N, T, H], dones [N, T]) with actions drawn by the model."""
    H = 1 if rnn_type is None else 16 if rnn_type == "lstm" else 8
    obs, states, dones = torch.randn(N, T, 4), torch.randn(N, T, H) * 0.5, torch.zeros(N, T)
    dones[0, 1] = 1.0
    actions = model.act(obs.flatten(0, 1), states.flatten(0, 1)).actions.unflatten(0, (N, T))
    return obs, actions, states, dones


def rnn_cfg(rnn_type: str | None, **kwargs: object) -> Cfg:
    return Cfg(use_rnn=rnn_type is not None, rnn_type=rnn_type or "gru", rnn_size=8, encoder_mlp_layers=[16], **kwargs)


@pytest.mark.parametrize("action_space", [BOX, gym.spaces.Discrete(3)])
@pytest.mark.parametrize("rnn_type", [None, "lstm"])
def test_functional_call_is_evaluate(action_space, rnn_type):
    """`forward` is the learner's computation, so functional_call with the model's own tensors reproduces
    `evaluate`, other parameters give other outputs, and gradients reach the parameters passed in."""
    torch.manual_seed(0)
    model = make_model(rnn_cfg(rnn_type), OBS, action_space)
    model.obs_normalizer.update(torch.randn(100, 4) * 2 + 1)  # buffers that matter
    args = trajectories(model, rnn_type)
    expected = model(*args, 2)
    own = {**dict(model.named_parameters()), **dict(model.named_buffers())}
    out = functional_call(model, own, (*args, 2))
    torch.testing.assert_close(out.log_probs, expected.log_probs)
    torch.testing.assert_close(out.values, expected.values)
    torch.testing.assert_close(out.entropy, expected.entropy)

    perturbed = {k: v + 0.1 * torch.randn_like(v) for k, v in model.named_parameters()}
    other = functional_call(model, {**own, **perturbed}, (*args, 2))
    assert not torch.allclose(other.log_probs, expected.log_probs)
    assert not torch.allclose(other.values, expected.values)

    def loss(params: dict[str, torch.Tensor]) -> torch.Tensor:
        out = functional_call(model, {**own, **params}, (*args, 2))
        return out.log_probs.mean() + out.values.square().mean() - 0.01 * out.entropy.mean()

    params = {k: v.detach() for k, v in model.named_parameters()}
    grads = torch.func.grad(loss)(params)
    assert grads.keys() == params.keys()
    # The same gradients as autograd through the module itself (evaluate, what the learner differentiates).
    ev = model(*args, 2)
    (ev.log_probs.mean() + ev.values.square().mean() - 0.01 * ev.entropy.mean()).backward()
    for name, p in model.named_parameters():
        torch.testing.assert_close(grads[name], p.grad, msg=name)
        assert grads[name].abs().sum() > 0, name


@pytest.mark.parametrize("rnn_type", [None, "gru", "trunk"])
def test_values_are_evaluates_values(rnn_type):
    torch.manual_seed(0)
    trunk = rnn_type == "trunk"
    rnn_type = None if trunk else rnn_type
    model = make_model(rnn_cfg(rnn_type, separate_value_trunk=trunk), OBS, BOX)
    obs, actions, states, dones = trajectories(model, rnn_type)
    values = model.values(obs, states, dones, 2)
    assert values.shape == obs.shape[:2]
    torch.testing.assert_close(values, model(obs, actions, states, dones, 2).values)


# Parameter and buffer names of models from before --separate_value_trunk: checkpoints store these.
KEYS_BOX = [
    "log_std",
    "obs_normalizer.mean",
    "obs_normalizer.var",
    "obs_normalizer.count",
    "returns_normalizer.mean",
    "returns_normalizer.var",
    "returns_normalizer.count",
    "encoder.0.weight",
    "encoder.0.bias",
    "encoder.2.weight",
    "encoder.2.bias",
    "policy_head.weight",
    "policy_head.bias",
    "value_head.weight",
    "value_head.bias",
]
CORE = ["core.weight_ih", "core.weight_hh", "core.bias_ih", "core.bias_hh"]
KEYS_LSTM_DISCRETE = KEYS_BOX[1:11] + CORE + KEYS_BOX[11:]
KEYS_NO_NORMALIZERS = KEYS_BOX[:1] + KEYS_BOX[7:]


@pytest.mark.parametrize(
    ("cfg", "action_space", "keys"),
    [
        (Cfg(), BOX, KEYS_BOX),
        (Cfg(use_rnn=True, rnn_type="lstm", rnn_size=8), gym.spaces.Discrete(3), KEYS_LSTM_DISCRETE),
        (Cfg(normalize_input=False, normalize_returns=False), BOX, KEYS_NO_NORMALIZERS),
    ],
)
def test_default_model_keeps_the_old_parameters(cfg, action_space, keys):
    """Without the separate value trunk a model has exactly the parameters (names, order) it had before the
    option existed, so old checkpoints load; with it, the trunk's come after all of those and the seeded
    initialisation of the others is unchanged (it is built last)."""
    torch.manual_seed(0)
    plain = make_model(cfg, OBS, action_space).state_dict()
    assert list(plain) == keys
    if cfg.use_rnn:
        return
    torch.manual_seed(0)
    trunk = make_model(replace(cfg, separate_value_trunk=True), OBS, action_space).state_dict()
    extra = ["value_encoder.0.weight", "value_encoder.0.bias", "value_encoder.2.weight", "value_encoder.2.bias"]
    assert list(trunk) == keys + extra
    for k in keys:
        torch.testing.assert_close(trunk[k], plain[k], rtol=0, atol=0)
    assert trunk["value_encoder.0.weight"].shape == plain["encoder.0.weight"].shape


def test_separate_value_trunk():
    """The value head reads its own trunk: the policy's encoder changes log-probs but not values, and the
    trunk changes values but not log-probs."""
    torch.manual_seed(0)
    model = make_model(Cfg(separate_value_trunk=True, encoder_mlp_layers=[16, 8]), OBS, BOX)
    assert [type(m) for m in model.value_encoder] == [type(m) for m in model.encoder]
    obs, actions, states, dones = trajectories(model, None)
    before = model(obs, actions, states, dones, 1)
    with torch.no_grad():
        model.encoder[0].weight.add_(0.5)
    after = model(obs, actions, states, dones, 1)
    torch.testing.assert_close(after.values, before.values)
    assert not torch.allclose(after.log_probs, before.log_probs)
    with torch.no_grad():
        model.value_encoder[0].weight.add_(0.5)
    last = model(obs, actions, states, dones, 1)
    torch.testing.assert_close(last.log_probs, after.log_probs)
    assert not torch.allclose(last.values, after.values)


def test_value_trunk_widths():
    """--value_mlp_layers sizes the separate trunk (and the value head after it); the policy's side stays as it was."""
    plain = make_model(Cfg(separate_value_trunk=True, encoder_mlp_layers=[16, 8]), OBS, BOX)
    cfg = Cfg(separate_value_trunk=True, encoder_mlp_layers=[16, 8], value_mlp_layers=[32, 24, 12])
    wide = make_model(cfg, OBS, BOX)
    linear = [m for m in wide.value_encoder if isinstance(m, torch.nn.Linear)]
    assert [(m.in_features, m.out_features) for m in linear] == [(OBS.shape[0], 32), (32, 24), (24, 12)]
    assert wide.value_head.in_features == 12
    assert {k: v.shape for k, v in wide.state_dict().items() if "value" not in k} == {
        k: v.shape for k, v in plain.state_dict().items() if "value" not in k
    }
    obs, actions, states, dones = trajectories(wide, None)
    assert wide(obs, actions, states, dones, 1).values.shape == obs.shape[:2]
    with pytest.raises(ValueError, match="^--value_mlp_layers 32: sizes the separate value trunk; add --separate_"):
        make_model(Cfg(value_mlp_layers=[32]), OBS, BOX)


def test_value_trunk_flags_are_verified():
    assert verify(Cfg(separate_value_trunk=True, value_mlp_layers=[256, 256])) == []
    assert verify(Cfg(value_mlp_layers=[256, 256])) == [
        "--value_mlp_layers 256 256: sizes the separate value trunk; add --separate_value_trunk (or a --value_input "
        "other than local)"
    ]
    assert verify(Cfg(value_input="team", value_mlp_layers=[64, 64])) == []
    assert verify(Cfg(value_input="state", separate_value_trunk=True)) == [
        "--separate_value_trunk: --value_input=state already gives the value a trunk of its own"
    ]
    assert verify(Cfg(value_input="global")) == ["--value_input=global: must be one of local, team, state"]
    assert verify(Cfg(separate_value_trunk=True, value_mlp_layers=[64, 0])) == [
        "--value_mlp_layers 64 0: every hidden size must be > 0"
    ]
    refused = "--separate_value_trunk: not supported with --use_rnn"
    assert verify(Cfg(use_rnn=True, separate_value_trunk=True)) == [refused]


def test_separate_value_trunk_is_refused_with_a_core():
    with pytest.raises(ValueError, match="^--separate_value_trunk: not supported with --use_rnn$"):
        make_model(Cfg(use_rnn=True, separate_value_trunk=True), OBS, BOX)


def test_registry():
    assert MODELS["actor_critic"] is ActorCritic
    assert type(make_model(Cfg(), OBS, BOX)) is ActorCritic
    with pytest.raises(ValueError, match="'q_pair'.*actor_critic"):
        make_model(Cfg(), OBS, BOX, kind="q_pair")

    class Twin(nn.Module):
        def __init__(self, cfg: Cfg, obs_space: gym.Space, action_space: gym.Space) -> None:
            super().__init__()
            self.q = nn.Linear(int(np.prod(obs_space.shape)) + int(np.prod(action_space.shape)), 1)

    try:
        assert register_model("test_twin")(Twin) is Twin
        assert register_model("test_twin")(Twin) is Twin  # the same class again: no-op
        built = make_model(Cfg(), OBS, BOX, kind="test_twin")
        assert type(built) is Twin and built.q.in_features == 6
        with pytest.raises(ValueError, match="already registered"):
            register_model("test_twin")(type("Other", (nn.Module,), {}))
        with pytest.raises(ValueError, match="already registered"):
            register_model("actor_critic")(Twin)
    finally:
        MODELS.pop("test_twin", None)
    assert MODELS["actor_critic"] is ActorCritic
