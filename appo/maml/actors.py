"""MAML's episodes on the engine's actor workers (--algo=maml_trpo): the driver's side of episodic sampling.

The actor workers are the engine's own (appo/sampling/actor_worker.py: the same processes, EnvRunner, numpy acting
and supervision; restarted when killed), run episodically (its traits' `episodic`): every split holds --fast_batch_size
envs and runs one task's episodes per rollout of T = the env's time limit. For each task of a phase the pool takes a
free split, writes its envs' rows of the control channel (appo/protocol/control.py: the task as an index into
envs.run_tasks, the weight set that acts, and the episode seeds from (seed, stream, iteration, row, episode)) and
releases the split's slot group; the split's TrajectoryReady hands the episodes back, and they are copied into the
task's row of the episode buffers (appo/maml/buffers.py), which the meta-learner and its Hessian-vector
product helpers read. Episodes depend on their seeds, weights and the split's size alone, so one worker or four
give the same bits, and a task whose worker died is simply run again by its successor.

Weight sets: one ParamStore each; set 0 holds the meta-parameters, set 1 + k task k's adapted ones.
With --serial_mode the same ActorWorker components run in this process.
"""

from __future__ import annotations

import dataclasses
import queue
from collections import deque
from typing import Any

import numpy as np
import torch

from appo.config.cfg import Cfg
from appo.config.derive import Derived, derive
from appo.maml.algorithm import MamlPolicy, Params, flatten
from appo.maml.buffers import EpisodeBuffers, episode_seed
from appo.protocol.buffers import allocate_control, allocate_trajectories, first_env
from appo.protocol.control import Assignment, ControlChannel
from appo.protocol.messages import ErrorReport, SlotsReleased, Stop, TrajectoryReady
from appo.protocol.param_sync import ParamStore
from appo.protocol.processes import spawn_context, stop_processes
from appo.protocol.wiring import actor_inbox, close_all, send, wire
from appo.utils.logging import log

RESULT_TIMEOUT = 0.5  # seconds between supervision checks while waiting for rollouts


def episodic_cfg(cfg: Cfg, horizon: int) -> tuple[Cfg, Derived]:
    """The actor workers' view of a MAML run: one task's --fast_batch_size episodes per split and rollout of
    `horizon` steps, one slot group per split, rewards as the env pays them, acting in the actors (numpy)."""
    actor_cfg = dataclasses.replace(
        cfg,
        num_envs_per_worker=cfg.fast_batch_size * cfg.worker_num_splits,
        rollout=horizon,
        recurrence=-1,
        num_policies=1,
        async_rl=False,
        collect_ahead=False,
        reward_scale=1.0,
        reward_clip=0.0,
        decorrelate_experience_max_seconds=0.0,
        actor_inference=True,
        numpy_inference=True,
        set_workers_cpu_affinity=False,
    )
    derived = derive(actor_cfg)
    derived = dataclasses.replace(
        derived, slot_groups_per_split=1, num_slots=derived.num_splits_total * derived.envs_per_split
    )
    return actor_cfg, derived


