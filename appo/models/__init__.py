"""The models and their numpy twins. Importing this package registers every one of them (appo/models/registry.py):
each module's `register_model` and `register_numpy_pass` decorators run on import."""

from appo.models import actor_critic, actor_critic_numpy, command_policy, gaussian_mlp, squashed_gaussian  # noqa: F401
