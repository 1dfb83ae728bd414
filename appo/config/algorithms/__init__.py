"""What `--algo` means to a run's configuration, for every algorithm: its flag group (merged into the flat Cfg),
the shared-flag defaults it changes, its PBT ranges, its flag checks, and its traits: the plain values the engine
acts on (the model kind it trains, how the learner feeds it, the trajectory fields it adds, episodic sampling,
command inputs). `cfg.traits` (appo/config/cfg.py) reads them once from `--algo`; every component below the
driver takes them from there, so no module outside appo/algorithms/ tests an algorithm's name and none imports
appo/algorithms/ to learn what it needs. The math of each algorithm lives in appo/algorithms/ (its classes:
appo/algorithms/registry.py), MAML-TRPO's loop in appo/maml/. Torch-free: parsing flags stays cheap.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from appo.config.algorithms.maml import MAML_DEFAULTS, MAML_PBT_RANGES, MamlCfg, verify_maml
from appo.config.algorithms.ppo import PPO_PBT_RANGES, PpoCfg, verify_ppo
from appo.config.algorithms.rcp import (
    RCP_A_DEFAULTS,
    RCP_COMMAND_DIMS,
    RCP_PBT_RANGES,
    RCP_R_DEFAULTS,
    RcpCfg,
    rcp_r_command_follows,
    verify_rcp,
)
from appo.config.algorithms.sac import SAC_DEFAULTS, SAC_PBT_RANGES, SacCfg, verify_sac
from appo.config.algorithms.udrl import UDRL_COMMAND_DIMS, UDRL_DEFAULTS, UDRL_PBT_RANGES, UdrlCfg, verify_udrl


class Traits(NamedTuple):
    """What the engine needs to know of a run's algorithm, as plain values (`cfg.traits`)."""

    # The model kind (appo.models registry) it trains and every component acts with.
    model_kind: str = "actor_critic"
    # How it is fed: "fresh" (whole on-policy trajectories, lag-checked: appo/learning/batcher.py), "replay" (every
    # trajectory, one per update, however old), "meta_batches" (appo/maml/ runs its own synchronous loop).
    consumes: str = "fresh"
    # Every rollout is one whole episode per env, started by the driver (appo/sampling/env_runner.py).
    episodic: bool = False
    # Its replay is a transition ring that may live in Ray replay actors (--backend=ray, --num_replay_shards).
    replay_shards: bool = False
    # Per-step fields it needs beyond the engine's own, by name (appo/protocol/buffers.py actor_fields).
    trajectory_fields: tuple[str, ...] = ()
    # Command inputs of a reward-conditioned policy (appo/envs/reward_conditioning.py appends them to observations),
    # and how the command moves during an episode, as the labels it is trained with do: "" holds (RCP-A's
    # advantage), "return_to_go" (UDRL: return -= reward, horizon -= 1), "discounted_return_to_go" ((Z - reward) /
    # gamma).
    command_dims: int = 0
    command_follows: str = ""
    # Learner statistics it reports that belong under perf/ in tensorboard rather than train/.
    perf_keys: tuple[str, ...] = ()


class AlgorithmConfig(NamedTuple):
    name: str  # the value of --algo
    flags: type  # its flag group: a dataclass of flag() fields, merged into the flat Cfg
    pbt_ranges: dict[str, tuple[float, float, str]]  # hyperparameter -> (lowest, highest, "scale" | "discount")
    verify: Callable[[Any], list[str]]  # its flags' errors, one line each
    summary: str
    # Shared flags whose default this algorithm changes (applied above env presets: appo/config/cfg.py merge_cfg).
    defaults: dict[str, Any] = {}
    traits: Traits = Traits()
    # Where command_follows depends on the cfg (RCP-R: by --rcp_condition): the function giving it.
    command_follows: Callable[[Any], str] | None = None


ALGORITHMS: dict[str, AlgorithmConfig] = {}


def register(spec: AlgorithmConfig) -> None:
    if spec.name in ALGORITHMS:
        raise ValueError(f"algorithm {spec.name!r} is registered twice")
    ALGORITHMS[spec.name] = spec


