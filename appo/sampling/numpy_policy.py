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
            return _sample(self.rng, params, values, None, 0.0)
        return _sample(self.rng, params, values, self.std, self.log_prob_const)


class NumpyPolicyStack:
    """Several policies of one feed-forward architecture (a population) acting in one pass: each env's
    observation goes through its own policy's weights. Envs are laid out as [policy, row] with zero rows for
    padding, so every layer is one batched matmul over the stacked weights instead of one small forward pass
    per policy present in the batch. Call `restack` after any member's weights changed."""

    def __init__(self, members: list[NumpyPolicy], seed: int) -> None:
        self.members = members
        self.rng = np.random.default_rng(seed)
        self.restack()

    def restack(self) -> None:
        ms = self.members
        first = ms[0]
        self.normalized = first.obs_mean is not None
        if self.normalized:
            self.obs_mean = np.stack([m.obs_mean.reshape(-1) for m in ms])
            self.obs_std = np.stack([m.obs_std.reshape(-1) for m in ms])
            self.obs_clip = first.obs_clip
        self.layers = [
            (np.stack([m.layers[i][0] for m in ms]), np.stack([m.layers[i][1] for m in ms])[:, None, :], act)
            for i, (_, _, act) in enumerate(first.layers)
        ]
        # Policy and value heads as one matmul: the last column is the value.
        self.head_w = np.stack([np.concatenate([m.policy_w, m.value_w[:, None]], axis=1) for m in ms])
        self.head_b = np.stack([np.append(m.policy_b, np.float32(m.value_b)) for m in ms])[:, None, :]
        self.is_discrete = first.is_discrete
        if not self.is_discrete:
            self.std = np.stack([m.std for m in ms])
            self.log_prob_const = np.array([m.log_prob_const for m in ms])

    def act(self, obs: np.ndarray, owner: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """As NumpyPolicy.act, env i acting with member owner[i]."""
        n, k = len(obs), len(self.members)
        counts = np.bincount(owner, minlength=k)
        if counts.max() == n:  # one policy: the plain pass
            return self.members[int(owner[0])].act(obs)
        rows = int(counts.max())
        order = np.argsort(owner, kind="stable")
        rank = np.empty(n, dtype=np.int64)
        rank[order] = np.arange(n) - (np.cumsum(counts) - counts)[owner[order]]
        pos = owner * rows + rank
        x = obs.reshape(n, -1).astype(np.float32, copy=False)
        if self.normalized:
            x = (x - self.obs_mean[owner]) / self.obs_std[owner]
            if self.obs_clip is not None:
                x = np.clip(x, -self.obs_clip, self.obs_clip)
        h = np.zeros((k * rows, x.shape[1]), dtype=np.float32)
        h[pos] = x
        h = h.reshape(k, rows, -1)
        for w, b, activation in self.layers:
            h = activation(np.matmul(h, w) + b)
        out = (np.matmul(h, self.head_w) + self.head_b).reshape(k * rows, -1)[pos]
        params, values = out[:, :-1], out[:, -1]
        if self.is_discrete:
            return _sample(self.rng, params, values, None, 0.0)
        return _sample(self.rng, params, values, self.std[owner], self.log_prob_const[owner])


def _sample(
    rng: np.random.Generator, params: np.ndarray, values: np.ndarray, std: np.ndarray | None, log_prob_const: Any
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Draw actions from the head's output: Gaussian around `params` with `std` (per env or shared), or
    categorical over logits `params` when `std` is None (Gumbel-max)."""
    if std is None:
        logits = params - params.max(axis=-1, keepdims=True)
        logits = logits - np.log(np.exp(logits).sum(axis=-1, keepdims=True))
        gumbel = -np.log(np.maximum(rng.standard_exponential(logits.shape, dtype=np.float32), 1e-38))
        actions = (logits + gumbel).argmax(axis=-1)
        log_probs = np.take_along_axis(logits, actions[:, None], axis=-1)[:, 0]
        return actions[:, None].astype(np.int64), log_probs.astype(np.float32), values.astype(np.float32)
    noise = rng.standard_normal(params.shape, dtype=np.float32)
    actions = params + std * noise
    log_probs = -0.5 * np.square(noise).sum(axis=-1) - log_prob_const
    return actions.astype(np.float32), log_probs.astype(np.float32), values.astype(np.float32)
