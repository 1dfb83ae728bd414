"""Dict observations packed into one uint8 array (appo/envs/packed_obs.py) and taken apart by the model
(appo/models/encoders.py `unpack_obs`): every key comes back bit for bit in its dtype and shape, from single
observations and from slices of trajectory tensors [N, T, bytes]; each key starts aligned to its item size; the
model's encoders read exactly the dict the env returned, its vector keys standardised under --normalize_input and its
images untouched; make_env packs a user's Dict env and only appo's
actor-critic takes it."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces

from appo.config.cfg import Cfg
from appo.envs import make_env
from appo.envs.common.packed_obs import PackDictObs, PackedObsSpace
from appo.envs.common.quadrant_image import QuadrantDictEnv
from appo.models.encoders import unpack_obs
from appo.models.registry import make_model

MIXED = spaces.Dict(
    {
        "image": spaces.Box(0, 255, (3, 5, 7), np.uint8),  # 105 bytes: odd
        "vector": spaces.Box(-1e3, 1e3, (3,), np.float32),
        "wide": spaces.Box(-1e9, 1e9, (2,), np.float64),
        "count": spaces.Box(-100, 100, (5,), np.int32),
        "flag": spaces.Box(0, 1, (1,), np.uint8),
    }
)


def sample(space: spaces.Dict, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Observations that use every bit pattern a key may hold (negative, fractional, large)."""
    out = {}
    for key, sub in space.spaces.items():
        if np.issubdtype(sub.dtype, np.floating):
            out[key] = (rng.standard_normal(sub.shape) * 1e3).astype(sub.dtype)
        else:
            info = np.iinfo(sub.dtype)
            out[key] = rng.integers(info.min, info.max, sub.shape, dtype=sub.dtype, endpoint=True)
    return out


def test_keys_are_laid_out_by_item_size_each_aligned_and_the_total_padded() -> None:
    space = PackedObsSpace(MIXED)
    assert [k.key for k in space.layout] == ["wide", "count", "vector", "flag", "image"]
    for k in space.layout:
        assert k.offset % np.dtype(k.dtype).itemsize == 0, k
    assert space.layout[-1].offset + space.layout[-1].nbytes == 16 + 20 + 12 + 1 + 105
    assert space.shape == (160,) and space.dtype == np.uint8  # 154 bytes padded to a multiple of 8


def test_numpy_and_torch_unpacking_give_back_every_key_bit_for_bit() -> None:
    space = PackedObsSpace(MIXED)
    rng = np.random.default_rng(0)
    obs = [[sample(MIXED, rng) for _ in range(6)] for _ in range(4)]  # [N=4, T=6]
    packed = np.stack([np.stack([space.pack(o) for o in row]) for row in obs])
    assert packed.shape == (4, 6, 160)
    one = space.unpack(packed[1, 2])
    for key, value in obs[1][2].items():
        assert one[key].dtype == value.dtype and one[key].tobytes() == value.tobytes(), key
    tensor = torch.from_numpy(packed)
    for view in (tensor, tensor[:, 1:5], tensor[::2, 3]):  # whole, a time slice, strided rows
        taken = unpack_obs(view, space.layout)
        expected = space.unpack(view.numpy())
        for key, value in expected.items():
            assert taken[key].shape == value.shape and taken[key].numpy().tobytes() == value.tobytes(), key
    assert taken["wide"].dtype == torch.float64 and taken["image"].dtype == torch.uint8


def test_a_non_box_key_is_refused_in_one_line() -> None:
    with pytest.raises(ValueError, match=r"^--env=mine: Dict observation key 'd' is Discrete\(3\); only Box"):
        PackedObsSpace(spaces.Dict({"d": spaces.Discrete(3)}), "mine")


def test_make_env_packs_a_users_dict_env_and_the_model_reads_the_dicts_it_returned() -> None:
    name = "appo.envs.common.quadrant_image:QuadrantDictEnv"
    env = make_env(name)
    assert isinstance(env, PackDictObs) and isinstance(env.observation_space, PackedObsSpace)
    raw = QuadrantDictEnv()
    obs, _ = env.reset(seed=3)
    raw_obs, _ = raw.reset(seed=3)
    rows, dicts = [obs], [raw_obs]
    for action in (0, 1, 2, 3, 1):
        rows.append(env.step(action)[0])
        dicts.append(raw.step(action)[0])
    assert len({float(d["flag"][0]) for d in dicts}) == 2  # both flags occur
    cfg = Cfg(env=name, normalize_input=False)
    model = make_model(cfg, env.observation_space, env.action_space)
    assert model.encoder_kind == "dict" and model.obs_normalizer is None
    read = model.encoder_input(torch.from_numpy(np.stack(rows)), 1)
    for key in ("image", "flag"):
        expected = np.stack([d[key] for d in dicts])
        assert read[key].numpy().tobytes() == expected.tobytes() and read[key].dtype == torch.from_numpy(expected).dtype
    with torch.no_grad():
        packed_features = model.encoder(read)
        dict_features = model.encoder({k: torch.from_numpy(np.stack([d[k] for d in dicts])) for k in read})
    assert torch.equal(packed_features, dict_features)


@pytest.mark.parametrize("algo", ["sac", "udrl"])
def test_only_the_actor_critic_takes_dict_observations(algo: str) -> None:
    env = make_env("appo.envs.common.quadrant_image:QuadrantDictEnv")
    cfg = Cfg(env="appo.envs.common.quadrant_image:QuadrantDictEnv", algo=algo)
    with pytest.raises(ValueError, match=rf"^--algo={algo}: Dict observation spaces are not supported"):
        make_model(cfg, env.observation_space, gym.spaces.Box(-1.0, 1.0, (2,), np.float32))


def test_normalize_input_standardises_the_vector_keys_and_leaves_images_as_they_are() -> None:
    keys = spaces.Dict({**MIXED.spaces, "image": spaces.Box(0, 255, (40, 40, 3), np.uint8)})  # big enough a convnet
    space = PackedObsSpace(keys)
    model = make_model(Cfg(encoder="simple"), space, spaces.Discrete(3))
    rng = np.random.default_rng(0)
    obs = [{k: rng.uniform(sub.low, sub.high).astype(sub.dtype) for k, sub in keys.spaces.items()} for _ in range(9)]
    batch = torch.from_numpy(np.stack([space.pack(o) for o in obs]))
    vectors = model.normalizer_input(batch)  # the vector keys in the encoder's (sorted) order, as float32
    assert model.encoder.vector_keys == ["count", "flag", "vector", "wide"] and vectors.shape == (9, 5 + 1 + 3 + 2)
    model.obs_normalizer.update(vectors)
    read = model.encoder_input(batch, 1)
    assert read["image"].dtype == torch.uint8 and torch.equal(read["image"], unpack_obs(batch, space.layout)["image"])
    mean, std = model.obs_normalizer.mean, torch.sqrt(model.obs_normalizer.var + model.obs_normalizer.epsilon)
    start = 0
    for key in model.encoder.vector_keys:
        size = int(np.prod(keys[key].shape))
        raw = torch.from_numpy(np.stack([o[key] for o in obs])).double().reshape(9, size)
        expected = ((raw - mean[start : start + size]) / std[start : start + size]).clamp(-5, 5)
        assert read[key].dtype == torch.float32 and read[key].shape == (9, *keys[key].shape)
        torch.testing.assert_close(read[key].reshape(9, size).double(), expected, atol=1e-5, rtol=1e-5)
        start += size