class ActorPool:
    """The run's actor workers (processes, or in-process components with --serial_mode), driven episode batch by
    episode batch; `num_weight_sets` ParamStores, `num_tasks` the length of the run's task table."""

    def __init__(
        self, cfg: Cfg, spaces: tuple[Any, Any], horizon: int, out: EpisodeBuffers, num_weight_sets: int, num_tasks: int
    ) -> None:
        self.cfg, self.spaces, self.out = cfg, spaces, out
        self.actor_cfg, self.derived = episodic_cfg(cfg, horizon)
        self.horizon = horizon
        self.buffers = allocate_trajectories(self.actor_cfg, self.derived, *spaces)
        self.np_buf = {name: t.numpy() for name, t in self.buffers.items()}
        self.control = allocate_control(self.actor_cfg, self.derived)
        self.channel = ControlChannel(self.control["assignments"], 1, num_weight_sets, num_tasks)
        self.scratch: MamlPolicy = self._model()
        self.params = [ParamStore(self.scratch) for _ in range(num_weight_sets)]
        self.version = 0
        self.splits = [(w, s) for w in range(cfg.num_workers) for s in range(cfg.worker_num_splits)]
        self.queues = wire(cfg.num_workers, 1, local=cfg.serial_mode)
        self.sup: Any = None
        self.actors: list[Any] = []  # --serial_mode: the ActorWorker components

    def _model(self) -> MamlPolicy:
        from appo.models.registry import make_model

        return make_model(self.actor_cfg, *self.spaces)  # type: ignore[return-value]

    def start(self) -> None:
        from appo.models.numpy_twins import numpy_description
        from appo.protocol.shared_views import for_actor_process
        from appo.sampling.actor_worker import ActorWorker, run_actor_worker
        from appo.sampling.policy_worker import make_policy_workers

        cfg, derived, q = self.actor_cfg, self.derived, self.queues
        if cfg.serial_mode:
            for w in range(cfg.num_workers):
                acting = make_policy_workers(cfg, derived, self.buffers, self.params, self.spaces, "cpu", self.control)
                actor = ActorWorker(cfg, derived, w, self.buffers, self.control, 0, acting)
                actor.init()
                self.actors.append(actor)
            return
        from appo.backends.supervision import Supervisor

        heartbeats = {"actors": self.control["heartbeats"]}
        start_timeout = cfg.worker_start_timeout
        self.sup = Supervisor(spawn_context(), heartbeats, q, cfg.worker_stuck_timeout, start_timeout=start_timeout)
        for w in range(cfg.num_workers):
            args = (cfg, derived, w, self.buffers, self.control, 0, q, self.params, numpy_description(self.scratch))

            def args_of(inc: int, args: tuple = args) -> tuple:
                return for_actor_process((*args[:5], inc, *args[6:]))  # no torch in the worker

            self.sup.add("actors", f"actor_worker_{w}", run_actor_worker, args_of, True)

    def publish(self, weight_set: int, params: Params) -> None:
        """Make `params` weight set `weight_set` (the actors pull it at their next step)."""
        flat = flatten(params).detach().float()
        torch.nn.utils.vector_to_parameters(flat, self.scratch.parameters())
        self.version += 1
        self.params[weight_set].publish(self.scratch, self.version)

    # --- one batch of episodes ---------------------------------------------------------------------------------
    def assign(self, split: tuple[int, int], task: int, weight_set: int, seeds: tuple[int, int, int]) -> None:
        """The control-channel rows of `split`'s envs for its next rollout: `task` acting with `weight_set`, each
        env's episode seeds from (seed, stream, iteration, row `seeds`, env)."""
        w, s = split
        first = first_env(self.actor_cfg, self.derived, w, s)
        envs = list(range(first, first + self.derived.envs_per_split))
        self.channel.assign(envs, Assignment(0, task, weight_set))
        stream, iteration, row = seeds
        for e, env in enumerate(envs):
            env_seed, noise_seed = episode_seed(self.cfg.seed, stream, iteration, row, e).generate_state(2)
            self.control["episode_seeds"][env] = torch.tensor([int(env_seed), int(noise_seed)])

    def sample(self, buffer: int, stream: int, iteration: int, tasks: list[int], weight_sets: list[int]) -> None:
        """Run --fast_batch_size episodes of task `tasks[k]` (an index into the run's task table) acting with
        weight set `weight_sets[k]`, for every k, into row k of episode buffer `buffer`; returns when all are in."""
        todo = deque(range(len(tasks)))
        free = deque(self.splits)
        running: dict[tuple[int, int], tuple[int, int]] = {}  # split -> (row, incarnation it was given to)

        def dispatch(split: tuple[int, int], k: int) -> None:
            w, s = split
            self.assign(split, tasks[k], weight_sets[k], (stream, iteration, k))
            incarnation = int(self.queues.incarnations[w])
            running[split] = (k, incarnation)
            release = SlotsReleased(w, s, 0, 0, incarnation)
            if self.actors:
                self._run_serial(w, release)
            else:
                send([release], self.queues)

        while todo or running:
            while todo and free:
                dispatch(free.popleft(), todo.popleft())
            for msg in self._results():
                split = (msg.worker_idx, msg.split_idx)
                if split not in running or running[split][1] != msg.incarnation:
                    continue  # a predecessor's rollout, already given again
                k, _ = running.pop(split)
                self._copy_out(buffer, k, msg.first_slot)
                free.append(split)
            for split, (k, incarnation) in list(running.items()):
                if int(self.queues.incarnations[split[0]]) != incarnation:  # restarted: its successor runs it again
                    log.warning("actor worker %d restarted: task row %d sampled again", split[0], k)
                    dispatch(split, k)

    def _run_serial(self, w: int, release: SlotsReleased) -> None:
        """--serial_mode: run the released split's rollout to its end in this process."""
        actor = self.actors[w]
        out = actor.keep_local(actor.handle(release))
        while True:
            send([m for m in out if type(m) is TrajectoryReady], self.queues)
            if not actor.pending:
                return
            out = actor.act_locally()

    def _results(self) -> list[TrajectoryReady]:
        """Rollouts handed over since the last call (waiting up to RESULT_TIMEOUT); raises when an actor worker
        failed for good."""
        try:
            msgs = self.queues.learner_queues[0].get_many(block=not self.actors, timeout=RESULT_TIMEOUT)
        except queue.Empty:
            msgs = []
        try:
            reports = self.queues.driver_queue.get_many(block=False)
        except queue.Empty:
            reports = []
        for report in reports:  # episode reports are not needed: the returns are in the episode buffers
            if isinstance(report, ErrorReport):
                raise RuntimeError(f"{report.component}: {report.error.strip().splitlines()[-1]}")
        if self.sup is not None:
            failures = self.sup.check()
            if failures:
                raise RuntimeError("; ".join(failures))
        return [m for m in msgs if type(m) is TrajectoryReady]

    def _copy_out(self, buffer: int, row: int, first: int) -> None:
        """The split's episodes (slots `first`...) into row `row` of episode buffer `buffer`, zero past each end."""
        E, T = self.derived.envs_per_split, self.horizon
        slots = slice(first, first + E)
        ended = self.np_buf["dones"][slots] > 0
        lengths = np.where(ended.any(1), ended.argmax(1) + 1, T)
        taken = np.arange(T) < lengths[:, None]
        out, buf = self.out, self.np_buf
        obs = buf["obs"][slots, :T]  # in its own dtype (uint8 stays uint8), as the episode buffers keep it
        out.obs[buffer][row] = torch.from_numpy(np.where(taken[..., None], obs, np.zeros((), obs.dtype)))
        out.actions[buffer][row] = torch.from_numpy(np.where(taken[..., None], buf["actions"][slots], np.float32(0.0)))
        out.rewards[buffer][row] = torch.from_numpy(np.where(taken, buf["rewards"][slots], np.float32(0.0)))
        out.lengths[buffer][row] = torch.from_numpy(lengths)

    def close(self) -> None:
        if self.sup is not None:
            for w in range(self.actor_cfg.num_workers):
                actor_inbox(self.queues, w).put(Stop("driver"))
            forced = stop_processes(self.sup.of_kind("actors"))
            if forced:
                log.warning("actor workers stopped by force: %s", ", ".join(forced))
        for actor in self.actors:
            actor.close()
        close_all(self.queues)
