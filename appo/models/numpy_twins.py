"""The torch side of the models' numpy twins: which torch modules a twin can compute, and the registry that picks
the twin of a model (`make_numpy_policy`) for policy workers and acting actor workers on the CPU.

For the few envs of one request batch, torch's per-operator dispatch dominates a forward pass of a small MLP
(about 200 us for 8 HalfCheetah envs here, against about 50 us for the same arithmetic in numpy). A twin computes
the same function of the same weights, re-read after every weight pull (`load`), and samples from its own seeded
numpy generator; it acts only for exactly its torch class on the CPU (`supports`: a subclass or another model may
compute anything, and acting with a different function than the one trained would raise no error). The numpy
arithmetic itself lives in appo/numpy_policy/ (no torch there: exported policies run without it); each torch model
module binds its twin to its class and registers it with `register_numpy_pass`: ActorCritic's in
appo/models/actor_critic_numpy.py, SAC's actor's in squashed_gaussian.py, MAML's policy's in gaussian_mlp.py, the
command policy's in command_policy.py. Other models and GPU policy workers keep the torch path.
"""

from __future__ import annotations

from typing import Any

import torch

from appo.numpy_policy.ops import NumpyPass

# The activation modules a twin computes, by the name appo/numpy_policy/ops.py knows them under.
ACTIVATION_NAMES: dict[type[torch.nn.Module], str] = {torch.nn.Tanh: "tanh", torch.nn.ReLU: "relu", torch.nn.ELU: "elu"}


def activation_name(module: torch.nn.Module) -> str:
    return ACTIVATION_NAMES[type(module)]


def mlp_unsupported(mlp: torch.nn.Module | None, name: str) -> str | None:
    """Why `mlp` is not a plain alternation of Linear and one activation known here, or None when it is."""
    modules = list(mlp) if isinstance(mlp, torch.nn.Sequential) else None
    if modules is None or len(modules) % 2:
        return f"{name} is not a Sequential of Linear + activation pairs"
    for linear, activation in zip(modules[::2], modules[1::2], strict=True):
        if type(linear) is not torch.nn.Linear or linear.bias is None or type(activation) not in ACTIVATION_NAMES:
            return f"{name} has {type(linear).__name__} + {type(activation).__name__}, not Linear + a known activation"
    if len({type(a) for a in modules[1::2]}) > 1:
        return f"{name} mixes activations"
    return None


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


def numpy_description(model: torch.nn.Module) -> dict[str, Any] | None:
    """The description a numpy pass of `model` is built from (appo/numpy_policy/ops.py), or None when no twin
    computes it."""
    for cls in NUMPY_PASSES:
        if cls.supports(model, "cpu"):
            return cls(model, 0).description
    return None
