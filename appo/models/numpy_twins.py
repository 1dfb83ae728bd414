"""The torch models and their numpy twins, bound in one place: which torch model class each numpy pass
(appo/numpy_policy/, keyed there by model kind) computes, how a twin describes the model (the description the
pass is built from, which exported policy files carry) and loads its weights. `make_numpy_policy` picks the twin
of a model for policy workers, the evaluator and acting actor workers on the CPU; `numpy_description` is what
torch-free actor workers and exports build the pass from.

For the few envs of one request batch, torch's per-operator dispatch dominates a forward pass of a small MLP
(about 200 us for 8 HalfCheetah envs here, against about 50 us for the same arithmetic in numpy). A twin computes
the same function of the same weights, re-read after every weight pull (`load`), and samples from its own seeded
numpy generator; it acts only for exactly its torch class on the CPU (`supports`: a subclass or another model may
compute anything, and acting with a different function than the one trained would raise no error). The numpy
arithmetic itself lives in appo/numpy_policy/ (no torch there: exported policies run without it). Other models and
GPU policy workers keep the torch path.

| torch model (model kind)                     | twin (here)             | numpy pass (appo/numpy_policy/)        |
|----------------------------------------------|-------------------------|----------------------------------------|
| `ActorCritic` (actor_critic)                 | `NumpyActorCritic`      | actor_critic.py `ActorCriticPass`      |
| `SquashedGaussianActor` (squashed_gaussian)  | `NumpySquashedGaussian` | squashed_gaussian.py                   |
| `MamlPolicy` (maml_mlp, Box actions)         | `NumpyGaussianMlp`      | gaussian_mlp.py `GaussianMlpPass`      |
| `MamlCategoricalPolicy` (maml_mlp, Discrete) | `NumpyCategoricalMlp`   | categorical_mlp.py `CategoricalMlpPass`|
| `CommandPolicy` (command_policy)             | `NumpyCommandPolicy`    | command_policy.py `CommandPolicyPass`  |
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from appo.models.actor_critic import ActorCritic
from appo.models.categorical_mlp import MamlCategoricalPolicy
from appo.models.command_policy import CommandPolicy
from appo.models.encoders import ConvStackEncoder, ImageEncoder, ImpalaEncoder, MultiInputEncoder
from appo.models.gaussian_mlp import MamlPolicy
from appo.models.squashed_gaussian import SquashedGaussianActor
from appo.numpy_policy.actor_critic import ActorCriticPass
from appo.numpy_policy.categorical_mlp import CategoricalMlpPass
from appo.numpy_policy.command_policy import CommandPolicyPass
from appo.numpy_policy.gaussian_mlp import GaussianMlpPass
from appo.numpy_policy.ops import NumpyPass
from appo.numpy_policy.squashed_gaussian import SquashedGaussianPass

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


# --- ActorCritic ------------------------------------------------------------------------------------------------------
# The recurrent cells the numpy pass computes, by the name the pass knows them under.
_CORES: dict[type[torch.nn.Module], str] = {torch.nn.GRUCell: "gru", torch.nn.LSTMCell: "lstm"}


def _actor_critic_unsupported(model: torch.nn.Module) -> str | None:
    """Why the numpy pass cannot compute `model`'s `act`, or None when it can. Device aside (see `supports`)."""
    if type(model) is not ActorCritic:
        # Exactly the class: a subclass may override any piece of the forward pass.
        return f"{type(model).__qualname__} is not ActorCritic"
    core = model.core
    if core is not None:
        kind = _CORES.get(type(core))  # exactly the class, as for the model
        if kind is None:
            return f"the recurrent core is {type(core).__qualname__}, not GRUCell or LSTMCell"
        if not core.bias:
            return "the recurrent core has no biases"
        if (kind == "lstm") != (model.rnn_type == "lstm"):
            # core_step splits the state into (h, c) by rnn_type, not by the cell's class.
            return f"the core is {type(core).__qualname__} but rnn_type is {model.rnn_type!r}"
    if isinstance(model.encoder, ImageEncoder) or model.encoder_kind != "mlp":
        # Exactly the convnets appo/numpy_policy/conv.py computes, or exactly the Dict encoder over them.
        for name, encoder in (("the encoder", model.encoder), ("the value trunk", model.value_encoder)):
            if encoder is not None:
                reason = _encoder_unsupported(encoder, name)
                if reason is not None:
                    return reason
        return None
    return mlp_unsupported(model.encoder, "the encoder") or (
        mlp_unsupported(model.value_encoder, "the value trunk") if model.value_encoder is not None else None
    )


