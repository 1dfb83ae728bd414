"""The Dict encoder in numpy (appo/numpy_policy/dict_encoder.py, bound in appo/models/numpy_twins.py): a Dict model's
numpy twin computes the torch model's function, within 1e-4, on packed observations (as the trajectory buffers hold
them) and on dicts of arrays, with image and vector keys of several dtypes, image or vector keys alone, a recurrent
core, a separate value trunk and the vector keys' input statistics; a population of Dict policies in one stack; an
npz export that `appo.load_policy` plays from the env's own dict observations and from packed ones; ONNX and
TorchScript exports, one input per key, that compute the model's actions on observations that change them."""

from __future__ import annotations

import json
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

import appo
from appo.config.cfg import Cfg, cfg_to_dict
from appo.envs.common.packed_obs import PackedObsSpace
from appo.models.numpy_twins import make_numpy_policy, numpy_description
from appo.models.registry import make_model
from appo.numpy_policy.policy_file import write_policy_file
from tests.unit.test_numpy_conv import ATOL, BOX, RGB, assert_same_act, assert_stack_acts_as_its_members

KEYS = {
    "image": RGB,  # uint8, channels last
    "state": gym.spaces.Box(-1, 1, (3,), np.float32),
    "count": gym.spaces.Box(0, 9, (2,), np.int32),  # bytes of another width: viewed, not cast
    "grid": gym.spaces.Box(0.0, 1.0, (2, 2), np.float64),
}
SPACES = {
    "image_and_vectors": PackedObsSpace(gym.spaces.Dict(KEYS)),
    "vectors_only": PackedObsSpace(gym.spaces.Dict({k: v for k, v in KEYS.items() if k != "image"})),
    "image_only": PackedObsSpace(gym.spaces.Dict({"image": RGB})),
}


