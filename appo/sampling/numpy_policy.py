"""The feed-forward actor-critic's `act` in numpy, for policy workers on the CPU.

For the few envs of one request batch, torch's per-operator dispatch dominates a forward pass of a small MLP
(about 200 us for 8 HalfCheetah envs here, against about 50 us for the same arithmetic in numpy). This is the
same function of the same weights, re-read after every weight pull: observation normaliser (clipped),
MLP encoder, Gaussian (state-independent log-std) or categorical head, value head (on the policy's features,
or on its own MLP trunk with `--separate_value_trunk`). Sampling uses its own seeded numpy generator.

Only exactly `ActorCritic` without a recurrent core is supported (`NumpyPolicy.supports`): a subclass or another
registered model may compute anything, and running it as this MLP would act with a different policy than the
one being trained without any error. Recurrent models, other models and GPU policy workers keep the torch path.
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


def _mlp_unsupported(mlp: torch.nn.Module | None, name: str) -> str | None:
    """Why `mlp` is not a plain alternation of Linear and an activation known here, or None when it is."""
    modules = list(mlp) if isinstance(mlp, torch.nn.Sequential) else None
    if modules is None or len(modules) % 2:
        return f"{name} is not a Sequential of Linear + activation pairs"
    for linear, activation in zip(modules[::2], modules[1::2], strict=True):
        if type(linear) is not torch.nn.Linear or linear.bias is None or type(activation) not in _ACTIVATIONS:
            return f"{name} has {type(linear).__name__} + {type(activation).__name__}, not Linear + a known activation"
    return None


def _model_unsupported(model: torch.nn.Module) -> str | None:
    """Why the numpy pass cannot compute `model`'s `act`, or None when it can. Device aside (see `supports`)."""
    if type(model) is not ActorCritic:
        # Exactly the class: a subclass may override any piece of the forward pass.
        return f"{type(model).__qualname__} is not ActorCritic"
    if model.core is not None:
        return "the model has a recurrent core"
    return _mlp_unsupported(model.encoder, "the encoder") or (
        _mlp_unsupported(model.value_encoder, "the value trunk") if model.value_encoder is not None else None
    )


def _mlp_layers(mlp: torch.nn.Sequential) -> list[tuple[np.ndarray, np.ndarray, Any]]:
    """(weight [in, out], bias [out], activation) per Linear + activation pair of a supported MLP."""
    modules = list(mlp)
    return [
        (_f32(linear.weight).T.copy(), _f32(linear.bias), _ACTIVATIONS[type(activation)])
        for linear, activation in zip(modules[::2], modules[1::2], strict=True)
    ]


def _run(layers: list[tuple[np.ndarray, np.ndarray, Any]], x: np.ndarray) -> np.ndarray:
    """An MLP's layers applied to x [..., in] (weights [in, out] or stacked [K, in, out] against x [K, rows, in])."""
    for w, b, activation in layers:
        x = activation(np.matmul(x, w) + b)
    return x


class NumpyPolicy:
    def __init__(self, model: ActorCritic, seed: int) -> None:
        """Raises ValueError for a model that `supports` rejects (device aside)."""
        self.rng = np.random.default_rng(seed)
        self.load(model)

    @staticmethod
    def supports(model: torch.nn.Module, device: str | torch.device) -> bool:
        """Whether the policy worker on `device` should act with this numpy pass for `model`: exactly an
        `ActorCritic` (not a subclass), without a recurrent core, with MLPs of known activations, on the CPU."""
        return torch.device(device).type == "cpu" and _model_unsupported(model) is None

    def load(self, model: ActorCritic) -> None:
        """Copy the weights (call after every pull). ValueError for a model the numpy pass does not compute."""
        reason = _model_unsupported(model)
        if reason is not None:
            raise ValueError(f"NumpyPolicy cannot run this model: {reason}")
        norm = model.obs_normalizer
        self.obs_mean = _f32(norm.mean) if norm is not None else None
        self.obs_std = np.sqrt(norm.var.double().numpy() + norm.epsilon).astype(np.float32) if norm else None
        self.obs_clip = norm.clip if norm is not None else None
        self.layers = _mlp_layers(model.encoder)
        # Empty for the shared trunk: the value head then reads the policy's features.
        self.value_layers = _mlp_layers(model.value_encoder) if model.value_encoder is not None else []
        self.separate_value_trunk = model.value_encoder is not None
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
        h = _run(self.layers, x)
        params = h @ self.policy_w + self.policy_b
        values = (_run(self.value_layers, x) if self.separate_value_trunk else h) @ self.value_w + self.value_b
        if self.is_discrete:
            return _sample(self.rng, params, values, None, 0.0)
        return _sample(self.rng, params, values, self.std, self.log_prob_const)