def _encoder_unsupported(encoder: torch.nn.Module, name: str) -> str | None:
    """Why the numpy passes cannot compute an image or Dict `encoder`, or None when they can."""
    if type(encoder) is MultiInputEncoder:
        for key, image in encoder.images.items():
            if type(image) not in (ConvStackEncoder, ImpalaEncoder):
                return f"{name}'s key {key!r} is read by {type(image).__qualname__}, not a convnet of appo/models"
        for part, mlp in (("MLP", encoder.mlp), ("mixing layer", encoder.mix)):
            if mlp is None:
                continue
            reason = mlp_unsupported(mlp, f"{name}'s {part}")
            if reason is None and len(mlp) and activation_name(mlp[1]) != encoder.nonlinearity:
                reason = f"{name}'s {part} does not use its {encoder.nonlinearity} activation"
            if reason is not None:
                return reason
        return None
    if type(encoder) not in (ConvStackEncoder, ImpalaEncoder):
        return f"{name} is {type(encoder).__qualname__}, not a convnet of appo/models/encoders.py"
    return None


def describe_actor_critic(model: ActorCritic) -> dict[str, Any]:
    """What the numpy pass needs of `model` besides its state (appo/numpy_policy/actor_critic.py)."""
    norm = model.obs_normalizer
    image = isinstance(model.encoder, (ImageEncoder, MultiInputEncoder))
    description = {
        "kind": ActorCriticPass.kind,
        # (An empty encoder, or a convnet, has no MLP activation: the name is then unused.)
        "activation": activation_name(model.encoder[1]) if not image and len(model.encoder) else "tanh",
        "core": _CORES[type(model.core)] if model.core is not None else None,
        "obs_clip": norm.clip if norm is not None else None,
        "obs_epsilon": norm.epsilon if norm is not None else None,
    }
    if image:  # only then: a vector model's description (and its exported files) stay as they were
        description["encoder"] = model.encoder.spec()
        if model.packed_layout is not None:  # Dict observations as the buffers hold them (appo/envs/packed_obs.py)
            description["encoder"]["packed"] = [
                [k.key, k.dtype, list(k.shape), k.offset, k.nbytes] for k in model.packed_layout
            ]
    return description


class NumpyActorCritic(ActorCriticPass):
    """`ActorCritic.act` in numpy, bound to the torch model: built from one, reloaded from one after every pull.
    Only exactly `ActorCritic` with exactly a `GRUCell` or `LSTMCell` core (or none) is supported."""

    torch_class = ActorCritic

    def __init__(self, model: ActorCritic, seed: int) -> None:
        """Raises ValueError for a model that `supports` rejects (device aside)."""
        self._check(model)
        super().__init__(describe_actor_critic(model), seed)
        self.load(model)

    @staticmethod
    def supports(model: torch.nn.Module, device: str | torch.device) -> bool:
        """Whether the policy worker on `device` should act with this numpy pass for `model`: exactly an
        `ActorCritic` (not a subclass), with exactly a GRUCell or LSTMCell core or none, with MLPs of known
        activations, the convnets of appo/models/encoders.py or its Dict encoder over them, on the CPU."""
        return torch.device(device).type == "cpu" and _actor_critic_unsupported(model) is None

    @staticmethod
    def _check(model: torch.nn.Module) -> None:
        reason = _actor_critic_unsupported(model)
        if reason is not None:
            raise ValueError(f"NumpyActorCritic cannot run this model: {reason}")

    def load(self, model: ActorCritic) -> None:
        """Copy the weights (call after every pull). ValueError for a model the numpy pass does not compute."""
        self._check(model)
        super().load(model)


