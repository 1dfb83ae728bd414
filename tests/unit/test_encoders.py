"""Observation encoders (appo/models/encoders.py): the encoder each space and --encoder give, the convnets' outputs
over any leading dims, the image layout and the uint8 scaling, the Dict encoder, a conv ActorCritic with a recurrent
core or a separate value trunk, the errors for flags that do not fit, vector models exactly as before the encoders
(parameters and seeded draws), and a conv ActorCritic learning a small image task."""

from __future__ import annotations

import hashlib

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

from appo.config.cfg import ENCODERS, Cfg
from appo.config.verify import verify
from appo.models.actor_critic import ActorCritic
from appo.models.device import compute_dtype
from appo.models.encoders import (
    MIX_WIDTH,
    ConvStackEncoder,
    ImpalaEncoder,
    MultiInputEncoder,
    encoder_kind,
    is_channels_last,
    make_encoder,
    set_compute_dtype,
)
from appo.models.registry import make_model
from appo.numpy_policy.conv import IMAGE_ENCODERS

ATARI = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)  # stacked grayscale frames, channels-first
RGB = gym.spaces.Box(0, 255, (64, 64, 3), np.uint8)  # a rendered frame, channels-last
VECTOR = gym.spaces.Box(-1, 1, (5,), np.float32)
BOX = gym.spaces.Box(-1, 1, (2,), np.float32)
SMALL = gym.spaces.Box(0, 255, (4, 40, 40), np.uint8)  # big enough for every convnet, cheap on a shared CPU


def frames(space: gym.spaces.Box, *lead: int, seed: int = 0) -> torch.Tensor:
    rng = np.random.default_rng(seed)
    if space.dtype == np.uint8:
        return torch.as_tensor(rng.integers(0, 256, (*lead, *space.shape), dtype=np.uint8))
    return torch.as_tensor(rng.random((*lead, *space.shape), dtype=np.float32))


def test_encoder_values_are_the_flag_s():
    assert ENCODERS == ("auto", "mlp", *IMAGE_ENCODERS)


@pytest.mark.parametrize(("kind", "width"), [("nature", 512), ("simple", 512), ("impala", 256)])
@pytest.mark.parametrize("space", [ATARI, RGB], ids=["atari", "rgb"])
def test_convnet_outputs_over_any_leading_dims(kind, width, space):
    torch.manual_seed(0)
    encoder, size = make_encoder(Cfg(encoder=kind), space)
    assert size == width == encoder.out_size
    batch = frames(space, 3, 2)
    out = encoder(batch)
    assert out.shape == (3, 2, width) and out.dtype == torch.float32
    # The same function of each observation, whatever the leading dims.
    torch.testing.assert_close(encoder(batch.reshape(6, *space.shape)).reshape(3, 2, width), out)
    if kind != "simple":  # ReLU after the last linear layer (ELU for simple)
        assert (out >= 0).all()


@pytest.mark.parametrize(
    ("space", "flag", "expected"),
    [
        (VECTOR, "auto", nn.Sequential),
        (ATARI, "auto", ConvStackEncoder),
        (RGB, "auto", ConvStackEncoder),
        (gym.spaces.Box(0.0, 1.0, (3, 40, 40), np.float32), "auto", ConvStackEncoder),
        (ATARI, "impala", ImpalaEncoder),
        (ATARI, "simple", ConvStackEncoder),
        (ATARI, "mlp", nn.Sequential),
        (gym.spaces.Dict({"image": RGB, "state": VECTOR}), "auto", MultiInputEncoder),
    ],
)
def test_auto_selection_by_space(space, flag, expected):
    encoder, _ = make_encoder(Cfg(encoder=flag), space)
    assert type(encoder) is expected
    if isinstance(encoder, ConvStackEncoder):
        assert encoder.kind == ("nature" if flag == "auto" else flag)


def test_image_layout_from_the_shape():
    assert not is_channels_last((4, 84, 84)) and not is_channels_last((3, 64, 64))
    assert is_channels_last((64, 64, 3)) and is_channels_last((84, 84, 4)) and is_channels_last((64, 64, 12))


@pytest.mark.parametrize("kind", IMAGE_ENCODERS)
def test_channels_last_images_are_permuted(kind):
    """An (H, W, C) encoder computes what the (C, H, W) encoder with the same weights computes on the same pixels."""
    space = gym.spaces.Box(0, 255, (40, 40, 3), np.uint8)
    last = make_encoder(Cfg(encoder=kind), space)[0]
    first = make_encoder(Cfg(encoder=kind), gym.spaces.Box(0, 255, (3, 40, 40), np.uint8))[0]
    first.load_state_dict(last.state_dict())
    x = frames(space, 4)
    torch.testing.assert_close(last(x), first(x.permute(0, 3, 1, 2)))


