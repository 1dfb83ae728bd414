"""MAML's policy for discrete actions (the bandits, the tabular MDPs): logits = MLP(obs), as pytorch-maml-rl's
CategoricalMLPPolicy; made by appo/models/gaussian_mlp.py `make_policy` for a Discrete action space. Its numpy twin,
which the actor workers act with, is bound to it in appo/models/numpy_twins.py. Its output is the logits [..., n], which
`log_prob` and `kl` read (the interface MAML-TRPO's math takes, as MamlPolicy's)."""

from __future__ import annotations

import torch
from torch import Tensor, nn

NONLINEARITIES: dict[str, type[nn.Module]] = {"tanh": nn.Tanh, "relu": nn.ReLU}


def policy_mlp(in_dim: int, hidden: list[int], nonlinearity: str, out_dim: int) -> nn.Sequential:
    """Linear + `nonlinearity` per hidden size, then a linear output layer."""
    layers: list[nn.Module] = []
    for width in hidden:
        layers += [nn.Linear(in_dim, width), NONLINEARITIES[nonlinearity]()]
        in_dim = width
    layers.append(nn.Linear(in_dim, out_dim))
    return nn.Sequential(*layers)


class MamlCategoricalPolicy(nn.Module):
    """Categorical MLP policy over `num_actions` actions; actions are indices (as floats in MAML's episode
    buffers: [..., 1])."""

    def __init__(self, obs_dim: int, num_actions: int, hidden: list[int], nonlinearity: str) -> None:
        super().__init__()
        self.mlp = policy_mlp(obs_dim, hidden, nonlinearity, num_actions)

    def forward(self, obs: Tensor) -> Tensor:
        return self.mlp(obs)

    def mode(self, obs: Tensor) -> Tensor:
        """The deterministic action [..., 1]: the most likely (an index, int64)."""
        return self.mlp(obs).argmax(-1, keepdim=True)

    @staticmethod
    def log_prob(dist: Tensor, actions: Tensor) -> Tensor:
        """log pi(actions) [...] for logits `dist` [..., n] and action indices [..., 1]."""
        return torch.log_softmax(dist, dim=-1).gather(-1, actions.long()).squeeze(-1)

    @staticmethod
    def kl(dist0: Tensor, dist1: Tensor) -> Tensor:
        """KL(pi0 || pi1) [...] of the categoricals with logits `dist0`, `dist1`."""
        log_p0, log_p1 = torch.log_softmax(dist0, dim=-1), torch.log_softmax(dist1, dim=-1)
        return (log_p0.exp() * (log_p0 - log_p1)).sum(-1)