# --- SAC's actor ------------------------------------------------------------------------------------------------------
class NumpySquashedGaussian(SquashedGaussianPass):
    """`SquashedGaussianActor.act` in numpy (appo/numpy_policy/squashed_gaussian.py), bound to the torch actor."""

    torch_class = SquashedGaussianActor

    def __init__(self, model: SquashedGaussianActor, seed: int) -> None:
        super().__init__({"kind": self.kind}, seed)
        self.load(model)

    @staticmethod
    def supports(model: torch.nn.Module, device: str | torch.device) -> bool:
        return on_cpu_exactly(model, device, SquashedGaussianActor) and mlp_unsupported(model.trunk, "") is None

    def load(self, model: SquashedGaussianActor) -> None:
        """Copy the weights (call after every pull)."""
        if not self.supports(model, "cpu"):
            raise ValueError(f"NumpySquashedGaussian cannot run {type(model).__qualname__}")
        super().load(model)


# --- MAML's policies (model kind "maml_mlp") ----------------------------------------------------------------------
class MlpPolicyTwin:
    """What a MAML policy's numpy twin adds to its numpy pass: built from and bound to a torch policy of exactly
    `torch_class` (an MLP under `mlp`: Linear + one known activation, then a Linear), on the CPU. `distribution`
    tells the model kind's two passes apart in the description (appo/numpy_policy/registry.py)."""

    torch_class: type
    kind: str
    distribution: str

    def __init__(self, model: nn.Module, seed: int) -> None:
        self._check(model)
        description = {
            "kind": self.kind,
            "distribution": self.distribution,
            "activation": activation_name(list(model.mlp)[1]),
        }
        super().__init__(description, seed)  # type: ignore[call-arg]
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


class NumpyGaussianMlp(MlpPolicyTwin, GaussianMlpPass):
    """`MamlPolicy` in numpy (appo/numpy_policy/gaussian_mlp.py), bound to the torch policy."""

    torch_class = MamlPolicy
    distribution = "gaussian"


class NumpyCategoricalMlp(MlpPolicyTwin, CategoricalMlpPass):
    """`MamlCategoricalPolicy` in numpy (appo/numpy_policy/categorical_mlp.py), bound to the torch policy."""

    torch_class = MamlCategoricalPolicy
    distribution = "categorical"


# --- the reward-conditioned algorithms' command policy ----------------------------------------------------------------
class NumpyCommandPolicy(CommandPolicyPass):
    """`CommandPolicy.act` in numpy (appo/numpy_policy/command_policy.py), bound to the torch policy."""

    torch_class = CommandPolicy

    def __init__(self, model: CommandPolicy, seed: int) -> None:
        if not self.supports(model, "cpu"):
            raise ValueError(f"NumpyCommandPolicy cannot run {type(model).__qualname__}")
        activation = "tanh" if model.state_activation is torch.tanh else "sigmoid"
        super().__init__({"kind": self.kind, "state_activation": activation}, seed)
        self.load(model)

    @staticmethod
    def supports(model: torch.nn.Module, device: str | torch.device) -> bool:
        if not on_cpu_exactly(model, device, CommandPolicy):
            return False
        return len(model.trunk) == 0 or mlp_unsupported(model.trunk, "the trunk") is None

    def load(self, model: torch.nn.Module) -> None:
        """Copy the weights (call after every pull)."""
        if not self.supports(model, "cpu"):
            raise ValueError(f"NumpyCommandPolicy cannot run {type(model).__qualname__}")
        super().load(model)


# Every twin: `supports(model, device)` says whether it computes `model` there, `cls(model, seed)` builds it.
TWINS: tuple[type[Any], ...] = (
    NumpyActorCritic,
    NumpySquashedGaussian,
    NumpyGaussianMlp,
    NumpyCategoricalMlp,
    NumpyCommandPolicy,
)


def make_numpy_policy(model: torch.nn.Module, device: str | torch.device, seed: int) -> NumpyPass | None:
    """The numpy twin that computes `model`'s act on `device`, or None (then the torch path acts)."""
    for cls in TWINS:
        if cls.supports(model, device):
            return cls(model, seed)
    return None


def numpy_description(model: torch.nn.Module) -> dict[str, Any] | None:
    """The description a numpy pass of `model` is built from (appo/numpy_policy/registry.py), or None when no
    twin computes it."""
    for cls in TWINS:
        if cls.supports(model, "cpu"):
            return cls(model, 0).description
    return None
