"""The arithmetic every numpy pass shares, in numpy alone (this package never imports torch): activations by
name, an MLP's layers read from a state dict, the Gaussian and categorical draws, and `NumpyPass`, the base of
every model's numpy twin.

A twin is built from a *description* (a small JSON-able dict: the model kind and whatever of its structure the
weights do not show, e.g. the activation) and loads its weights from a *state*: the torch model's `state_dict` as
numpy arrays under the same names. The actor workers' twins (appo/models/numpy_twins.py: `load(model)` converts the
torch model's state), an exported npz file (appo/numpy_policy/policy_file.py) and `appo.load_policy` all go through
`load_state`, so a policy computes the same function wherever it runs.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import numpy as np

HALF_LOG_2PI = 0.5 * float(np.log(2.0 * np.pi))


def sigmoid(x: np.ndarray) -> np.ndarray:
    """Logistic function of float32 x, elementwise. 1 / (1 + exp(-x)) overflows (with a warning) below about -88;
    this identity is the same function, bounded everywhere, and within 1e-7 of it in absolute terms."""
    return 0.5 * np.tanh(0.5 * x) + 0.5


# Activations by the name a description gives them (torch's Tanh, ReLU, ELU and sigmoid, elementwise).
ACTIVATIONS: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "tanh": np.tanh,
    "relu": lambda x: np.maximum(x, 0.0),
    "elu": lambda x: np.where(x > 0.0, x, np.expm1(np.minimum(x, 0.0))),
    "sigmoid": sigmoid,
}

State = Mapping[str, np.ndarray]
Layer = tuple[np.ndarray, np.ndarray, Any]  # (weight [in, out], bias [out], activation function or None)


class NumpyActOutput(NamedTuple):
    """What a numpy pass's `act` returns: `ActOutput` of the torch model, in numpy."""

    actions: np.ndarray  # [B, A] float32 (Box) or [B, 1] int64 (Discrete)
    log_probs: np.ndarray  # [B] float32
    values: np.ndarray  # [B] float32, normalised units
    rnn_states: np.ndarray | None  # [B, S] float32, the states after this step (without a core: those given)


def f32(a: np.ndarray) -> np.ndarray:
    return np.asarray(a).astype(np.float32)


def linear(state: State, prefix: str, activation: Any = None) -> Layer:
    """The Linear layer `prefix` of a state dict as (weight [in, out], bias [out], activation)."""
    return f32(state[f"{prefix}.weight"]).T.copy(), f32(state[f"{prefix}.bias"]), activation


def mlp(state: State, prefix: str, activation: str, last_linear: bool = False) -> list[Layer]:
    """The layers of an `nn.Sequential` under `prefix` (Linear at even indices, each followed by `activation`; with
    `last_linear` the last Linear has none). Empty when the state holds no such layers."""
    indices = []
    while f"{prefix}.{2 * len(indices)}.weight" in state:
        indices.append(2 * len(indices))
    fn = ACTIVATIONS[activation]
    return [
        linear(state, f"{prefix}.{i}", None if last_linear and k == len(indices) - 1 else fn)
        for k, i in enumerate(indices)
    ]


def run_layers(layers: list[Layer], x: np.ndarray) -> np.ndarray:
    """An MLP's layers applied to x [..., in] (weights [in, out] or stacked [K, in, out] against x [K, rows, in]); a
    layer whose activation is None is linear."""
    for w, b, activation in layers:
        x = np.matmul(x, w) + b
        if activation is not None:
            x = activation(x)
    return x


def gaussian_log_prob(noise: np.ndarray, log_std: np.ndarray) -> np.ndarray:
    """log N(mean + std * noise; mean, std^2) summed over the last axis: the numpy twins' one Gaussian log-density
    (`gaussian_log_prob_const` hoists its constant part for a state-independent log-std)."""
    return (-0.5 * np.square(noise) - log_std - HALF_LOG_2PI).sum(-1)


def gaussian_log_prob_const(log_std: np.ndarray) -> float:
    """The part of `gaussian_log_prob` that does not depend on the draw: log-density = -0.5 * |noise|^2 - this."""
    return float(log_std.sum()) + HALF_LOG_2PI * log_std.size


def log_softmax(logits: np.ndarray) -> np.ndarray:
    """log softmax over the last axis, shifted by the row's max first (no overflow)."""
    logits = logits - logits.max(axis=-1, keepdims=True)
    return logits - np.log(np.exp(logits).sum(axis=-1, keepdims=True))


def sample(
    rng: np.random.Generator,
    params: np.ndarray,
    values: np.ndarray,
    std: np.ndarray | None,
    log_prob_const: Any,
    deterministic: bool = False,
    noise: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(actions, log-probs [B], values [B]) from the head's output params [B, P]: Gaussian around `params` with
    `std` (per env [B, P] or shared [P]), or categorical over logits `params` when `std` is None (Gumbel-max:
    argmax(log-probs - log(e)) with standard-exponential e). `noise`: the draws to use (standard-normal for the
    Gaussian, standard-exponential for the categorical, shaped like `params`: an episodic rollout's own), else
    drawn from `rng`. `deterministic`: the mode (the mean, the most likely action), with no draw."""
    if std is None:
        log_p = log_softmax(params)
        if deterministic:
            actions = log_p.argmax(axis=-1)
        else:
            if noise is None:
                noise = rng.standard_exponential(log_p.shape, dtype=np.float32)
            actions = (log_p - np.log(np.maximum(noise, 1e-38))).argmax(axis=-1)
        log_probs = np.take_along_axis(log_p, actions[:, None], axis=-1)[:, 0]
        return actions[:, None].astype(np.int64), log_probs.astype(np.float32), values.astype(np.float32)
    if deterministic:
        noise = np.zeros(params.shape, dtype=np.float32)
    elif noise is None:
        noise = rng.standard_normal(params.shape, dtype=np.float32)
    actions = params + std * noise
    log_probs = -0.5 * np.square(noise).sum(axis=-1) - log_prob_const
    return actions.astype(np.float32), log_probs.astype(np.float32), values.astype(np.float32)


class NumpyPass:
    """A numpy pass of one model kind: built from its description, its own seeded generator for sampling, the
    weights copied by `load_state` (again after every weight pull). `kind` is the model kind it computes
    (appo/models/registry.py's names); `state_size` the floats of recurrent state per env (0: none)."""

    kind = ""
    takes_noise = False  # act(..., noise=) acts with the given standard-normal draws (an episodic rollout's)

    def __init__(self, description: dict[str, Any], seed: int) -> None:
        self.description = dict(description)
        self.rng = np.random.default_rng(seed)

    @property
    def state_size(self) -> int:
        return 0

    def load_state(self, state: State) -> None:
        raise NotImplementedError

    def load(self, model: Any) -> None:
        """Copy the weights of a torch model of this kind (duck-typed: anything with a `state_dict` of tensors)."""
        self.load_state({k: v.detach().cpu().numpy() for k, v in model.state_dict().items()})

    def act(self, obs: np.ndarray, rnn_states: np.ndarray | None = None, deterministic: bool = False) -> NumpyActOutput:
        raise NotImplementedError
