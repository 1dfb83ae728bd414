"""The conv ActorCritic in numpy (appo/numpy_policy/conv.py, bound in appo/models/numpy_twins.py): the same function
as torch, within 1e-4, for every convnet with and without a recurrent core and with a separate value trunk; the
numpy layers against torch's; a population of conv policies in one stack; an npz export that `appo.load_policy`
plays; and the ONNX export of a conv policy, uint8 frames in, run by onnxruntime."""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch.nn import functional

import appo
from appo.config.cfg import Cfg, cfg_to_dict
from appo.models.numpy_twins import make_numpy_policy, numpy_description
from appo.models.registry import make_model
from appo.numpy_policy.actor_critic import NumpyPolicyStack
from appo.numpy_policy.conv import IMAGE_ENCODERS, conv2d, conv_weight, max_pool
from appo.numpy_policy.policy_file import write_policy_file
from appo.numpy_policy.registry import make_numpy_pass

FRAMES = gym.spaces.Box(0, 255, (4, 40, 40), np.uint8)  # channels-first, as stacked Atari frames
RGB = gym.spaces.Box(0, 255, (36, 36, 3), np.uint8)  # channels-last
FLOAT = gym.spaces.Box(0.0, 1.0, (3, 36, 36), np.float32)
BOX = gym.spaces.Box(-1, 1, (3,), np.float32)
ATOL = 1e-4


