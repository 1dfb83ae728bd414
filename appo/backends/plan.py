"""Which components a run has: `plan(cfg)` decides the topology once, and the driver, serial mode and shutdown all
read the same answer."""

from __future__ import annotations

from typing import NamedTuple

from appo.config.cfg import Cfg
from appo.config.derive import learner_devices


class Topology(NamedTuple):
    learners: tuple[int, ...]  # policy ids, one learner each
    learner_devices: tuple[str, ...]  # the device of each of a policy's learner ranks (--learner_world_size)
    policy_workers: tuple[tuple[int, int], ...]  # (policy whose queue it reads, index); none when actors act
    shared_policy_workers: bool  # one set of policy workers serves every policy (queue of policy 0)
    actors_act: bool  # actor workers answer their own inference requests
    actors: tuple[int, ...]  # actor worker indices
    evaluation_interval: int  # env steps between evaluations; 0: no evaluator runs and none is asked for


def evaluation_interval(cfg: Cfg) -> int:
    """Task envs are evaluated by meta-tests on held-out tasks (--meta_test_interval), others by
    --eval_interval; the one that does not apply is ignored."""
    return cfg.meta_test_interval if cfg.task_schedule != "none" else cfg.eval_interval


def plan(cfg: Cfg) -> Topology:
    from appo.sampling.inference import actors_act

    acting = actors_act(cfg)
    # Self-play snapshots are weight sets beside the policies': one set of policy workers serves them all.
    shared = (cfg.shared_policy_workers and cfg.num_policies > 1) or cfg.selfplay_pool > 0
    served = [] if acting else [0] if shared else list(range(cfg.num_policies))
    return Topology(
        learners=tuple(range(cfg.num_policies)),
        learner_devices=tuple(learner_devices(cfg)),
        policy_workers=tuple((p, i) for p in served for i in range(cfg.policy_workers_per_policy)),
        shared_policy_workers=shared,
        actors_act=acting,
        actors=tuple(range(cfg.num_workers)),
        evaluation_interval=max(evaluation_interval(cfg), 0),
    )