@pytest.mark.parametrize("kind", IMAGE_ENCODERS)
def test_uint8_pixels_are_scaled_by_the_space(kind):
    """A uint8 image space divides by 255 inside the encoder: x as uint8 (or as float values 0..255) gives what a
    float image space's encoder with the same weights gives on x / 255; a float space reads its input as is."""
    as_uint8 = make_encoder(Cfg(encoder=kind), SMALL)[0]
    as_float = make_encoder(Cfg(encoder=kind), gym.spaces.Box(0.0, 1.0, SMALL.shape, np.float32))[0]
    as_float.load_state_dict(as_uint8.state_dict())
    x = frames(SMALL, 5)
    expected = as_float(x.float() / 255.0)
    torch.testing.assert_close(as_uint8(x), expected)
    torch.testing.assert_close(as_uint8(x.float()), expected)
    assert not torch.allclose(as_float(x.float()), expected)


def test_conv_models_are_not_normalised():
    model = make_model(Cfg(normalize_input=True), ATARI, gym.spaces.Discrete(6))
    assert model.obs_normalizer is None and model.returns_normalizer is not None
    assert make_model(Cfg(normalize_input=True), VECTOR, BOX).obs_normalizer is not None


def test_dict_encoder_takes_a_dict_of_tensors():
    space = gym.spaces.Dict(
        {"camera": RGB, "joints": VECTOR, "goal": gym.spaces.Box(-1, 1, (2, 2), np.float32), "top": ATARI}
    )
    torch.manual_seed(0)
    encoder, size = make_encoder(Cfg(encoder="impala", encoder_mlp_layers=[32, 16]), space)
    assert encoder.image_keys == ["camera", "top"] and encoder.vector_keys == ["goal", "joints"]
    assert size == MIX_WIDTH
    obs = {k: frames(space[k], 2, 3, seed=i) for i, k in enumerate(sorted(space.spaces))}
    out, parts = encoder(obs), encoder.parts(obs)
    assert out.shape == (2, 3, size) and parts.shape == (2, 3, 256 + 256 + 16)
    # The parts in order: each image key's own convnet, then the MLP over the other keys; then mixed.
    torch.testing.assert_close(parts[..., :256], encoder.images["camera"](obs["camera"]))
    vector = torch.cat([obs["goal"].reshape(2, 3, 4), obs["joints"]], dim=-1)
    torch.testing.assert_close(parts[..., 512:], encoder.mlp(vector))
    torch.testing.assert_close(out, encoder.mix(parts))
    flat = make_encoder(Cfg(encoder="mlp", encoder_mlp_layers=[8]), space)[0]
    assert flat.image_keys == [] and flat.out_size == 8
    with pytest.raises(ValueError, match="key 'n' is Discrete"):
        make_encoder(Cfg(), gym.spaces.Dict({"n": gym.spaces.Discrete(3)}))


def test_actor_critic_on_dict_observations():
    space = gym.spaces.Dict({"image": gym.spaces.Box(0, 255, (36, 36, 3), np.uint8), "state": VECTOR})
    torch.manual_seed(0)
    model = make_model(Cfg(use_rnn=True, rnn_size=16), space, gym.spaces.Discrete(4))
    assert model.obs_normalizer.shape == (int(np.prod(VECTOR.shape)),)  # the vector key's statistics
    N, T = 2, 4
    obs = {k: frames(space[k], N, T, seed=i) for i, k in enumerate(space.spaces)}
    steps = stepped(model, obs, N, T, 16)
    out = model(obs, steps.actions, steps.states, torch.zeros(N, T), T)
    torch.testing.assert_close(out.log_probs, steps.log_probs, atol=1e-5, rtol=0)
    torch.testing.assert_close(out.values, steps.values, atol=1e-5, rtol=0)


class Steps:
    def __init__(self, actions, log_probs, values, states):
        self.actions, self.log_probs, self.values, self.states = actions, log_probs, values, states


def stepped(model, obs, N: int, T: int, state_size: int) -> Steps:
    """`act` step by step over [N, T] observations (a tensor or a dict of them), as the actor workers do."""
    take = (lambda t: {k: v[:, t] for k, v in obs.items()}) if isinstance(obs, dict) else (lambda t: obs[:, t])
    state = torch.randn(N, state_size) * 0.1
    actions, log_probs, values, states = [], [], [], []
    for t in range(T):
        states.append(state)
        out = model.act(take(t), state)
        actions.append(out.actions)
        log_probs.append(out.log_probs)
        values.append(out.values)
        state = out.rnn_states
    stack = lambda xs: torch.stack(xs, dim=1)  # noqa: E731
    return Steps(stack(actions), stack(log_probs), stack(values), stack(states))


