"""The models and their numpy twins. Importing this package registers every model (appo/models/registry.py: each
module's `register_model` decorator runs on import) and binds each to its numpy twin (appo/models/numpy_twins.py)."""

from appo.models import actor_critic, command_policy, gaussian_mlp, numpy_twins, squashed_gaussian  # noqa: F401
