"""The learner processes of one policy trained on a fixed, recorded batch, with nothing else running: how the
equivalence of several learner ranks to one is tested (tests/integration/test_learner_ranks.py) and how the
learner's own throughput is measured (benchmarks/learner_scaling.py).

`train_on_fixed_batch` starts the learner of policy 0 exactly as LocalBackend does (`run_learner`, and
`run_learner_rank` for each rank > 0 of --learner_world_size) on shared trajectory tensors holding the record,
and plays the actor workers and the driver around it: it hands the record's slot groups over with
TrajectoryReady, waits for them to come back (SlotsReleased), hands them over again, and so on for the number of
iterations asked; then it stops the learner and returns what rank 0 reported and published."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, NamedTuple

import torch

from appo.config.cfg import Cfg, experiment_dir
from appo.config.derive import derive, learner_devices
from appo.learning.distributed import RankLink, backend_for
from appo.learning.learner_process import rank_name, run_learner, run_learner_rank
from appo.models.registry import make_model
from appo.protocol.buffers import allocate_control, allocate_trajectories
from appo.protocol.messages import ErrorReport, SlotsReleased, Stop, TrainReport, TrajectoryReady
from appo.protocol.param_sync import ParamStore
from appo.protocol.processes import spawn_context, start_process, stop_processes
from appo.protocol.wiring import actor_inbox, close_all, wire
from appo.utils.paths import checkpoint_dir, log_path


class FixedBatchRun(NamedTuple):
    reports: list[TrainReport]  # rank 0's, one per iteration
    weights: dict[str, torch.Tensor]  # the state dict rank 0 published last
    log: str  # the run's log file (every rank writes to it)
    arrivals: list[float]  # when each report arrived (time.monotonic)


def train_on_fixed_batch(
    cfg: Cfg,
    spaces: tuple[Any, Any],
    record: dict[str, torch.Tensor],
    iterations: int,
    timeout: float = 300.0,
    inject: dict[int, list[Any]] | None = None,
) -> FixedBatchRun:
    """Train policy 0's learner (cfg.learner_world_size ranks, on learner_devices(cfg)) `iterations` times on
    `record`: trajectory tensors [n, T(+1), ...] by the names of appo/protocol/buffers.py, n = one iteration's
    trajectories, filling whole slot groups of actor worker 0. `inject[k]`: messages for the learner's queue
    (PBT's, say) sent just before the record is handed over for the k-th time (from 0). Raises with the log's
    tail if a rank fails."""
    derived = derive(cfg)
    n = next(iter(record.values())).shape[0]
    per_group, groups_per_split = derived.envs_per_split, derived.slot_groups_per_split
    if n != derived.trajectories_per_iteration or n % per_group or n // per_group > derived.num_slots // per_group:
        raise ValueError(f"record of {n} trajectories: needs {derived.trajectories_per_iteration} in whole groups")
    buffers = allocate_trajectories(cfg, derived, *spaces)
    for key, value in record.items():
        buffers[key][:n] = value
    ready = []
    for k in range(n // per_group):  # slot group k: split k // groups_per_split, its group k % groups_per_split
        ready.append(TrajectoryReady(0, 0, k // groups_per_split, k % groups_per_split, k * per_group, per_group))
    experiment_dir(cfg).mkdir(parents=True, exist_ok=True)
    queues = wire(cfg.num_workers, 1)
    params = ParamStore(make_model(cfg, *spaces))
    devices = learner_devices(cfg)
    link = RankLink(len(devices), backend_for(devices)) if len(devices) > 1 else None
    ckpt = checkpoint_dir(experiment_dir(cfg), 0)
    control = allocate_control(cfg, derived)
    ctx, processes = spawn_context(), []
    try:
        common = (cfg, derived, 0)
        args = (*common, buffers, params, spaces, ckpt, devices[0], control, queues, link)
        processes.append(start_process(ctx, run_learner, args, rank_name(0, 0)))
        for rank in range(1, len(devices)):
            args = (*common, rank, buffers, spaces, ckpt, devices[rank], control, queues, link)
            processes.append(start_process(ctx, run_learner_rank, args, rank_name(0, rank)))
        reports, arrivals = _feed(queues, ready, iterations, processes, timeout, inject or {})
        queues.learner_queues[0].put(Stop("fixed batch"))
        stop_processes(processes, timeout=60.0)
        failed = [f"{p.name} exited {p.exitcode}" for p in processes if p.exitcode != 0]
        if failed:
            raise RuntimeError(f"{', '.join(failed)}:\n{_tail(cfg)}")
        weights = {k: v.clone() for k, v in params.state.items()}
        return FixedBatchRun(reports, weights, log_path(experiment_dir(cfg)).read_text(), arrivals)
    finally:
        for process in processes:
            if process.is_alive():
                process.kill()
            process.join(5.0)
        close_all(queues)
        if link is not None:
            link.close()


def _feed(
    queues: Any,
    ready: list[TrajectoryReady],
    iterations: int,
    processes: list[Any],
    timeout: float,
    inject: dict[int, list[Any]],
) -> tuple[list[TrainReport], list[float]]:
    """Hand the record over `iterations` times, each time once all of its groups are back; rank 0's reports and
    when each arrived."""
    deadline = time.monotonic() + timeout
    reports: list[TrainReport] = []
    arrivals: list[float] = []
    handed = 0
    out = 0  # groups at the learner
    while len(reports) < iterations:
        if out == 0 and handed < iterations:
            queues.learner_queues[0].put_many(inject.get(handed, []) + ready)
            out, handed = len(ready), handed + 1
        for msg in _get(actor_inbox(queues, 0)):
            out -= type(msg) is SlotsReleased
        for msg in _get(queues.driver_queue):
            if type(msg) is ErrorReport:
                raise RuntimeError(f"{msg.component} failed:\n{msg.error}")
            if type(msg) is TrainReport:
                reports.append(msg)
                arrivals.append(time.monotonic())
        dead = [p.name for p in processes if not p.is_alive()]
        if dead or time.monotonic() > deadline:
            raise RuntimeError(f"learner ranks {'exited: ' + ', '.join(dead) if dead else 'timed out'}")
    return reports, arrivals


def _get(queue: Any) -> list[Any]:
    try:
        return queue.get_many(timeout=0.01)
    except Exception:  # queue.Empty
        return []


def _tail(cfg: Cfg, lines: int = 40) -> str:
    path: Path = log_path(experiment_dir(cfg))
    return "\n".join(path.read_text().splitlines()[-lines:]) if path.exists() else "(no log)"
