"""MAML's policy (appo/algorithms/maml/): a Gaussian MLP, mean = MLP(obs) with a state-independent log-std (a
parameter), as pytorch-maml-rl's NormalMLPPolicy; model kind "maml_gaussian_mlp"; and its numpy twin, which the
actor workers act with."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor, nn

from appo.inference.gaussian_mlp import GaussianMlpPass
from appo.models.numpy_ops import activation_name, mlp_unsupported, on_cpu_exactly, register_numpy_pass
from appo.models.registry import register_model

NONLINEARITIES: dict[str, type[nn.Module]] = {"tanh": nn.Tanh, "relu": nn.ReLU}


class MamlPolicy(nn.Module):
    """Gaussian MLP policy: mean = MLP(obs), state-independent log-std (a parameter)."""

    def __init__(self, obs_dim: int, act_dim: int, hidden: list[int], nonlinearity: str, init_log_std: float) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        size = obs_dim
        for width in hidden:
            layers += [nn.Linear(size, width), NONLINEARITIES[nonlinearity]()]
            size = width
        layers.append(nn.Linear(size, act_dim))
        self.mlp = nn.Sequential(*layers)
        self.log_std = nn.Parameter(torch.full((act_dim,), float(init_log_std)))

    def forward(self, obs: Tensor) -> tuple[Tensor, Tensor]:
        return self.mlp(obs), self.log_std


@register_model("maml_gaussian_mlp")
def make_policy(cfg: Any, obs_space: gym.Space, action_space: gym.Space) -> MamlPolicy:
    """The run's policy (`cfg`: an appo Cfg); flat Box observations and actions only (verify_maml says so). Also
    model kind "maml_gaussian_mlp": what the actor workers act with (appo.models.actor_critic.make_model)."""
    return MamlPolicy(
        int(np.prod(obs_space.shape)),
        int(np.prod(action_space.shape)),
        list(cfg.maml_mlp_layers),
        cfg.maml_nonlinearity,
        cfg.maml_init_log_std,
    )


@register_numpy_pass
class NumpyGaussianMlp(GaussianMlpPass):
    """`MamlPolicy` in numpy (appo/inference/gaussian_mlp.py), bound to the torch policy."""

    def __init__(self, model: MamlPolicy, seed: int) -> None:
        if not self.supports(model, "cpu"):
            raise ValueError(f"NumpyGaussianMlp cannot run {type(model).__qualname__}")
        super().__init__({"kind": self.kind, "activation": activation_name(list(model.mlp)[1])}, seed)
        self.load(model)

    @staticmethod
    def supports(model: torch.nn.Module, device: str | torch.device) -> bool:
        if not on_cpu_exactly(model, device, MamlPolicy):
            return False
        modules = list(model.mlp)
        hidden = torch.nn.Sequential(*modules[:-1])
        return len(hidden) > 0 and mlp_unsupported(hidden, "") is None and type(modules[-1]) is torch.nn.Linear

    def load(self, model: torch.nn.Module) -> None:
        """Copy the weights (call after every pull)."""
        if not self.supports(model, "cpu"):
            raise ValueError(f"NumpyGaussianMlp cannot run {type(model).__qualname__}")
        super().load(model)