@pytest.mark.parametrize("kind", IMAGE_ENCODERS)
@pytest.mark.parametrize("rnn_type", [None, "gru", "lstm"])
def test_conv_core_act_and_forward_agree(kind, rnn_type):
    """The actor's step-by-step `act` and the learner's whole-trajectory `forward` compute the same log-probs and
    values through a convnet and a recurrent core."""
    torch.manual_seed(0)
    space = gym.spaces.Box(0, 255, (36, 36, 3), np.uint8)
    cfg = Cfg(encoder=kind, use_rnn=rnn_type is not None, rnn_type=rnn_type or "gru", rnn_size=16)
    model = make_model(cfg, space, BOX)
    N, T = 2, 3
    obs = frames(space, N, T)
    S = 32 if rnn_type == "lstm" else 16
    steps = stepped(model, obs, N, T, S)
    out = model(obs, steps.actions, steps.states, torch.zeros(N, T), T)
    torch.testing.assert_close(out.log_probs, steps.log_probs, atol=1e-5, rtol=0)
    torch.testing.assert_close(out.values, steps.values, atol=1e-5, rtol=0)
    torch.testing.assert_close(model.values(obs, steps.states, torch.zeros(N, T), T), out.values)


def test_conv_separate_value_trunk():
    """With --separate_value_trunk an image model's value head reads its own convnet of the same kind: the policy's
    encoder changes log-probs only, the value trunk values only."""
    torch.manual_seed(0)
    model = make_model(Cfg(encoder="simple", separate_value_trunk=True), SMALL, BOX)
    assert type(model.value_encoder) is type(model.encoder) and model.value_encoder.kind == "simple"
    obs, N, T = frames(SMALL, 2, 2), 2, 2
    args = (torch.zeros(N, T, 2), torch.zeros(N, T, 1), torch.zeros(N, T), T)
    before = model(obs, *args)
    with torch.no_grad():
        model.encoder.fc[0].weight.add_(0.1)
    after = model(obs, *args)
    torch.testing.assert_close(after.values, before.values)
    assert not torch.allclose(after.log_probs, before.log_probs)
    torch.testing.assert_close(model.values(obs, args[1], args[2], T), after.values)
    with pytest.raises(ValueError, match="^--value_mlp_layers: sizes an MLP value trunk; with image"):
        make_model(Cfg(separate_value_trunk=True, value_mlp_layers=[32]), RGB, BOX)


def test_bad_flags_get_one_line_errors():
    assert verify(Cfg(encoder="resnet")) == ["--encoder=resnet: must be one of auto, mlp, nature, simple, impala"]
    with pytest.raises(ValueError, match="^--encoder=resnet: must be one of auto, mlp, nature, simple, impala$"):
        make_model(Cfg(encoder="resnet"), ATARI, BOX)
    with pytest.raises(ValueError, match=r"^--encoder=nature: needs image observations \(a 3-D Box\)"):
        make_model(Cfg(encoder="nature"), VECTOR, BOX)
    with pytest.raises(ValueError, match=r"^--encoder=nature: the image \(3, 16, 16\) is too small"):
        make_model(Cfg(), gym.spaces.Box(0, 255, (3, 16, 16), np.uint8), BOX)
    sac = Cfg(algo="sac")
    with pytest.raises(ValueError, match="^--algo=sac: image observations .* need a convnet"):
        make_model(sac, ATARI, BOX)
    with pytest.raises(ValueError, match="^--algo=sac: Dict observation spaces are not supported"):
        make_model(sac, gym.spaces.Dict({"x": VECTOR}), BOX)
    with pytest.raises(ValueError, match="^--algo=udrl: needs a flat Box observation space"):
        make_model(Cfg(algo="udrl"), ATARI, gym.spaces.Discrete(3))


# sha256 (first 16 hex digits) of the state dict of models built after torch.manual_seed(7) by the code from before
# the encoders (commit 901a185), and the next draw from torch's generator: vector models have the same parameters,
# initialised from the same draws, so old checkpoints load and serial runs stay bit-identical.
OLD_MODELS = [
    (Cfg(), BOX, "950ced4aa76129a1", 0.7724984884262085),
    (Cfg(use_rnn=True, rnn_type="lstm", rnn_size=8), gym.spaces.Discrete(3), "5219029e504ec811", 0.8370071649551392),
    (Cfg(separate_value_trunk=True, nonlinearity="relu", value_mlp_layers=[32]), BOX, "1e59d79dec990ea9", 0.0625705),
]