register(
    AlgorithmConfig(
        "appo",
        PpoCfg,
        PPO_PBT_RANGES,
        verify_ppo,
        "asynchronous PPO: clipped surrogate, V-trace or GAE targets, Adam",
    )
)
register(
    AlgorithmConfig(
        "sac",
        SacCfg,
        SAC_PBT_RANGES,
        verify_sac,
        "soft actor-critic: replay, twin Q + targets, tanh-squashed Gaussian, tuned entropy",
        SAC_DEFAULTS,
        Traits(
            model_kind="squashed_gaussian",
            consumes="replay",
            replay_shards=True,
            trajectory_fields=("final_obs",),  # bootstrapping a time limit needs the observation an episode ended on
            perf_keys=("updates_per_env_step", "updates_per_sec", "replay_size", "learner_samples_per_sec"),
        ),
    )
)
register(
    AlgorithmConfig(
        "udrl",
        UdrlCfg,
        UDRL_PBT_RANGES,
        verify_udrl,
        "upside-down RL: a command-conditioned policy trained by likelihood on its best episodes, relabelled",
        UDRL_DEFAULTS,
        Traits(
            model_kind="command_policy",
            consumes="replay",
            trajectory_fields=("episode_ids",),  # whole episodes are stitched from trajectories by these
            command_dims=UDRL_COMMAND_DIMS,
            command_follows="return_to_go",
        ),
    )
)
register(
    AlgorithmConfig(
        "rcp_r",
        RcpCfg,
        RCP_PBT_RANGES,
        verify_rcp,
        "reward-conditioned policy on discounted returns: exponentially weighted likelihood on a FIFO replay",
        RCP_R_DEFAULTS,
        Traits(
            model_kind="command_policy",
            consumes="replay",
            trajectory_fields=("episode_ids",),
            command_dims=RCP_COMMAND_DIMS,
        ),
        command_follows=rcp_r_command_follows,  # as the labels of --rcp_condition move
    )
)
register(
    AlgorithmConfig(
        "rcp_a",
        RcpCfg,
        RCP_PBT_RANGES,
        verify_rcp,
        "reward-conditioned policy on advantages (TD(lambda) value function): weighted likelihood, FIFO replay",
        RCP_A_DEFAULTS,
        Traits(
            model_kind="command_policy",
            consumes="replay",
            trajectory_fields=("episode_ids",),
            command_dims=RCP_COMMAND_DIMS,
        ),
    )
)
register(
    AlgorithmConfig(
        "maml_trpo",
        MamlCfg,
        MAML_PBT_RANGES,
        verify_maml,
        "MAML with a TRPO meta-step: per-task adaptation by policy gradient, second-order meta-gradient",
        MAML_DEFAULTS,
        Traits(
            model_kind="maml_mlp",
            consumes="meta_batches",  # synchronous meta-iterations: appo/maml/
            episodic=True,  # the actor workers run whole episodes per task
            trajectory_fields=("action_noise",),  # drawn from each episode's seed: the same episode wherever it runs
        ),
    )
)


def algorithm_config(name: str) -> AlgorithmConfig:
    """The registered algorithm `name`; ValueError with a one-line message naming the valid ones."""
    try:
        return ALGORITHMS[name]
    except KeyError:
        raise ValueError(f"--algo={name}: must be one of {', '.join(sorted(ALGORITHMS))}") from None


def algorithm_defaults(name: str) -> dict[str, Any]:
    """The shared-flag defaults algorithm `name` changes; empty for an unknown name (verify reports it)."""
    spec = ALGORITHMS.get(name)
    return dict(spec.defaults) if spec is not None else {}


def traits_of(cfg: Any) -> Traits:
    """The traits of the run's algorithm as plain values; the defaults (APPO's) for an unknown --algo, which
    verify reports."""
    spec = ALGORITHMS.get(getattr(cfg, "algo", ""))
    if spec is None:
        return Traits()
    if spec.command_follows is not None:
        return spec.traits._replace(command_follows=spec.command_follows(cfg))
    return spec.traits


def flag_groups() -> list[type]:
    """Every registered algorithm's flag group, once each."""
    seen: list[type] = []
    for spec in ALGORITHMS.values():
        if spec.flags not in seen:
            seen.append(spec.flags)
    return seen
