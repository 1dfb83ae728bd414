"""MAML's policy (appo/maml/): a Gaussian MLP, mean = MLP(obs) with a state-independent log-std (a
parameter), as pytorch-maml-rl's NormalMLPPolicy; model kind "maml_mlp" (with the categorical one). Its numpy
twin, which the actor workers act with, is bound to it in appo/models/numpy_twins.py."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor, nn

from appo.models.categorical_mlp import MamlCategoricalPolicy, policy_mlp
from appo.models.distributions import gaussian_log_prob
from appo.models.registry import register_model


class MamlPolicy(nn.Module):
    """Gaussian MLP policy: mean = MLP(obs), state-independent log-std (a parameter). Its output is the
    distribution's parameters [..., 2A] (mean, then log-std), which `log_prob` and `kl` read: MAML-TRPO's math
    (appo/maml/algorithm.py) takes any policy with these three (MamlCategoricalPolicy: discrete actions)."""

    def __init__(self, obs_dim: int, act_dim: int, hidden: list[int], nonlinearity: str, init_log_std: float) -> None:
        super().__init__()
        self.mlp = policy_mlp(obs_dim, hidden, nonlinearity, act_dim)
        self.log_std = nn.Parameter(torch.full((act_dim,), float(init_log_std)))

    def forward(self, obs: Tensor) -> Tensor:
        mean = self.mlp(obs)
        return torch.cat([mean, self.log_std.expand_as(mean)], dim=-1)

    def mode(self, obs: Tensor) -> Tensor:
        """The deterministic action [..., A]: the mean."""
        return self.mlp(obs)

    @staticmethod
    def log_prob(dist: Tensor, actions: Tensor) -> Tensor:
        """log N(actions; mean, exp(log_std)^2), summed over action dims: [...]."""
        mean, log_std = dist.chunk(2, dim=-1)
        return gaussian_log_prob(actions, mean, log_std)

    @staticmethod
    def kl(dist0: Tensor, dist1: Tensor) -> Tensor:
        """KL(N0 || N1) of diagonal Gaussians, summed over action dims: [...]."""
        (mean0, log_std0), (mean1, log_std1) = dist0.chunk(2, dim=-1), dist1.chunk(2, dim=-1)
        var0, var1 = torch.exp(2 * log_std0), torch.exp(2 * log_std1)
        return (log_std1 - log_std0 + (var0 + (mean0 - mean1).pow(2)) / (2 * var1) - 0.5).sum(-1)


@register_model("maml_mlp")
def make_policy(cfg: Any, obs_space: gym.Space, action_space: gym.Space) -> MamlPolicy | MamlCategoricalPolicy:
    """The run's policy (`cfg`: an appo Cfg): Gaussian for flat Box actions, categorical for Discrete ones (flat
    Box observations: verify_maml says so). Model kind "maml_mlp": what the actor workers act with
    (appo.models.actor_critic.make_model)."""
    obs_dim, hidden = int(np.prod(obs_space.shape)), list(cfg.maml_mlp_layers)
    if isinstance(action_space, gym.spaces.Discrete):
        return MamlCategoricalPolicy(obs_dim, int(action_space.n), hidden, cfg.maml_nonlinearity)
    return MamlPolicy(obs_dim, int(np.prod(action_space.shape)), hidden, cfg.maml_nonlinearity, cfg.maml_init_log_std)
