"""The actor-critic: observation normaliser -> MLP encoder -> optional GRU/LSTM core -> policy and value
heads. Policy workers call `act` on one step of many envs; the learner calls `evaluate` on whole
trajectories. The return normaliser lives here too, so weights, normalisers and all travel together
(to policy workers through appo.learning.param_sync, to disk through appo.checkpoint)."""

from __future__ import annotations

from typing import NamedTuple

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor, nn

from appo.cfg import Cfg
from appo.distributions import Categorical, DiagGaussian
from appo.normalize import RunningMeanStd

_ACTIVATIONS = {"tanh": nn.Tanh, "relu": nn.ReLU, "elu": nn.ELU}


class ActOutput(NamedTuple):
    actions: Tensor  # [B, A] float (Box) or [B, 1] int64 (Discrete)
    log_probs: Tensor  # [B]
    values: Tensor  # [B], normalised units
    rnn_states: Tensor  # [B, H], the state after this step


class EvalOutput(NamedTuple):
    log_probs: Tensor  # [N, T]
    entropy: Tensor  # [N, T]
    values: Tensor  # [N, T], normalised units
    dist: DiagGaussian | Categorical  # over the N * T steps, flattened


class ActorCritic(nn.Module):
    def __init__(self, cfg: Cfg, obs_space: gym.Space, action_space: gym.Space) -> None:
        super().__init__()
        self.is_discrete = isinstance(action_space, gym.spaces.Discrete)
        self.use_rnn = cfg.use_rnn
        self.rnn_type = cfg.rnn_type
        obs_dim = int(np.prod(obs_space.shape))
        self.obs_normalizer = RunningMeanStd(tuple(obs_space.shape)) if cfg.normalize_input else None
        self.returns_normalizer = RunningMeanStd(()) if cfg.normalize_returns else None

        layers: list[nn.Module] = []
        size = obs_dim
        for hidden in cfg.encoder_mlp_layers:
            layers += [nn.Linear(size, hidden), _ACTIVATIONS[cfg.nonlinearity]()]
            size = hidden
        self.encoder = nn.Sequential(*layers)
        self.core: nn.Module | None = None
        if cfg.use_rnn:
            cell = nn.GRUCell if cfg.rnn_type == "gru" else nn.LSTMCell
            self.core = cell(size, cfg.rnn_size)
            size = cfg.rnn_size
        if self.is_discrete:
            self.policy_head = nn.Linear(size, int(action_space.n))
            self.log_std = None
        else:
            action_dim = int(np.prod(action_space.shape))
            self.policy_head = nn.Linear(size, action_dim)
            self.log_std = nn.Parameter(torch.full((action_dim,), cfg.initial_log_std))
        self.value_head = nn.Linear(size, 1)
        # Small initial policy outputs keep the first actions near the centre of the action range.
        nn.init.orthogonal_(self.policy_head.weight, gain=0.01)
        nn.init.zeros_(self.policy_head.bias)

    # --- pieces -----------------------------------------------------------------------------------
    def normalize_obs(self, obs: Tensor) -> Tensor:
        obs = obs.float()
        return self.obs_normalizer.normalize(obs) if self.obs_normalizer is not None else obs

    def distribution(self, features: Tensor) -> DiagGaussian | Categorical:
        params = self.policy_head(features)
        if self.is_discrete:
            return Categorical(params)
        return DiagGaussian(params, self.log_std.expand_as(params))

    def core_step(self, x: Tensor, rnn_states: Tensor) -> tuple[Tensor, Tensor]:
        """One recurrent step for a batch: x [B, F], rnn_states [B, H] -> (features, new states)."""
        if self.rnn_type == "lstm":
            h, c = rnn_states.chunk(2, dim=-1)
            h, c = self.core(x, (h.contiguous(), c.contiguous()))
            return h, torch.cat([h, c], dim=-1)
        h = self.core(x, rnn_states)
        return h, h

    # --- what the policy worker calls -------------------------------------------------------------
    @torch.no_grad()
    def act(self, obs: Tensor, rnn_states: Tensor, deterministic: bool = False) -> ActOutput:
        """One step for B envs: obs [B, *obs_shape], rnn_states [B, H]."""
        x = self.encoder(self.normalize_obs(obs).flatten(1))
        if self.core is not None:
            x, rnn_states = self.core_step(x, rnn_states)
        dist = self.distribution(x)
        actions = dist.mode() if deterministic else dist.sample()
        values = self.value_head(x).squeeze(-1)
        log_probs = dist.log_prob(actions)
        if self.is_discrete:
            actions = actions.unsqueeze(-1)
        return ActOutput(actions, log_probs, values, rnn_states)

    # --- what the learner calls -------------------------------------------------------------------
    def features(self, obs: Tensor, rnn_states: Tensor, dones: Tensor, recurrence: int) -> Tensor:
        """Features of every step of N trajectories: obs [N, T, ...]; rnn_states [N, T, H] (only the
        states at chunk starts, every `recurrence` steps, are used); dones [N, T] reset the state after
        an episode ends. Returns [N, T, F]."""
        N, T = obs.shape[:2]
        x = self.encoder(self.normalize_obs(obs).flatten(2))
        if self.core is None:
            return x
        outputs = []
        h = rnn_states[:, 0]
        for t in range(T):
            if t % recurrence == 0:
                # Truncated BPTT: restart each chunk from the state the policy worker had there.
                h = rnn_states[:, t]
            out, h = self.core_step(x[:, t], h)
            outputs.append(out)
            h = h * (1.0 - dones[:, t]).unsqueeze(-1)
        return torch.stack(outputs, dim=1)

    def evaluate(self, obs: Tensor, actions: Tensor, rnn_states: Tensor, dones: Tensor, recurrence: int) -> EvalOutput:
        """Log-probs, entropies and values of T steps of N trajectories under the current weights."""
        N, T = obs.shape[:2]
        x = self.features(obs, rnn_states, dones, recurrence).reshape(N * T, -1)
        dist = self.distribution(x)
        flat_actions = actions.reshape(N * T, -1)
        if self.is_discrete:
            flat_actions = flat_actions.squeeze(-1)
        log_probs = dist.log_prob(flat_actions).reshape(N, T)
        entropy = dist.entropy().reshape(N, T)
        values = self.value_head(x).reshape(N, T)
        return EvalOutput(log_probs, entropy, values, dist)

    @torch.no_grad()
    def value_of(self, obs: Tensor, rnn_states: Tensor) -> Tensor:
        """Values [B] of single observations obs [B, ...] with states [B, H] (the bootstrap step)."""
        return self.act(obs, rnn_states, deterministic=True).values


def make_model(cfg: Cfg, obs_space: gym.Space, action_space: gym.Space) -> ActorCritic:
    return ActorCritic(cfg, obs_space, action_space)
