"""What every model's numpy twin shares: the numpy pass of a model's `act` for policy workers and acting actor
workers on the CPU, and the registry that picks the twin of a model (`make_numpy_policy`).

For the few envs of one request batch, torch's per-operator dispatch dominates a forward pass of a small MLP
(about 200 us for 8 HalfCheetah envs here, against about 50 us for the same arithmetic in numpy). A twin computes
the same function of the same weights, re-read after every weight pull (`load`), and samples from its own seeded
numpy generator; it acts only for exactly its torch class on the CPU (`supports`: a subclass or another model may
compute anything, and acting with a different function than the one trained would raise no error). Each twin
lives beside its torch model and registers itself with `register_numpy_pass`: ActorCritic's in
appo/models/actor_critic_numpy.py, SAC's actor's in squashed_gaussian.py, MAML's policy's in gaussian_mlp.py, the
command policy's in command_policy.py. Other models and GPU policy workers keep the torch path.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import torch

HALF_LOG_2PI = 0.5 * float(np.log(2.0 * np.pi))
ACTIVATIONS = {
    torch.nn.Tanh: np.tanh,
    torch.nn.ReLU: lambda x: np.maximum(x, 0.0),
    torch.nn.ELU: lambda x: np.where(x > 0.0, x, np.expm1(np.minimum(x, 0.0))),
}


class NumpyActOutput(NamedTuple):
    """What `NumpyPolicy.act` returns: `ActOutput` of the torch model, in numpy."""

    actions: np.ndarray  # [B, A] float32 (Box) or [B, 1] int64 (Discrete)
    log_probs: np.ndarray  # [B] float32
    values: np.ndarray  # [B] float32, normalised units
    rnn_states: np.ndarray | None  # [B, S] float32, the states after this step (without a core: those given)


def f32(t: torch.Tensor) -> np.ndarray:
    return t.detach().cpu().numpy().astype(np.float32)


def sigmoid(x: np.ndarray) -> np.ndarray:
    """Logistic function of float32 x, elementwise. 1 / (1 + exp(-x)) overflows (with a warning) below about -88;
    this identity is the same function, bounded everywhere, and within 1e-7 of it in absolute terms."""
    return 0.5 * np.tanh(0.5 * x) + 0.5


def mlp_unsupported(mlp: torch.nn.Module | None, name: str) -> str | None:
    """Why `mlp` is not a plain alternation of Linear and an activation known here, or None when it is."""
    modules = list(mlp) if isinstance(mlp, torch.nn.Sequential) else None
    if modules is None or len(modules) % 2:
        return f"{name} is not a Sequential of Linear + activation pairs"
    for linear, activation in zip(modules[::2], modules[1::2], strict=True):
        if type(linear) is not torch.nn.Linear or linear.bias is None or type(activation) not in ACTIVATIONS:
            return f"{name} has {type(linear).__name__} + {type(activation).__name__}, not Linear + a known activation"
    return None


def gaussian_log_prob(noise: np.ndarray, log_std: np.ndarray) -> np.ndarray:
    """log N(mean + std * noise; mean, std^2) summed over the last axis: the numpy twins' one Gaussian log-density
    (`gaussian_log_prob_const` hoists its constant part for a state-independent log-std)."""
    return (-0.5 * np.square(noise) - log_std - HALF_LOG_2PI).sum(-1)


def gaussian_log_prob_const(log_std: np.ndarray) -> float:
    """The part of `gaussian_log_prob` that does not depend on the draw: log-density = -0.5 * |noise|^2 - this."""
    return float(log_std.sum()) + HALF_LOG_2PI * log_std.size


def mlp_layers(mlp: torch.nn.Sequential) -> list[tuple[np.ndarray, np.ndarray, Any]]:
    """(weight [in, out], bias [out], activation) per Linear + activation pair of a supported MLP."""
    modules = list(mlp)
    return [
        (f32(linear.weight).T.copy(), f32(linear.bias), ACTIVATIONS[type(activation)])
        for linear, activation in zip(modules[::2], modules[1::2], strict=True)
    ]


def run_layers(layers: list[tuple[np.ndarray, np.ndarray, Any]], x: np.ndarray) -> np.ndarray:
    """An MLP's layers applied to x [..., in] (weights [in, out] or stacked [K, in, out] against x [K, rows, in]); a
    layer whose activation is None is linear."""
    for w, b, activation in layers:
        x = np.matmul(x, w) + b
        if activation is not None:
            x = activation(x)
    return x


def sample(
    rng: np.random.Generator,
    params: np.ndarray,
    values: np.ndarray,
    std: np.ndarray | None,
    log_prob_const: Any,
    deterministic: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(actions, log-probs [B], values [B]) from the head's output params [B, P]: Gaussian around `params` with
    `std` (per env [B, P] or shared [P]), or categorical over logits `params` when `std` is None (Gumbel-max).
    `deterministic`: the mode (the mean, the most likely action), with no draw from `rng`."""
    if std is None:
        logits = params - params.max(axis=-1, keepdims=True)
        logits = logits - np.log(np.exp(logits).sum(axis=-1, keepdims=True))
        if deterministic:
            actions = logits.argmax(axis=-1)
        else:
            gumbel = -np.log(np.maximum(rng.standard_exponential(logits.shape, dtype=np.float32), 1e-38))
            actions = (logits + gumbel).argmax(axis=-1)
        log_probs = np.take_along_axis(logits, actions[:, None], axis=-1)[:, 0]
        return actions[:, None].astype(np.int64), log_probs.astype(np.float32), values.astype(np.float32)
    if deterministic:
        noise = np.zeros(params.shape, dtype=np.float32)
    else:
        noise = rng.standard_normal(params.shape, dtype=np.float32)
    actions = params + std * noise
    log_probs = -0.5 * np.square(noise).sum(axis=-1) - log_prob_const
    return actions.astype(np.float32), log_probs.astype(np.float32), values.astype(np.float32)


class NumpyPass:
    """A numpy pass of one model class (each twin beside its torch model): its own seeded generator for sampling,
    the weights copied by `load` (again after every pull)."""

    takes_noise = False  # act(..., noise=) acts with the given standard-normal draws (an episodic rollout's)

    def __init__(self, model: torch.nn.Module, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.load(model)

    def load(self, model: torch.nn.Module) -> None:
        raise NotImplementedError


def on_cpu_exactly(model: torch.nn.Module, device: str | torch.device, cls: type) -> bool:
    """Whether `model` is exactly a `cls` (a subclass may compute anything) and acts on the CPU."""
    return torch.device(device).type == "cpu" and type(model) is cls


# Every registered twin, in registration order; a torch model module registers its own on import.
NUMPY_PASSES: list[type] = []


def register_numpy_pass(cls: type) -> type:
    """Class decorator: `cls` (with `supports(model, device)` and `cls(model, seed)`) is a numpy twin."""
    NUMPY_PASSES.append(cls)
    return cls


FastPolicy = NumpyPass


def make_numpy_policy(model: torch.nn.Module, device: str | torch.device, seed: int) -> FastPolicy | None:
    """The numpy pass that computes `model`'s act on `device`, or None (then the torch path acts)."""
    for cls in NUMPY_PASSES:
        if cls.supports(model, device):
            return cls(model, seed)
    return None
