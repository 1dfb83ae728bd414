"""MAML's policy for discrete actions (the bandits, the tabular MDPs): logits = MLP(obs), as pytorch-maml-rl's
CategoricalMLPPolicy; made by appo/models/gaussian_mlp.py `make_policy` for a Discrete action space; and its numpy
twin, which the actor workers act with (appo/numpy_policy/categorical_mlp.py). Its output is the logits [..., n], which
`log_prob` and `kl` read (the interface MAML-TRPO's math takes, as MamlPolicy's)."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from appo.models.numpy_twins import activation_name, mlp_unsupported, on_cpu_exactly, register_numpy_pass
from appo.numpy_policy.categorical_mlp import CategoricalMlpPass

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


class MlpPolicyTwin:
    """What a MAML policy's numpy twin adds to its numpy pass: built from and bound to a torch policy of exactly
    `torch_class` (an MLP under `mlp`: Linear + one known activation, then a Linear), on the CPU."""

    torch_class: type
    kind: str

    def __init__(self, model: nn.Module, seed: int) -> None:
        self._check(model)
        super().__init__({"kind": self.kind, "activation": activation_name(list(model.mlp)[1])}, seed)  # type: ignore[call-arg]
        self.load(model)

    @classmethod
    def supports(cls, model: nn.Module, device: str | torch.device) -> bool:
        if not on_cpu_exactly(model, device, cls.torch_class):
            return False
        modules = list(model.mlp)
        hidden = nn.Sequential(*modules[:-1])
        return len(hidden) > 0 and mlp_unsupported(hidden, "") is None and type(modules[-1]) is nn.Linear

    def load(self, model: nn.Module) -> None:
        """Copy the weights (call after every pull)."""
        self._check(model)
        super().load(model)  # type: ignore[misc]

    def _check(self, model: nn.Module) -> None:
        if not self.supports(model, "cpu"):
            raise ValueError(f"{type(self).__name__} cannot run {type(model).__qualname__}")


@register_numpy_pass
class NumpyCategoricalMlp(MlpPolicyTwin, CategoricalMlpPass):
    """`MamlCategoricalPolicy` in numpy, bound to the torch policy."""

    torch_class = MamlCategoricalPolicy
