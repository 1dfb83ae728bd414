"""The registry of training algorithms, keyed by `--algo`: every trait of an algorithm that code outside
appo/algorithms/ acts on lives in its spec here, so no other module tests an algorithm's name. Torch-free, so
parsing flags stays cheap: the spec names its class (and any hook of its own) as "module:attribute", imported only
where it is used.

An algorithm is data plus math (appo/algorithms/base.py): the model it builds, the trajectory fields it adds,
how it consumes data, `update(batch) -> stats`, its checkpoint state, its PBT ranges and its flag group. It
never starts a process or opens a queue. docs/algorithms.md shows how to add one, with PPO as the example.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any, NamedTuple

from appo.algorithms.maml.flags import MAML_DEFAULTS, MAML_PBT_RANGES, MamlCfg, verify_maml
from appo.algorithms.ppo.flags import PPO_PBT_RANGES, PpoCfg, verify_ppo
from appo.algorithms.reward_conditioned.rcp_flags import (
    RCP_A_DEFAULTS,
    RCP_COMMAND_DIMS,
    RCP_PBT_RANGES,
    RCP_R_DEFAULTS,
    RcpCfg,
    rcp_r_command_follows,
    verify_rcp,
)
from appo.algorithms.reward_conditioned.udrl_flags import (
    UDRL_COMMAND_DIMS,
    UDRL_DEFAULTS,
    UDRL_PBT_RANGES,
    UdrlCfg,
    verify_udrl,
)
from appo.algorithms.sac.flags import SAC_DEFAULTS, SAC_PBT_RANGES, SacCfg, verify_sac


class AlgorithmSpec(NamedTuple):
    name: str  # the value of --algo
    target: str  # "module:Class" of its appo.algorithms.base.Algorithm subclass
    flags: type  # its flag group: a dataclass of flag() fields, merged into the flat Cfg
    pbt_ranges: dict[str, tuple[float, float, str]]  # hyperparameter -> (lowest, highest, "scale" | "discount")
    verify: Callable[[Any], list[str]]  # its flags' errors, one line each
    summary: str
    # Shared flags whose default this algorithm changes (applied above env presets: appo/config/cfg.py merge_cfg).
    defaults: dict[str, Any] = {}
    # The model kind (appo.models registry) it trains and every component acts with.
    model_kind: str = "actor_critic"
    # How the learner core feeds it: "fresh" (whole on-policy trajectories, lag-checked: appo/learning/batcher.py),
    # "replay" (every trajectory, one per update, however old), "meta_batches" (its own loop takes the batches).
    consumes: str = "fresh"
    # Every rollout is one whole episode per env, started by the learner (appo/sampling/env_runner.py).
    episodic: bool = False
    # Its replay is a transition ring that may live in Ray replay actors (--backend=ray, --num_replay_shards).
    replay_shards: bool = False
    # Per-step fields it needs beyond the engine's own, by name (appo/protocol/buffers.py actor_fields).
    trajectory_fields: tuple[str, ...] = ()
    # Command inputs of a reward-conditioned policy (envs/reward_conditioning.py appends them to observations), and
    # how the command moves during an episode, as the labels it is trained with do: "" holds (RCP-A's advantage),
    # "return_to_go" (UDRL: return -= reward, horizon -= 1), "discounted_return_to_go" ((Z - reward) / gamma); or a
    # function of the cfg giving one of them (RCP-R: by --rcp_condition).
    command_dims: int = 0
    command_follows: str | Callable[[Any], str] = ""
    # "module:function" of the loop that trains it in place of the engine's driver loop (run(cfg) -> exit status),
    # and of what enjoy.py shows of it in place of playing episodes; empty: the engine's own.
    run_loop: str = ""
    enjoy: str = ""
    # Learner statistics it reports that belong under perf/ in tensorboard rather than train/.
    perf_keys: tuple[str, ...] = ()


ALGORITHMS: dict[str, AlgorithmSpec] = {}


def register(spec: AlgorithmSpec) -> None:
    if spec.name in ALGORITHMS:
        raise ValueError(f"algorithm {spec.name!r} is registered twice")
    ALGORITHMS[spec.name] = spec


register(
    AlgorithmSpec(
        "appo",
        "appo.algorithms.ppo.algorithm:PPO",
        PpoCfg,
        PPO_PBT_RANGES,
        verify_ppo,
        "asynchronous PPO: clipped surrogate, V-trace or GAE targets, Adam",
    )
)
register(
    AlgorithmSpec(
        "sac",
        "appo.algorithms.sac.algorithm:SAC",
        SacCfg,
        SAC_PBT_RANGES,
        verify_sac,
        "soft actor-critic: replay, twin Q + targets, tanh-squashed Gaussian, tuned entropy",
        SAC_DEFAULTS,
        model_kind="squashed_gaussian",
        consumes="replay",
        replay_shards=True,
        trajectory_fields=("final_obs",),  # bootstrapping a time limit needs the observation an episode ended on
        perf_keys=("updates_per_env_step", "updates_per_sec", "replay_size", "learner_samples_per_sec"),
    )
)
register(
    AlgorithmSpec(
        "udrl",
        "appo.algorithms.reward_conditioned.udrl:UDRL",
        UdrlCfg,
        UDRL_PBT_RANGES,
        verify_udrl,
        "upside-down RL: a command-conditioned policy trained by likelihood on its best episodes, relabelled",
        UDRL_DEFAULTS,
        model_kind="command_policy",
        consumes="replay",
        trajectory_fields=("episode_ids",),  # whole episodes are stitched from trajectories by these
        command_dims=UDRL_COMMAND_DIMS,
        command_follows="return_to_go",
    )
)
register(
    AlgorithmSpec(
        "rcp_r",
        "appo.algorithms.reward_conditioned.rcp:RCP",
        RcpCfg,
        RCP_PBT_RANGES,
        verify_rcp,
        "reward-conditioned policy on discounted returns: exponentially weighted likelihood on a FIFO replay",
        RCP_R_DEFAULTS,
        model_kind="command_policy",
        consumes="replay",
        trajectory_fields=("episode_ids",),
        command_dims=RCP_COMMAND_DIMS,
        command_follows=rcp_r_command_follows,  # as the labels of --rcp_condition move (issue 34, bug 3)
    )
)
register(
    AlgorithmSpec(
        "rcp_a",
        "appo.algorithms.reward_conditioned.rcp:RCPA",
        RcpCfg,
        RCP_PBT_RANGES,
        verify_rcp,
        "reward-conditioned policy on advantages (TD(lambda) value function): weighted likelihood, FIFO replay",
        RCP_A_DEFAULTS,
        model_kind="command_policy",
        consumes="replay",
        trajectory_fields=("episode_ids",),
        command_dims=RCP_COMMAND_DIMS,
    )
)
register(
    AlgorithmSpec(
        "maml_trpo",
        "appo.algorithms.maml.algorithm:MamlTrpo",
        MamlCfg,
        MAML_PBT_RANGES,
        verify_maml,
        "MAML with a TRPO meta-step: per-task adaptation by policy gradient, second-order meta-gradient",
        MAML_DEFAULTS,
        model_kind="maml_mlp",
        consumes="meta_batches",
        episodic=True,  # the actor workers run whole episodes per task (appo/backends/maml_actors.py)
        trajectory_fields=("action_noise",),  # drawn from each episode's seed: the same episode wherever it runs
        run_loop="appo.driver.maml:run",  # synchronous meta-iterations
        enjoy="appo.tools.maml_enjoy:enjoy_maml",  # adapt to one test task and show before and after
    )
)


def algorithm_spec(name: str) -> AlgorithmSpec:
    """The registered algorithm `name`; ValueError with a one-line message naming the valid ones."""
    try:
        return ALGORITHMS[name]
    except KeyError:
        raise ValueError(f"--algo={name}: must be one of {', '.join(sorted(ALGORITHMS))}") from None


def algorithm_defaults(name: str) -> dict[str, Any]:
    """The shared-flag defaults algorithm `name` changes; empty for an unknown name (verify reports it)."""
    spec = ALGORITHMS.get(name)
    return dict(spec.defaults) if spec is not None else {}


def command_dims(cfg: Any) -> int:
    """Command dims the run's policy takes (0: not a reward-conditioned algorithm, or an unknown one)."""
    spec = ALGORITHMS.get(getattr(cfg, "algo", ""))
    return spec.command_dims if spec is not None else 0


def resolve(target: str) -> Any:
    """The attribute a "module:attribute" string names (imported now)."""
    module, _, attr = target.partition(":")
    return getattr(importlib.import_module(module), attr)


def algorithm_class(name: str) -> type:
    """Import and return the Algorithm subclass of `name` (this imports torch)."""
    return resolve(algorithm_spec(name).target)


def flag_groups() -> list[type]:
    """Every registered algorithm's flag group, once each."""
    seen: list[type] = []
    for spec in ALGORITHMS.values():
        if spec.flags not in seen:
            seen.append(spec.flags)
    return seen