def observations(space: gym.spaces.Box, n: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if space.dtype == np.uint8:
        return rng.integers(0, 256, (n, *space.shape), dtype=np.uint8)
    return rng.random((n, *space.shape), dtype=np.float32)


def state_size(cfg: Cfg) -> int:
    return 2 * cfg.rnn_size if cfg.rnn_type == "lstm" else cfg.rnn_size


def assert_same_act(model, twin, obs: np.ndarray, rnn: bool, size: int) -> None:
    """Deterministic actions, log-probs, values and next states of the twin and the torch model agree."""
    states = np.random.default_rng(1).standard_normal((len(obs), size)).astype(np.float32) * 0.5
    expected = model.act(torch.as_tensor(obs), torch.as_tensor(states), deterministic=True)
    got = twin.act(obs, states if rnn else None, deterministic=True)
    np.testing.assert_allclose(got.actions, expected.actions.numpy(), atol=ATOL, rtol=0)
    np.testing.assert_allclose(got.log_probs, expected.log_probs.numpy(), atol=ATOL, rtol=0)
    np.testing.assert_allclose(got.values, expected.values.numpy(), atol=ATOL, rtol=0)
    if rnn:
        np.testing.assert_allclose(got.rnn_states, expected.rnn_states.numpy(), atol=ATOL, rtol=0)


@pytest.mark.parametrize("kind", IMAGE_ENCODERS)
@pytest.mark.parametrize("core", [None, "gru", "lstm"])
@pytest.mark.parametrize("space", [FRAMES, RGB, FLOAT], ids=["frames", "rgb", "float"])
def test_numpy_is_torch(kind, core, space):
    torch.manual_seed(0)
    cfg = Cfg(encoder=kind, use_rnn=core is not None, rnn_type=core or "gru", rnn_size=16)
    action_space = gym.spaces.Discrete(5) if core == "gru" else BOX
    model = make_model(cfg, space, action_space)
    twin = make_numpy_policy(model, "cpu", seed=0)
    assert twin is not None and twin.description["encoder"]["kind"] == kind
    assert twin.state_size == (state_size(cfg) if core else 0)
    assert_same_act(model, twin, observations(space, 6), core is not None, state_size(cfg))


def test_numpy_pass_leaves_a_callers_float_frames_as_they_are():
    """Channels-last float32 frames of a uint8 space need no copy to lay out: the scaling by 1/255 must not happen
    in the caller's array (a second call on it would see the frames scaled twice)."""
    torch.manual_seed(0)
    twin = make_numpy_policy(make_model(Cfg(encoder="simple"), RGB, BOX), "cpu", seed=0)
    frames = observations(RGB, 3)
    as_float = frames.astype(np.float32)
    first = twin.act(as_float, None, deterministic=True).actions
    np.testing.assert_array_equal(as_float, frames.astype(np.float32))
    np.testing.assert_allclose(twin.act(as_float, None, deterministic=True).actions, first, atol=ATOL, rtol=0)
    np.testing.assert_allclose(twin.act(frames, None, deterministic=True).actions, first, atol=ATOL, rtol=0)


@pytest.mark.parametrize("kind", IMAGE_ENCODERS)
def test_numpy_separate_value_trunk(kind):
    torch.manual_seed(0)
    model = make_model(Cfg(encoder=kind, separate_value_trunk=True), RGB, BOX)
    twin = make_numpy_policy(model, "cpu", seed=0)
    assert twin.separate_value_trunk and twin.value_trunk is not None
    assert_same_act(model, twin, observations(RGB, 4), False, 1)


def test_numpy_layers_are_torch_s():
    """conv2d (strides, padding) and max_pool against torch's, on channels-last arrays."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 5, 13, 11)).astype(np.float32)  # N, C, H, W
    for kernel, stride, pad in [(8, 4, 0), (4, 2, 0), (3, 1, 1), (3, 2, 0)]:
        conv = torch.nn.Conv2d(5, 7, kernel, stride=stride, padding=pad)
        state = {f"c.{k}": v.detach().numpy() for k, v in conv.state_dict().items()}
        got = conv2d(x.transpose(0, 2, 3, 1), *conv_weight(state, "c"), stride=stride, pad=pad)
        np.testing.assert_allclose(got.transpose(0, 3, 1, 2), conv(torch.as_tensor(x)).detach().numpy(), atol=1e-5)
    pooled = max_pool(x.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
    np.testing.assert_array_equal(pooled, functional.max_pool2d(torch.as_tensor(x), 3, 2, 1).numpy())


def assert_stack_acts_as_its_members(space: gym.Space, obs: np.ndarray) -> None:
    """NumpyPolicyStack over three simple-convnet members of `space`: each of the 7 envs of `obs` acts with its own
    member's encoder, as that member alone."""
    members = []
    for seed in range(3):
        torch.manual_seed(seed)
        members.append(make_numpy_policy(make_model(Cfg(encoder="simple"), space, BOX), "cpu", seed=0))
    stack = NumpyPolicyStack(members, seed=0)
    owner = np.array([2, 0, 2, 1, 0, 2, 0])
    got = stack.act(obs, owner, deterministic=True)
    for member in range(3):
        rows = owner == member
        alone = members[member].act(obs[rows], deterministic=True)
        np.testing.assert_allclose(got.actions[rows], alone.actions, atol=1e-5, rtol=0)
        np.testing.assert_allclose(got.values[rows], alone.values, atol=1e-5, rtol=0)


def test_a_population_of_conv_policies_acts_in_one_stack():
    assert_stack_acts_as_its_members(RGB, observations(RGB, 7))


def export_meta(model, cfg: Cfg, space: gym.spaces.Box, action_space: gym.spaces.Box) -> dict:
    """The npz meta `python -m appo.export` writes (appo/tools/export.py policy_parts), for a model built here."""
    return {
        "model": numpy_description(model),
        "cfg": cfg_to_dict(cfg),
        "observation_shape": list(space.shape),
        "action": {"type": "Box", "shape": list(action_space.shape)},
        "source": {"checkpoint": "none", "version": 0, "env_steps": 0},
    }


def test_an_exported_conv_policy_plays_in_numpy(tmp_path: Path):
    """The npz file of a recurrent conv policy: its description survives JSON, and `appo.load_policy` acts as the
    torch model does, one observation at a time with the state carried."""
    torch.manual_seed(0)
    cfg = Cfg(encoder="impala", use_rnn=True, rnn_size=8)
    model = make_model(cfg, FRAMES, BOX)
    meta = export_meta(model, cfg, FRAMES, BOX)
    assert json.loads(json.dumps(meta["model"])) == meta["model"]
    state = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    path = write_policy_file(tmp_path / "policy.npz", meta, state, {"action/low": BOX.low, "action/high": BOX.high})
    policy = appo.load_policy(path)
    assert policy.state_size == 8
    h_numpy, h_torch = policy.initial_state(), torch.zeros(1, 8)
    for obs in observations(FRAMES, 3):
        action, h_numpy = policy.act(obs, h_numpy)
        out = model.act(torch.as_tensor(obs[None]), h_torch, deterministic=True)
        h_torch = out.rnn_states
        np.testing.assert_allclose(action, out.actions[0].clamp(-1, 1).numpy(), atol=ATOL, rtol=0)
        np.testing.assert_allclose(h_numpy, h_torch[0].numpy(), atol=ATOL, rtol=0)
    fresh = make_numpy_pass(meta["model"], seed=0)
    fresh.load_state(state)
    assert fresh.state_size == 8


@pytest.mark.parametrize("kind", ["nature", "impala"])
def test_onnx_export_of_a_conv_policy(tmp_path: Path, kind: str):
    """The ONNX graph of a recurrent conv policy takes uint8 frames and computes the torch model's deterministic
    actions and next states."""
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    from appo.tools.export import _export_onnx, deterministic_graph

    torch.manual_seed(0)
    model = make_model(Cfg(encoder=kind, use_rnn=True, rnn_size=8), FRAMES, gym.spaces.Discrete(4)).eval()
    inputs = (torch.zeros(2, *FRAMES.shape, dtype=torch.uint8), torch.zeros(2, 8))
    _export_onnx(deterministic_graph(model), inputs, tmp_path / "policy.onnx", "{}", ["obs"])
    session = ort.InferenceSession(str(tmp_path / "policy.onnx"), providers=["CPUExecutionProvider"])
    assert session.get_inputs()[0].type == "tensor(uint8)"
    obs = observations(FRAMES, 5)
    states = np.random.default_rng(2).standard_normal((5, 8)).astype(np.float32)
    actions, next_states = session.run(None, {"obs": obs, "rnn_state": states})
    expected = model.act(torch.as_tensor(obs), torch.as_tensor(states), deterministic=True)
    np.testing.assert_array_equal(actions, expected.actions.numpy())
    np.testing.assert_allclose(next_states, expected.rnn_states.numpy(), atol=ATOL, rtol=0)