@pytest.mark.parametrize(("cfg", "action_space", "digest", "next_draw"), OLD_MODELS)
def test_vector_models_are_the_old_ones(cfg, action_space, digest, next_draw):
    torch.manual_seed(7)
    model = make_model(cfg, VECTOR, action_space)
    assert encoder_kind(cfg, VECTOR) == "mlp" and type(model.encoder) is nn.Sequential
    h = hashlib.sha256()
    for k, v in model.state_dict().items():
        h.update(k.encode())
        h.update(v.contiguous().numpy().tobytes())
    assert h.hexdigest()[:16] == digest
    assert torch.rand(1).item() == pytest.approx(next_draw, abs=1e-7)
    assert "encoder.0.weight" in model.state_dict()


def quadrant_images(rng: np.random.Generator, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """n noisy uint8 images (36, 36, 1) with a bright 12x12 patch in one of four quadrants; the label: which."""
    labels = rng.integers(0, 4, n)
    images = rng.integers(0, 80, (n, 36, 36, 1), dtype=np.uint8)
    for i, q in enumerate(labels):
        r, c = 3 + 18 * (q // 2), 3 + 18 * (q % 2)
        images[i, r : r + 12, c : c + 12] = 220
    return torch.as_tensor(images), torch.as_tensor(labels)


@pytest.mark.parametrize("kind", ["nature", "impala"])
def test_bf16_convnets_hand_on_float32_features_near_float32_s(kind):
    """--learner_precision=bf16: the convs and the linear layer run under autocast, the features they hand on and
    the gradients of the (float32) weights stay float32, and the features are those of float32 to bf16's precision."""
    torch.manual_seed(0)
    model = make_model(Cfg(encoder=kind), SMALL, gym.spaces.Discrete(3))
    obs = frames(SMALL, 2, 3)
    exact = model.encoder(obs)
    set_compute_dtype(model, torch.bfloat16)
    assert model.encoder.compute_dtype == torch.bfloat16
    low = model.encoder(obs)
    assert low.dtype == torch.float32 and low.shape == exact.shape == (2, 3, model.encoder.out_size)
    scale = exact.abs().max().item()
    assert scale > 0 and (low - exact).abs().max().item() < 0.05 * scale
    assert not torch.equal(low, exact)  # it did run in bf16
    low.sum().backward()
    grads = [p.grad for p in model.encoder.parameters()]
    assert all(g is not None and g.dtype == torch.float32 and torch.isfinite(g).all() for g in grads)
    set_compute_dtype(model, None)
    assert torch.equal(model.encoder(obs), exact)


def test_learner_precision_values():
    assert compute_dtype("fp32", "cpu") is None
    assert compute_dtype("bf16", "cpu") == torch.bfloat16
    native = torch.ops.mkldnn._is_mkldnn_bf16_supported()
    assert compute_dtype("auto", "cpu") == (torch.bfloat16 if native else None)
    assert verify(Cfg(learner_precision="fp16")) == ["--learner_precision=fp16: must be one of fp32, bf16, auto"]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("dtype", [None, torch.bfloat16], ids=["fp32", "bf16"])
def test_conv_actor_critic_learns_an_image_task(dtype):
    """A one-step bandit from pixels: reward 1 for naming the quadrant of the bright patch. A few hundred PPO
    gradient steps (clipped surrogate, value loss, advantages from the value) take a conv ActorCritic from chance to
    naming nearly every quadrant, and its value loss (measured on each batch before training on it) falls; with
    its convnet in bf16 (--learner_precision=bf16) as in float32."""
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    model = make_model(Cfg(encoder="nature"), gym.spaces.Box(0, 255, (36, 36, 1), np.uint8), gym.spaces.Discrete(4))
    assert isinstance(model, ActorCritic)
    set_compute_dtype(model, dtype)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    zeros = torch.zeros(32, 1, 1)
    losses = []
    for _ in range(50):  # 50 batches x 4 epochs = 200 gradient steps (about 8 s on one shared core)
        obs, labels = quadrant_images(rng, 32)
        act = model.act(obs, zeros[:, 0])
        rewards = (act.actions[:, 0] == labels).float()
        advantages = rewards - act.values
        for _ in range(4):
            out = model(obs[:, None], act.actions[:, None], zeros, zeros[..., 0], 1)
            ratio = torch.exp(out.log_probs[:, 0] - act.log_probs)
            surrogate = torch.min(ratio * advantages, ratio.clamp(0.8, 1.2) * advantages)
            loss = -surrogate.mean() + 0.5 * (out.values[:, 0] - rewards).square().mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        losses.append(0.5 * (rewards - act.values).square().mean().item())
    obs, labels = quadrant_images(rng, 256)
    accuracy = (model.act(obs, torch.zeros(256, 1), deterministic=True).actions[:, 0] == labels).float().mean()
    assert accuracy > 0.9, accuracy
    assert np.mean(losses[-10:]) < 0.1 * np.mean(losses[:10]), (losses[:10], losses[-10:])
