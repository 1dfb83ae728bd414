"""MAML's policy (appo/algorithms/maml/): a Gaussian MLP, mean = MLP(obs) with a state-independent log-std (a
parameter), as pytorch-maml-rl's NormalMLPPolicy; model kind "maml_gaussian_mlp"; and its numpy twin, which the
actor workers act with."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import Tensor, nn

from appo.models.numpy_ops import (
    ACTIVATIONS,
    NumpyActOutput,
    NumpyPass,
    f32,
    gaussian_log_prob,
    mlp_unsupported,
    on_cpu_exactly,
    register_numpy_pass,
    run_layers,
)
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
class NumpyGaussianMlp(NumpyPass):
    """MAML's policy (`MamlPolicy` above) in numpy: mean = MLP(obs), state-independent
    std, and
    a = mean + std * noise, the noise given (an episodic run's `action_noise`: the same episode wherever it runs) or
    drawn from its own generator. The arithmetic is fixed (contiguous float32 rows, x @ W.T + b per layer), so a
    row's actions depend only on that row and on the shape of the batch it is computed in."""

    takes_noise = True

    @staticmethod
    def supports(model: torch.nn.Module, device: str | torch.device) -> bool:
        if not on_cpu_exactly(model, device, MamlPolicy):
            return False
        modules = list(model.mlp)
        return mlp_unsupported(torch.nn.Sequential(*modules[:-1]), "") is None and type(modules[-1]) is torch.nn.Linear

    def load(self, model: torch.nn.Module) -> None:
        """Copy the weights (call after every pull)."""
        if not self.supports(model, "cpu"):
            raise ValueError(f"NumpyGaussianMlp cannot run {type(model).__qualname__}")
        modules = list(model.mlp)
        self.layers = [
            (f32(m.weight).T.copy(), f32(m.bias), ACTIVATIONS[type(a)] if a is not None else None)
            for m, a in zip(modules[::2], [*modules[1::2], None], strict=True)
        ]
        self.log_std = f32(model.log_std)
        self.std = np.exp(self.log_std)

    def mean(self, obs: np.ndarray) -> np.ndarray:
        return run_layers(self.layers, np.ascontiguousarray(obs, dtype=np.float32))

    def act(
        self,
        obs: np.ndarray,
        rnn_states: np.ndarray | None = None,
        deterministic: bool = False,
        noise: np.ndarray | None = None,
    ) -> NumpyActOutput:
        """Actions [B, A] as sampled (the env runner clips what the env sees), their log-probs, zero values."""
        mean = self.mean(obs)
        if deterministic:
            return NumpyActOutput(mean, np.zeros(len(obs), np.float32), np.zeros(len(obs), np.float32), rnn_states)
        if noise is None:
            noise = self.rng.standard_normal(mean.shape, dtype=np.float32)
        actions = (mean + self.std * noise).astype(np.float32)
        log_probs = gaussian_log_prob(noise, self.log_std).astype(np.float32)
        return NumpyActOutput(actions, log_probs, np.zeros(len(obs), np.float32), rnn_states)
