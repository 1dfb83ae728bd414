"""The registry of training algorithms, keyed by `--algo`. Torch-free, so parsing flags stays cheap: each entry
names its class as "module:Class", imported only where the algorithm runs (appo/learning/learner.py).

An algorithm is data plus math (appo/algorithms/base.py): the model it builds, the trajectory fields it adds,
how it consumes data, `update(batch) -> stats`, its checkpoint state, its PBT ranges and its flag group. It
never starts a process or opens a queue. docs/algorithms.md shows how to add one, with PPO as the example.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any, NamedTuple

from appo.algorithms.maml_flags import MAML_DEFAULTS, MAML_PBT_RANGES, MamlCfg, verify_maml
from appo.algorithms.ppo_flags import PPO_PBT_RANGES, PpoCfg, verify_ppo
from appo.algorithms.rcp_flags import RCP_A_DEFAULTS, RCP_PBT_RANGES, RCP_R_DEFAULTS, RcpCfg, verify_rcp
from appo.algorithms.sac_flags import SAC_DEFAULTS, SAC_PBT_RANGES, SacCfg, verify_sac
from appo.algorithms.udrl_flags import UDRL_DEFAULTS, UDRL_PBT_RANGES, UdrlCfg, verify_udrl


class AlgorithmSpec(NamedTuple):
    name: str  # the value of --algo
    target: str  # "module:Class" of its appo.algorithms.base.Algorithm subclass
    flags: type  # its flag group: a dataclass of flag() fields, merged into the flat Cfg
    pbt_ranges: dict[str, tuple[float, float, str]]  # hyperparameter -> (lowest, highest, "scale" | "discount")
    verify: Callable[[Any], list[str]]  # its flags' errors, one line each
    summary: str
    # Shared flags whose default this algorithm changes (applied above env presets: appo/cfg.py merge_cfg).
    defaults: dict[str, Any] = {}


ALGORITHMS: dict[str, AlgorithmSpec] = {}


def register(spec: AlgorithmSpec) -> None:
    if spec.name in ALGORITHMS:
        raise ValueError(f"algorithm {spec.name!r} is registered twice")
    ALGORITHMS[spec.name] = spec


register(
    AlgorithmSpec(
        "appo",
        "appo.algorithms.ppo:PPO",
        PpoCfg,
        PPO_PBT_RANGES,
        verify_ppo,
        "asynchronous PPO: clipped surrogate, V-trace or GAE targets, Adam",
    )
)
register(
    AlgorithmSpec(
        "sac",
        "appo.algorithms.sac:SAC",
        SacCfg,
        SAC_PBT_RANGES,
        verify_sac,
        "soft actor-critic: replay, twin Q + targets, tanh-squashed Gaussian, tuned entropy",
        SAC_DEFAULTS,
    )
)

register(
    AlgorithmSpec(
        "udrl",
        "appo.algorithms.udrl:UDRL",
        UdrlCfg,
        UDRL_PBT_RANGES,
        verify_udrl,
        "upside-down RL: a command-conditioned policy trained by likelihood on its best episodes, relabelled",
        UDRL_DEFAULTS,
    )
)
register(
    AlgorithmSpec(
        "rcp_r",
        "appo.algorithms.rcp:RCP",
        RcpCfg,
        RCP_PBT_RANGES,
        verify_rcp,
        "reward-conditioned policy on discounted returns: exponentially weighted likelihood on a FIFO replay",
        RCP_R_DEFAULTS,
    )
)
register(
    AlgorithmSpec(
        "rcp_a",
        "appo.algorithms.rcp:RCPA",
        RcpCfg,
        RCP_PBT_RANGES,
        verify_rcp,
        "reward-conditioned policy on advantages (TD(lambda) value function): weighted likelihood, FIFO replay",
        RCP_A_DEFAULTS,
    )
)
register(
    AlgorithmSpec(
        "maml_trpo",
        "appo.algorithms.maml:MamlTrpo",
        MamlCfg,
        MAML_PBT_RANGES,
        verify_maml,
        "MAML with a TRPO meta-step: per-task adaptation by policy gradient, second-order meta-gradient",
        MAML_DEFAULTS,
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


def model_kind(name: str) -> str:
    """The model kind (appo.model.MODELS) the algorithm `name` trains and acts with (this imports torch)."""
    return algorithm_class(name).model_kind


def is_episodic(name: str) -> bool:
    """Whether the algorithm `name` samples whole episodes started by its learner (Algorithm.episodic)."""
    return bool(algorithm_class(name).episodic)


def algorithm_class(name: str) -> type:
    """Import and return the Algorithm subclass of `name` (this imports torch)."""
    module, _, cls = algorithm_spec(name).target.partition(":")
    return getattr(importlib.import_module(module), cls)


def flag_groups() -> list[type]:
    """Every registered algorithm's flag group, once each."""
    seen: list[type] = []
    for spec in ALGORITHMS.values():
        if spec.flags not in seen:
            seen.append(spec.flags)
    return seen
