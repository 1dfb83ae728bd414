"""Values derived from a run's cfg in one place (never stored as flags): the sampler's layout and the devices."""

from __future__ import annotations

import math
from dataclasses import dataclass

from appo.config.cfg import Cfg


@dataclass(frozen=True)
class Derived:
    """Values computed from the cfg in one place, never stored as flags."""

    num_envs_total: int
    envs_per_split: int
    num_splits_total: int
    samples_per_iteration: int  # env steps one training iteration consumes
    trajectories_per_iteration: int
    minibatches_per_epoch: int
    slot_groups_per_split: int
    num_slots: int
    recurrence: int
    # Rows of the trajectory tensors per env: its agents (appo/envs/multi_agent.py); 1 for single-agent envs. An
    # env index (envs_per_split, num_envs_total, control-channel rows) then counts agent rows.
    agents_per_env: int = 1
    multi_agent: bool = False
    # A resumed run: the env steps its checkpoints hold (the fewest of its policies'); 0 for a new run. Actor workers
    # seed from it, so that a resumed run draws new env seeds and policies rather than the first start's again.
    resumed_steps: int = 0


def derive(cfg: Cfg, agents_per_env: int = 1, multi_agent: bool = False) -> Derived:
    """The layout of a run of `cfg` whose env has `agents_per_env` agents (a multi-agent env, `multi_agent`: each
    of --num_envs_per_worker envs takes that many rows)."""
    envs_per_split = cfg.num_envs_per_worker // max(cfg.worker_num_splits, 1) * agents_per_env
    num_splits_total = cfg.num_workers * cfg.worker_num_splits
    num_envs_total = cfg.num_workers * cfg.num_envs_per_worker * agents_per_env
    samples = cfg.batch_size * cfg.num_batches_per_epoch
    minibatches = cfg.num_batches_per_epoch
    steps_per_round = max(num_envs_total * cfg.rollout, 1)  # one rollout of every env
    if cfg.async_rl:
        # One group being filled, plus room for `num_minibatches_to_accumulate` iterations waiting.
        groups = 1 + math.ceil(cfg.num_minibatches_to_accumulate * samples / steps_per_round)
    else:
        # Synchronous PPO: every env fills `groups` rollouts with the same weights, then waits for the
        # new ones. An iteration is rounded up to whole rounds so that no sample is ever stale; the
        # minibatch keeps its size and the number of minibatches grows with it.
        groups = max(math.ceil(samples / steps_per_round), 1)
        samples = groups * steps_per_round
        minibatches = max(round(samples / cfg.batch_size), 1)
        if cfg.collect_ahead:
            # A second iteration's groups, filled with the weights being trained on while the learner trains.
            # The learner releases an iteration's groups only after training on it, so the actors are never
            # more than one iteration ahead: every sample is trained on at most one version after its own.
            groups *= 2
    if cfg.num_policies > 1:
        # Envs of one group may run different policies, and a group is refilled only once every learner has
        # released its part. A learner short of a batch can therefore hold as many groups as it has
        # trajectories; with more groups than all learners together can hold short of a batch, some group is
        # always free (no deadlock). The price is memory, and with --async_rl=False some experience is a
        # version old when trained on.
        needed = max(samples // max(cfg.rollout, 1), 1)
        accumulate = cfg.num_minibatches_to_accumulate if cfg.async_rl else 1 + cfg.collect_ahead
        groups = 1 + math.ceil(cfg.num_policies * accumulate * needed / max(num_splits_total, 1))
    return Derived(
        num_envs_total=num_envs_total,
        envs_per_split=envs_per_split,
        num_splits_total=num_splits_total,
        samples_per_iteration=samples,
        trajectories_per_iteration=max(samples // max(cfg.rollout, 1), 1),
        minibatches_per_epoch=minibatches,
        slot_groups_per_split=groups,
        num_slots=num_splits_total * groups * envs_per_split,
        recurrence=cfg.rollout if cfg.recurrence == -1 else cfg.recurrence,
        agents_per_env=agents_per_env,
        multi_agent=multi_agent,
    )


def learner_devices(cfg: Cfg) -> list[str]:
    """The device of each learner rank: --learner_devices; else the learners' device (--device) for one rank,
    and for several cuda:N, cuda:N+1, ... from it on a GPU, the CPU for every rank otherwise."""
    if cfg.learner_devices:
        return [d.strip() for d in cfg.learner_devices.split(",")]
    device, size = resolve_device(cfg), cfg.learner_world_size
    if size > 1 and device.startswith("cuda"):
        first = int(device.partition(":")[2] or 0)
        return [f"cuda:{first + r}" for r in range(size)]
    return [device] * size


def learner_threads(cfg: Cfg, cores: int | None = None) -> int:
    """--learner_threads, or with 0 the cores the run leaves free: the machine's (or `cores`) less one per actor
    worker and per other learner process, at least 1 and at most 4. On 2 cores with SAC's 2 actor workers: 1 (a
    second thread made the learner slower there); on 16 cores: 4."""
    if cfg.learner_threads > 0:
        return cfg.learner_threads
    import os

    if cores is None:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    busy = cfg.num_workers + cfg.num_policies * cfg.learner_world_size - 1
    return max(1, min(4, cores - busy))


def budget_fraction(cfg: Cfg, env_steps: int, version: int, seconds: float) -> float:
    """How much of the run's budget is used: the largest of env steps over --train_for_env_steps, seconds of this
    session over --train_for_seconds and iterations over --train_for_iterations (where set), so that a schedule
    (--lr_schedule=linear_decay) ends with whichever budget ends the run. An unset budget (its huge default)
    contributes next to nothing."""
    fractions = [env_steps / cfg.train_for_env_steps, seconds / cfg.train_for_seconds]
    if cfg.train_for_iterations > 0:
        fractions.append(version / cfg.train_for_iterations)
    return max(fractions)


def resolve_device(cfg: Cfg) -> str:
    if cfg.device != "auto":
        return cfg.device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"
