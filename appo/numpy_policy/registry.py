"""Every numpy pass by the model kind it computes: `NUMPY_PASSES`, keyed by the names models are registered under
(appo/models/registry.py `register_model`), and `make_numpy_pass`, which builds one from a model's description.
Actor workers acting without torch (appo/sampling/inference.py `NumpyInference`) and `appo.load_policy`
(appo/numpy_policy/policy.py) build their passes here; the torch side binds each pass to its torch model class in
appo/models/numpy_twins.py. Torch-free.

A model kind whose model class depends on the spaces has one pass per class, told apart by the description:
"maml_mlp" is a Gaussian MLP for Box actions and a categorical one for Discrete actions ("distribution")."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from appo.numpy_policy.actor_critic import ActorCriticPass
from appo.numpy_policy.categorical_mlp import CategoricalMlpPass
from appo.numpy_policy.command_policy import CommandPolicyPass
from appo.numpy_policy.gaussian_mlp import GaussianMlpPass
from appo.numpy_policy.ops import NumpyPass
from appo.numpy_policy.squashed_gaussian import SquashedGaussianPass

MAML_MLP_PASSES: dict[str, type[NumpyPass]] = {"gaussian": GaussianMlpPass, "categorical": CategoricalMlpPass}


def maml_mlp_pass(description: dict[str, Any], seed: int) -> NumpyPass:
    """The pass of a "maml_mlp" model: its description's "distribution" says which of MAML's two policies it is."""
    return MAML_MLP_PASSES[description["distribution"]](description, seed)


# Model kind -> what builds its pass from (description, seed).
NUMPY_PASSES: dict[str, Callable[[dict[str, Any], int], NumpyPass]] = {
    "actor_critic": ActorCriticPass,
    "squashed_gaussian": SquashedGaussianPass,
    "maml_mlp": maml_mlp_pass,
    "command_policy": CommandPolicyPass,
}

# Pass kinds of policy files exported before the pass kinds became the model kinds (MAML's two policies had kinds of
# their own), and what their descriptions read as now. Only for reading old files: nothing writes these.
OLD_KINDS: dict[str, dict[str, str]] = {
    "maml_gaussian_mlp": {"kind": "maml_mlp", "distribution": "gaussian"},
    "maml_categorical_mlp": {"kind": "maml_mlp", "distribution": "categorical"},
}


def current_description(description: dict[str, Any]) -> dict[str, Any]:
    """`description` with an old pass kind (`OLD_KINDS`) read as today's; any other unchanged."""
    return {**description, **OLD_KINDS.get(description.get("kind"), {})}


def make_numpy_pass(description: dict[str, Any], seed: int) -> NumpyPass:
    """The numpy pass `description` (a model's, or an old policy file's) describes, with its generator seeded by
    `seed`; its weights come by `load_state`. ValueError for a kind without a pass."""
    description = current_description(description)
    kind = description.get("kind")
    if kind not in NUMPY_PASSES:
        raise ValueError(f"model kind {kind!r} has no numpy pass; known: {', '.join(NUMPY_PASSES)}")
    return NUMPY_PASSES[kind](description, seed)
