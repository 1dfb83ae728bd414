"""The feed-forward actor-critic's `act` in numpy, for policy workers on the CPU.

For the few envs of one request batch, torch's per-operator dispatch dominates a forward pass of a small MLP
(about 200 us for 8 HalfCheetah envs here, against about 50 us for the same arithmetic in numpy). This is the
same function of the same weights, re-read after every weight pull: observation normaliser (clipped),
MLP encoder, Gaussian (state-independent log-std) or categorical head, value head. Sampling uses its own
seeded numpy generator. Recurrent models and GPU policy workers keep the torch path.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from appo.model import ActorCritic

HALF_LOG_2PI = 0.5 * float(np.log(2.0 * np.pi))
_ACTIVATIONS = {
    torch.nn.Tanh: np.tanh,
    torch.nn.ReLU: lambda x: np.maximum(x, 0.0),
    torch.nn.ELU: lambda x: np.where(x > 0.0, x, np.expm1(np.minimum(x, 0.0))),
}


def _f32(t: torch.Tensor) -> np.ndarray:
    return t.detach().cpu().numpy().astype(np.float32)


class NumpyPolicy:
    def __init__(self, model: ActorCritic, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.load(model)

    @staticmethod
    def supports(model: ActorCritic, device: str) -> bool:
        return device == "cpu" and model.core is None

    def load(self, model: ActorCritic) -> None:
        """Copy the weights (call after every pull)."""
        norm = model.obs_normalizer
        self.obs_mean = _f32(norm.mean) if norm is not None else None
        self.obs_std = np.sqrt(norm.var.double().numpy() + norm.epsilon).astype(np.float32) if norm else None
        self.obs_clip = norm.clip if norm is not None else None
        self.layers: list[tuple[np.ndarray, np.ndarray, Any]] = []
        modules = list(model.encoder)
        for i, module in enumerate(modules):
            if isinstance(module, torch.nn.Linear):
                activation = _ACTIVATIONS[type(modules[i + 1])]
                self.layers.append((_f32(module.weight).T.copy(), _f32(module.bias), activation))
        self.policy_w, self.policy_b = _f32(model.policy_head.weight).T.copy(), _f32(model.policy_head.bias)
        self.value_w, self.value_b = _f32(model.value_head.weight)[0].copy(), float(model.value_head.bias.detach()[0])
        self.is_discrete = model.is_discrete
        if not self.is_discrete:
            self.log_std = _f32(model.log_std)
            self.std = np.exp(self.log_std)
            self.log_prob_const = float(self.log_std.sum()) + HALF_LOG_2PI * self.log_std.size

    def act(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(actions [B, A] float32 or [B, 1] int64, log-probs [B], values [B]) for observations [B, ...]."""
        x = obs.reshape(len(obs), -1).astype(np.float32, copy=False)
        if self.obs_mean is not None:
            x = (x - self.obs_mean.reshape(-1)) / self.obs_std.reshape(-1)
            if self.obs_clip is not None:
                x = np.clip(x, -self.obs_clip, self.obs_clip)
        for w, b, activation in self.layers:
            x = activation(x @ w + b)
        params = x @ self.policy_w + self.policy_b
        values = x @ self.value_w + self.value_b
        if self.is_discrete:
            logits = params - params.max(axis=-1, keepdims=True)
            logits = logits - np.log(np.exp(logits).sum(axis=-1, keepdims=True))
            gumbel = -np.log(np.maximum(self.rng.standard_exponential(logits.shape, dtype=np.float32), 1e-38))
            actions = (logits + gumbel).argmax(axis=-1)
            log_probs = np.take_along_axis(logits, actions[:, None], axis=-1)[:, 0]
            return actions[:, None].astype(np.int64), log_probs.astype(np.float32), values.astype(np.float32)
        noise = self.rng.standard_normal(params.shape, dtype=np.float32)
        actions = params + self.std * noise
        log_probs = -0.5 * np.square(noise).sum(axis=-1) - self.log_prob_const
        return actions.astype(np.float32), log_probs.astype(np.float32), values.astype(np.float32)