class NumpyPolicyStack:
    """Several policies of one feed-forward architecture (a population) acting in one pass: each env's
    observation goes through its own policy's weights. Envs are laid out as [policy, row] with zero rows for
    padding, so every layer is one batched matmul over the stacked weights instead of one small forward pass
    per policy present in the batch. Call `restack` after any member's weights changed.

    Members are NumpyPolicy instances, so each one's model was checked when it loaded; `restack` checks besides
    that they share one architecture (layer shapes, activations, normalisation, value trunk, action type), since
    the stacked pass applies the first member's structure to all of them and would otherwise compute something
    else for the others. ValueError when they do not."""

    def __init__(self, members: list[NumpyPolicy], seed: int) -> None:
        if not members or not all(type(m) is NumpyPolicy for m in members):
            raise ValueError("NumpyPolicyStack needs one or more NumpyPolicy members")
        self.members = members
        self.rng = np.random.default_rng(seed)
        self.restack()

    def restack(self) -> None:
        ms = self.members
        first = ms[0]
        signature = _architecture(first)
        for k, m in enumerate(ms[1:], start=1):
            if _architecture(m) != signature:
                raise ValueError(f"NumpyPolicyStack: member {k} has another architecture than member 0")
        self.normalized = first.obs_mean is not None
        if self.normalized:
            self.obs_mean = np.stack([m.obs_mean.reshape(-1) for m in ms])
            self.obs_std = np.stack([m.obs_std.reshape(-1) for m in ms])
            self.obs_clip = first.obs_clip
        self.layers = _stack_layers([m.layers for m in ms])
        self.separate_value_trunk = first.separate_value_trunk
        if self.separate_value_trunk:
            self.value_layers = _stack_layers([m.value_layers for m in ms])
            self.head_w = np.stack([m.policy_w for m in ms])  # [K, F, P]
            self.head_b = np.stack([m.policy_b for m in ms])[:, None, :]  # [K, 1, P]
            self.value_w = np.stack([m.value_w for m in ms])[:, :, None]  # [K, F, 1]
            self.value_b = np.array([m.value_b for m in ms], dtype=np.float32)[:, None, None]  # [K, 1, 1]
        else:
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
        padded = np.zeros((k * rows, x.shape[1]), dtype=np.float32)
        padded[pos] = x
        padded = padded.reshape(k, rows, -1)
        out = (np.matmul(_run(self.layers, padded), self.head_w) + self.head_b).reshape(k * rows, -1)[pos]
        if self.separate_value_trunk:
            params = out
            values = (np.matmul(_run(self.value_layers, padded), self.value_w) + self.value_b).reshape(-1)[pos]
        else:
            params, values = out[:, :-1], out[:, -1]
        if self.is_discrete:
            return _sample(self.rng, params, values, None, 0.0)
        return _sample(self.rng, params, values, self.std[owner], self.log_prob_const[owner])


def _architecture(m: NumpyPolicy) -> tuple[Any, ...]:
    """What must agree between members of a stack: everything but the weights' values."""

    def mlp(layers: list[tuple[np.ndarray, np.ndarray, Any]]) -> list[tuple[Any, ...]]:
        return [(w.shape, activation) for w, _, activation in layers]

    return (
        m.obs_mean is not None,
        m.obs_clip,
        None if m.obs_mean is None else m.obs_mean.size,
        mlp(m.layers),
        m.separate_value_trunk,
        mlp(m.value_layers),
        m.policy_w.shape,
        m.is_discrete,
    )


def _stack_layers(
    per_member: list[list[tuple[np.ndarray, np.ndarray, Any]]],
) -> list[tuple[np.ndarray, np.ndarray, Any]]:
    """One MLP's layers of K members as stacked weights [K, in, out], biases [K, 1, out] and the activation."""
    stacked = []
    for i, (_, _, activation) in enumerate(per_member[0]):
        w = np.stack([layers[i][0] for layers in per_member])
        b = np.stack([layers[i][1] for layers in per_member])[:, None, :]
        stacked.append((w, b, activation))
    return stacked


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
