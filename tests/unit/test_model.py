"""Model: output shapes, recurrent state reset at episode ends, and agreement between the policy
worker's step-by-step `act` and the learner's whole-trajectory `evaluate`."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from appo.cfg import Cfg
from appo.model import make_model

OBS = gym.spaces.Box(-1, 1, (4,), np.float32)


@pytest.mark.parametrize("action_space", [gym.spaces.Box(-1, 1, (2,), np.float32), gym.spaces.Discrete(3)])
@pytest.mark.parametrize("rnn_type", [None, "gru", "lstm"])
def test_act_and_evaluate_agree(action_space, rnn_type):
    torch.manual_seed(0)
    cfg = Cfg(use_rnn=rnn_type is not None, rnn_type=rnn_type or "gru", rnn_size=8, encoder_mlp_layers=[16])
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
    ev = model.evaluate(obs, actions, states, dones, recurrence=T)
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
