"""--normalize_images: every convnet standardises each pixel by running statistics of its own (Sample Factory's
--normalize_input on images). The numpy pass computes the torch model's function with the statistics (plain images of
both layouts, a Dict model, a separate value trunk); the learner's update folds a strided subset of the batch's steps
into them (only the steps that train); a model without the flag has no statistics; other algorithms refuse it."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

import appo
from appo.algorithms.common.ranks import Ranks
from appo.algorithms.ppo.batch_passes import update_pixel_normalizers
from appo.config.cfg import Cfg
from appo.config.verify import verify
from appo.models.numpy_twins import make_numpy_policy
from appo.models.registry import make_model
from appo.numpy_policy.policy_file import write_policy_file
from tests.unit.test_numpy_conv import BOX, FRAMES, RGB, assert_same_act, export_meta, observations
from tests.unit.test_numpy_dict import SPACES, dict_observations, packed, skew_statistics


def skew_pixels(model: torch.nn.Module) -> None:
    """Pixel statistics far from the identity and different for every pixel, so that a pass that skipped them, or
    read them in another layout, would compute another function."""
    found = [e for _, e in model.image_encoders()]
    assert found and all(e.pixel_normalizer is not None for e in found)
    for e in found:
        norm = e.pixel_normalizer
        g = torch.Generator().manual_seed(3)
        norm.mean.copy_(torch.rand(norm.shape, generator=g, dtype=torch.float64))
        norm.var.copy_(torch.rand(norm.shape, generator=g, dtype=torch.float64) * 0.2 + 0.01)


@pytest.mark.parametrize("space", [FRAMES, RGB], ids=["frames", "rgb"])
@pytest.mark.parametrize("trunk", ["gru", "separate_value"])
def test_numpy_is_torch_with_pixel_statistics(space, trunk) -> None:
    torch.manual_seed(0)
    cfg = Cfg(encoder="simple", normalize_images=True, use_rnn=trunk == "gru", rnn_size=16)
    cfg.separate_value_trunk = trunk == "separate_value"
    model = make_model(cfg, space, BOX)
    skew_pixels(model)
    twin = make_numpy_policy(model, "cpu", seed=0)
    assert_same_act(model, twin, observations(space, 5), trunk == "gru", 16)
    # The statistics change what the model computes (else this test could not fail).
    plain = make_model(dataclasses.replace(cfg, normalize_images=False), space, BOX)
    plain.load_state_dict({k: v for k, v in model.state_dict().items() if "pixel_normalizer" not in k})
    obs = torch.as_tensor(observations(space, 5))
    assert not torch.allclose(plain.act(obs, None, deterministic=True).values, model.act(obs, None, True).values)


def test_numpy_is_torch_with_pixel_statistics_in_a_dict_model() -> None:
    torch.manual_seed(0)
    space = SPACES["image_and_vectors"]
    model = make_model(Cfg(encoder="simple", normalize_images=True), space, BOX)
    skew_statistics(model, space)
    skew_pixels(model)
    twin = make_numpy_policy(model, "cpu", seed=0)
    assert_same_act(model, twin, packed(space, dict_observations(space, 5)), False, 0)


def test_the_update_learns_the_pixels_of_the_steps_that_train() -> None:
    model = make_model(Cfg(encoder="nature", normalize_images=True), FRAMES, BOX)
    norm = model.image_encoders()[0][1].pixel_normalizer
    assert float(norm.count) == 0
    obs = torch.as_tensor(observations(FRAMES, 6 * 10)).reshape(6, 10, *FRAMES.shape)
    steps = torch.zeros(6, 10, dtype=torch.bool)
    steps[:3] = True  # the other rows are a pool's or padding: their frames are black
    obs[3:] = 0
    update_pixel_normalizers(model, Ranks(), obs, steps)
    taken = obs[:3].reshape(-1, *FRAMES.shape)[:: -(-30 // 128)].double() / 255
    assert float(norm.count) == 30
    torch.testing.assert_close(norm.mean, taken.mean(0))
    torch.testing.assert_close(norm.var, taken.var(0, correction=0))
    # A big batch: a strided subset of at most 128 frames.
    update_pixel_normalizers(model, Ranks(), obs.repeat(100, 1, 1, 1, 1), None)
    assert float(norm.count) == 30 + len(range(0, 6000, -(-6000 // 128)))


def test_without_the_flag_there_are_no_pixel_statistics() -> None:
    model = make_model(Cfg(encoder="nature"), FRAMES, BOX)
    assert not any("pixel_normalizer" in k for k in model.state_dict())
    assert model.pixel_batches(torch.zeros(4, *FRAMES.shape, dtype=torch.uint8)) == []
    assert "pixel_epsilon" not in model.encoder.spec()


def test_other_algorithms_refuse_the_flag() -> None:
    errors = verify(Cfg(algo="sac", normalize_images=True))
    assert "--normalize_images: only --algo=appo's learner keeps pixel statistics, not --algo=sac" in errors
    assert not [e for e in verify(Cfg(normalize_images=True)) if "normalize_images" in e]


def test_exports_carry_the_pixel_statistics(tmp_path: Path) -> None:
    """The npz policy file plays as the model does (appo.load_policy, numpy), and so does the ONNX graph."""
    torch.manual_seed(0)
    cfg = Cfg(encoder="nature", normalize_images=True)
    model = make_model(cfg, FRAMES, gym.spaces.Discrete(4)).eval()
    skew_pixels(model)
    obs = observations(FRAMES, 5)
    expected = model.act(torch.as_tensor(obs), None, deterministic=True).actions.numpy().reshape(-1)
    meta = export_meta(model, cfg, FRAMES, BOX) | {"action": {"type": "Discrete", "n": 4}}
    state = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    policy = appo.load_policy(write_policy_file(tmp_path / "policy.npz", meta, state, {}))
    np.testing.assert_array_equal([policy.act(o)[0] for o in obs], expected)
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    from appo.tools.export import _export_onnx, deterministic_graph

    inputs = (torch.zeros(2, *FRAMES.shape, dtype=torch.uint8), torch.zeros(2, 1))  # S is 1 without a core
    _export_onnx(deterministic_graph(model), inputs, tmp_path / "p.onnx", "{}", ["obs"])
    session = ort.InferenceSession(str(tmp_path / "p.onnx"), providers=["CPUExecutionProvider"])
    actions = session.run(None, {"obs": obs, "rnn_state": np.zeros((5, 1), np.float32)})[0]
    np.testing.assert_array_equal(actions.reshape(-1), expected)