def dict_observations(space: PackedObsSpace, n: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out = {}
    for key, sub in space.dict_space.spaces.items():
        if np.issubdtype(sub.dtype, np.integer):
            out[key] = rng.integers(int(sub.low.min()), int(sub.high.max()) + 1, (n, *sub.shape)).astype(sub.dtype)
        else:
            out[key] = rng.uniform(-1, 1, (n, *sub.shape)).astype(sub.dtype)
    return out


def packed(space: PackedObsSpace, obs: dict[str, np.ndarray]) -> np.ndarray:
    n = len(next(iter(obs.values())))
    return np.stack([space.pack({k: v[i] for k, v in obs.items()}) for i in range(n)])


def skew_statistics(model: torch.nn.Module, space: PackedObsSpace) -> None:
    """Input statistics far from the identity (--normalize_input, the vector keys'; none for images alone), so that
    a pass that skipped or misplaced the normalisation would compute another function."""
    if model.obs_normalizer is None:
        assert space.dict_space.spaces.keys() == {"image"}
        return
    vectors = model.normalizer_input(torch.from_numpy(packed(space, dict_observations(space, 64, seed=1))))
    model.obs_normalizer.update(vectors * 3 + torch.arange(vectors.shape[-1]))
    assert model.obs_normalizer.shape == (vectors.shape[-1],) and float(model.obs_normalizer.mean[-1]) > 1


@pytest.mark.parametrize("name", sorted(SPACES))
@pytest.mark.parametrize("trunk", ["shared", "gru", "separate_value"])
def test_numpy_is_torch(name: str, trunk: str) -> None:
    torch.manual_seed(0)
    space = SPACES[name]
    cfg = Cfg(encoder="simple", use_rnn=trunk == "gru", rnn_size=16, separate_value_trunk=trunk == "separate_value")
    model = make_model(cfg, space, BOX)
    skew_statistics(model, space)
    twin = make_numpy_policy(model, "cpu", seed=0)
    assert twin is not None and twin.description["encoder"]["kind"] == "dict"
    assert twin.separate_value_trunk == (trunk == "separate_value")
    obs = dict_observations(space, 5)
    assert_same_act(model, twin, packed(space, obs), trunk == "gru", 16)
    # The same observations as a dict of arrays by key: the same function.
    by_packed = twin.act(packed(space, obs), np.zeros((5, 16), np.float32) if trunk == "gru" else None, True)
    by_dict = twin.act(obs, np.zeros((5, 16), np.float32) if trunk == "gru" else None, True)
    np.testing.assert_array_equal(by_dict.actions, by_packed.actions)
    np.testing.assert_array_equal(by_dict.values, by_packed.values)


def test_a_population_of_dict_policies_acts_in_one_stack() -> None:
    space = SPACES["image_and_vectors"]
    assert_stack_acts_as_its_members(space, packed(space, dict_observations(space, 7)))


def test_an_exported_dict_policy_plays_from_dicts_and_packed_observations(tmp_path: Path) -> None:
    torch.manual_seed(0)
    space = SPACES["image_and_vectors"]
    cfg = Cfg(encoder="nature", use_rnn=True, rnn_size=8)
    model = make_model(cfg, space, BOX)
    meta = {
        "model": numpy_description(model),
        "cfg": cfg_to_dict(cfg),
        "observation_shape": list(space.shape),
        "observation_dtype": "uint8",
        "observation_keys": [k._asdict() for k in space.layout],
        "action": {"type": "Box", "shape": list(BOX.shape)},
        "source": {"checkpoint": "none", "version": 0, "env_steps": 0},
    }
    meta = json.loads(json.dumps(meta))  # as the file carries it
    state = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    path = write_policy_file(tmp_path / "policy.npz", meta, state, {"action/low": BOX.low, "action/high": BOX.high})
    policy = appo.load_policy(path)
    obs = dict_observations(space, 3)
    h_dict, h_packed, h_torch = policy.initial_state(), policy.initial_state(), torch.zeros(1, 8)
    for i in range(3):
        one = {k: v[i] for k, v in obs.items()}
        action, h_dict = policy.act(one, h_dict)
        again, h_packed = policy.act(space.pack(one), h_packed)
        out = model.act(torch.from_numpy(space.pack(one))[None], h_torch, deterministic=True)
        h_torch = out.rnn_states
        np.testing.assert_allclose(action, out.actions[0].clamp(-1, 1).numpy(), atol=ATOL, rtol=0)
        np.testing.assert_array_equal(action, again)
        np.testing.assert_allclose(h_dict, h_torch[0].numpy(), atol=ATOL, rtol=0)
    # A batch of dicts, each key [B, *shape]: the batch's actions.
    actions, _ = policy.act(obs, policy.initial_state(3))
    assert actions.shape == (3, *BOX.shape)


def test_onnx_and_torchscript_exports_of_a_dict_policy_take_one_input_per_key(tmp_path: Path) -> None:
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    from appo.tools.export import _export_onnx, deterministic_graph

    torch.manual_seed(0)
    space = SPACES["image_and_vectors"]
    model = make_model(Cfg(encoder="simple", use_rnn=True, rnn_size=8), space, gym.spaces.Discrete(4)).eval()
    with torch.no_grad():  # a policy head whose most likely action follows the observation
        model.policy_head.weight.mul_(300.0)
    keys = [k.key for k in space.layout]
    obs = dict_observations(space, 16)
    parts = [torch.from_numpy(obs[k]) for k in keys]
    states = torch.from_numpy(np.random.default_rng(2).standard_normal((16, 8)).astype(np.float32))
    graph = deterministic_graph(model, keys)
    _export_onnx(graph, (*parts, states), tmp_path / "policy.onnx", "{}", [f"obs_{k}" for k in keys])
    session = ort.InferenceSession(str(tmp_path / "policy.onnx"), providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == [*(f"obs_{k}" for k in keys), "rnn_state"]
    actions, next_states = session.run(None, {**{f"obs_{k}": obs[k] for k in keys}, "rnn_state": states.numpy()})
    traced = torch.jit.trace(graph, (*parts, states), check_trace=False)
    expected = model.act(torch.from_numpy(packed(space, obs)), states, deterministic=True)
    assert len(np.unique(expected.actions.numpy())) > 1  # the observations change the action
    np.testing.assert_array_equal(actions, expected.actions.numpy())
    np.testing.assert_allclose(next_states, expected.rnn_states.numpy(), atol=ATOL, rtol=0)
    assert torch.equal(traced(*parts, states)[0], expected.actions)
