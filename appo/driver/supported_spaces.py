"""The observation and action spaces the engine trains on, as a run's driver checks them before it starts anything
(appo/driver/preflight.py) and `python -m appo.check_env` reports them: each problem one line naming the env and
what would be valid. The action rule is the policies' own (appo/models/distributions.py `action_dim`); the rest is
whether the run's model can be built for the spaces."""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from appo.envs.common.packed_obs import PackedObsSpace

VALID_OBS = (
    "a Box (images: uint8 (H, W, C) or (C, H, W)) or a Dict of Boxes; Discrete observations in multi-agent envs only "
    "(a single-agent env can give their one-hot: gymnasium.wrappers.FlattenObservation)"
)


def first_line(exc: BaseException) -> str:
    """An exception as one line: its type and the first line of its message."""
    from appo.utils.logging import first_line as message

    return f"{type(exc).__name__}: {message(exc)}" if str(exc).strip() else type(exc).__name__


def describe(space: Any) -> str:
    """A space in a few words: Box(float32, (4,)), Discrete(2), Dict(image: Box(uint8, (64, 64, 3)), ...)."""
    if isinstance(space, PackedObsSpace):
        space = space.dict_space
    if isinstance(space, gym.spaces.Box):
        return f"Box({space.dtype}, {space.shape})"
    if isinstance(space, gym.spaces.Discrete):
        return f"Discrete({space.n})" if int(space.start) == 0 else f"Discrete({space.n}, start={space.start})"
    if isinstance(space, gym.spaces.Dict):
        return "Dict(" + ", ".join(f"{k}: {describe(s)}" for k, s in space.spaces.items()) + ")"
    return str(space)


def space_rule_problems(name: str, env: Any) -> list[str]:
    """The observation and action spaces of `env` (as built for a run) that no model of the engine takes."""
    from appo.models.distributions import action_dim

    problems = []
    obs_space = env.observation_space
    multi_agent = bool(getattr(env, "is_multi_agent", False))
    if not isinstance(obs_space, gym.spaces.Box) or len(obs_space.shape) == 0:
        single = " (a single-agent env)" if isinstance(obs_space, gym.spaces.Discrete) and not multi_agent else ""
        problems.append(f"--env={name}: observation space {describe(obs_space)}{single} is not supported: {VALID_OBS}")
    try:
        action_dim(env.action_space)
    except ValueError as exc:
        problems.append(f"--env={name}: {first_line(exc).removeprefix('ValueError: ')}")
    return problems


def space_problems(name: str, cfg: Any, env: Any) -> list[str]:
    """`space_rule_problems`, then whether the model of a run with `cfg` can be built for the spaces."""
    problems = space_rule_problems(name, env)
    if not problems:
        try:
            from appo.models.registry import make_model

            make_model(cfg, env.observation_space, env.action_space)
        except Exception as exc:  # noqa: BLE001 (any failure is the finding)
            problems.append(f"--env={name}: a run's model cannot be built for these spaces: {first_line(exc)}")
    return problems
