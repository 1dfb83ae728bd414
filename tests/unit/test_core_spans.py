"""The learner's recurrent pass (ActorCritic._core_features, spans through torch's sequence op) is the
recurrence of stepping the cell once per step: restart from the stored state at chunk starts, zero the
state after an episode end. Outputs and gradients against that step-by-step reference, GRU and LSTM."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from appo.config.cfg import Cfg
from appo.models.registry import make_model


def stepwise(model, x, rnn_states, dones, recurrence):
    outputs, h = [], rnn_states[:, 0]
    for t in range(x.shape[1]):
        if t % recurrence == 0:
            h = rnn_states[:, t]
        out, h = model.core_step(x[:, t], h)
        outputs.append(out)
        h = h * (1.0 - dones[:, t]).unsqueeze(-1)
    return torch.stack(outputs, dim=1)


@pytest.mark.parametrize("rnn_type", ["gru", "lstm"])
@pytest.mark.parametrize("recurrence", [32, 8, 5])
def test_spans_equal_the_step_by_step_recurrence(rnn_type, recurrence):
    torch.manual_seed(0)
    cfg = Cfg(env="Pendulum-v1", use_rnn=True, rnn_type=rnn_type, rnn_size=16, rollout=32, recurrence=recurrence)
    spaces = (gym.spaces.Box(-1, 1, (5,), np.float32), gym.spaces.Box(-1, 1, (2,), np.float32))
    model = make_model(cfg, *spaces).double()
    N, T, F = 6, 32, model.core.input_size
    width = 32 if rnn_type == "lstm" else 16
    x = torch.randn(N, T, F, dtype=torch.float64, requires_grad=True)
    rnn_states = torch.randn(N, T, width, dtype=torch.float64, requires_grad=True)
    dones = (torch.rand(N, T) < 0.08).double()
    dones[0, 3] = dones[2, 3] = 1.0  # two rows ending at the same step
    dones[1, T - 1] = 1.0
    fused = model._core_features(x, rnn_states, dones, recurrence)
    reference = stepwise(model, x, rnn_states, dones, recurrence)
    assert torch.allclose(fused, reference, atol=1e-12, rtol=0), (fused - reference).abs().max()
    weights = torch.randn_like(reference)
    grads_fused = torch.autograd.grad((fused * weights).sum(), [x, rnn_states, *model.core.parameters()])
    grads_ref = torch.autograd.grad((reference * weights).sum(), [x, rnn_states, *model.core.parameters()])
    for a, b in zip(grads_fused, grads_ref, strict=True):
        assert torch.allclose(a, b, atol=1e-12, rtol=0), (a - b).abs().max()
