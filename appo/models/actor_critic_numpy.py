"""`ActorCritic`'s numpy twin on the torch side: which models the numpy pass computes (`NumpyPolicy.supports`),
the description it is built from (`describe`), and `NumpyPolicy`, the pass (appo/numpy_policy/actor_critic.py) bound
to a torch model: built from one, reloaded from one after every pull. Only exactly `ActorCritic` with exactly a
`GRUCell` or `LSTMCell` core (or none) is supported.
"""

from __future__ import annotations

from typing import Any

import torch

from appo.models.actor_critic import ActorCritic
from appo.models.numpy_twins import activation_name, mlp_unsupported, register_numpy_pass
from appo.numpy_policy.actor_critic import ActorCriticPass, NumpyPolicyStack

__all__ = ["NumpyPolicy", "NumpyPolicyStack", "describe"]

# The recurrent cells the numpy pass computes, by the name the pass knows them under.
_CORES: dict[type[torch.nn.Module], str] = {torch.nn.GRUCell: "gru", torch.nn.LSTMCell: "lstm"}


def _model_unsupported(model: torch.nn.Module) -> str | None:
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
    return mlp_unsupported(model.encoder, "the encoder") or (
        mlp_unsupported(model.value_encoder, "the value trunk") if model.value_encoder is not None else None
    )


def describe(model: ActorCritic) -> dict[str, Any]:
    """What the numpy pass needs of `model` besides its state (appo/numpy_policy/actor_critic.py)."""
    norm = model.obs_normalizer
    return {
        "kind": ActorCriticPass.kind,
        # (An empty encoder has no activation: the name is then unused.)
        "activation": activation_name(model.encoder[1]) if len(model.encoder) else "tanh",
        "core": _CORES[type(model.core)] if model.core is not None else None,
        "obs_clip": norm.clip if norm is not None else None,
        "obs_epsilon": norm.epsilon if norm is not None else None,
    }


@register_numpy_pass
class NumpyPolicy(ActorCriticPass):
    def __init__(self, model: ActorCritic, seed: int) -> None:
        """Raises ValueError for a model that `supports` rejects (device aside)."""
        self._check(model)
        super().__init__(describe(model), seed)
        self.load(model)

    @staticmethod
    def supports(model: torch.nn.Module, device: str | torch.device) -> bool:
        """Whether the policy worker on `device` should act with this numpy pass for `model`: exactly an
        `ActorCritic` (not a subclass), with exactly a GRUCell or LSTMCell core or none, with MLPs of known
        activations, on the CPU."""
        return torch.device(device).type == "cpu" and _model_unsupported(model) is None

    @staticmethod
    def _check(model: torch.nn.Module) -> None:
        reason = _model_unsupported(model)
        if reason is not None:
            raise ValueError(f"NumpyPolicy cannot run this model: {reason}")

    def load(self, model: ActorCritic) -> None:
        """Copy the weights (call after every pull). ValueError for a model the numpy pass does not compute."""
        self._check(model)
        super().load(model)
