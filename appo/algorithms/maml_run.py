"""The MAML-TRPO driver (--algo=maml_trpo; appo/runner.py hands the run here): meta-iterations are synchronous
(every task's train episodes, then the adaptation, then every task's validation episodes, then the meta-step), so
they run as one loop over the sampler workers rather than through the engine's asynchronous batcher:

    draw meta_batch_size train tasks (seeded by (seed, iteration))
    -> weights row 0 = theta; SampleEpisodes(train) to the workers (task k on worker k % num_workers)
    -> theta'_k per task (appo/algorithms/maml.py MamlTrpo.adapted) into weights rows 1 + k
    -> SampleEpisodes(validation) -> MamlTrpo.step (TRPO) -> summaries, status line, checkpoint, meta-test

The run directory is the engine's: cfg.json, log.txt, checkpoint_p0/ (model + counters; resume continues at the
next iteration), summaries/0/ (maml/*, train/version = meta-iterations, meta_test/return_step<k>) and
meta_test/iter_<N>.npz (tasks, returns [steps + 1, tasks, episodes]).
"""

from __future__ import annotations

import json
import queue
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from appo.algorithms.maml import Episodes, MamlTrpo, flatten, make_policy, mean_in_order, params_of
from appo.algorithms.maml_flags import meta_batch_size
from appo.cfg import Cfg, cfg_to_dict, experiment_dir
from appo.checkpoint import load_checkpoint, load_latest, save_checkpoint
from appo.messages import EpisodesReady, ErrorReport, HvpReady, HvpRequest, SampleEpisodes, Stop
from appo.processes import limit_threads, process_title, set_process_title, spawn_context, start_process, stop_processes
from appo.sampling.maml_sampler import (
    EpisodeBuffers,
    EpisodeSampler,
    ParamShapes,
    allocate_buffers,
    episode_horizon,
    sampler_worker_main,
)
from envs import PROJECT_ENVS, UnknownEnvError, is_task_env, make_env
from envs.tasks import Task, task_split
from utils.logging import init_logging, log
from utils.paths import cfg_path, checkpoint_dir, log_path, summaries_dir

TRAIN, VALID = 0, 1  # episode buffers, and the seed streams of training episodes
META_TEST_STREAM = 2  # + adaptation step: the meta-test's episodes (and enjoy.py's)


class SamplerPool:
    """The sampler workers (processes), or one in-process sampler with --serial_mode."""

    def __init__(self, cfg: Cfg, buffers: EpisodeBuffers, shapes: ParamShapes, episodes: int) -> None:
        self.cfg, self.buffers = cfg, buffers
        self.serial = EpisodeSampler(cfg, episodes, buffers, shapes) if cfg.serial_mode else None
        self.processes: list[Any] = []
        if self.serial is None:
            ctx = spawn_context()
            self.results = ctx.Queue()
            self.inboxes = [ctx.Queue() for _ in range(cfg.num_workers)]
            for w in range(cfg.num_workers):
                args = (cfg, w, self.inboxes[w], self.results, buffers, shapes, episodes)
                self.processes.append(start_process(ctx, sampler_worker_main, args, f"sampler{w}"))

    def sample(self, buffer: int, stream: int, iteration: int, tasks: list[Task], weight_rows: list[int]) -> None:
        """Fill rows 0..len(tasks)-1 of `buffer` and return once all are written."""
        jobs: dict[int, list[int]] = {}
        for k in range(len(tasks)):
            jobs.setdefault(k % (1 if self.serial is not None else len(self.processes)), []).append(k)
        msgs = {
            w: SampleEpisodes(
                buffer,
                stream,
                iteration,
                tuple(rows),
                tuple(tasks[k] for k in rows),
                tuple(weight_rows[k] for k in rows),
            )
            for w, rows in jobs.items()
        }
        if self.serial is not None:
            for msg in msgs.values():
                self.serial.on_sample(msg)
            return
        for w, msg in msgs.items():
            self.inboxes[w].put(msg)
        self._wait(set(msgs), EpisodesReady)

    def hvp(self, iteration: int, num_rows: int) -> Callable[[torch.Tensor], torch.Tensor] | None:
        """v -> the meta-batch's KL Hessian-vector product, each task's computed by the worker that sampled it and
        averaged here in task order (the same bits as in one process); None with --serial_mode."""
        if self.serial is not None:
            return None
        jobs: dict[int, list[int]] = {}
        for k in range(num_rows):
            jobs.setdefault(k % len(self.processes), []).append(k)
        seq = [0]

        def hvp(v: torch.Tensor) -> torch.Tensor:
            seq[0] += 1
            self.buffers.hvp_in.copy_(v)
            for w, rows in jobs.items():
                self.inboxes[w].put(HvpRequest(iteration, seq[0], tuple(rows)))
            self._wait(set(jobs), HvpReady)
            return mean_in_order(self.buffers.hvp_out[:num_rows].clone())

        return hvp

    def _wait(self, pending: set[int], kind: type) -> None:
        """Until every worker in `pending` has answered with a `kind` message."""
        while pending:
            try:
                reply = self.results.get(timeout=1.0)
            except queue.Empty:
                dead = [p.name for p in self.processes if not p.is_alive()]
                if dead:
                    raise RuntimeError(f"sampler workers died: {', '.join(dead)}") from None
                continue
            if isinstance(reply, ErrorReport):
                raise RuntimeError(f"{reply.component}: {reply.error.strip().splitlines()[-1]}")
            assert isinstance(reply, kind), f"unexpected {reply!r}"
            pending.discard(reply.worker_idx)

    def episodes(self, buffer: int, num_rows: int) -> Episodes:
        """A copy of rows 0..num_rows-1 of `buffer` as Episodes [K, E, T, ...]."""
        b = self.buffers
        lengths = b.lengths[buffer][:num_rows].clone()
        T = b.rewards[buffer].shape[-1]
        mask = (torch.arange(T) < lengths.unsqueeze(-1)).float()
        return Episodes(
            b.obs[buffer][:num_rows].clone(),
            b.actions[buffer][:num_rows].clone(),
            b.rewards[buffer][:num_rows].clone(),
            mask,
        )

    def close(self) -> None:
        if self.serial is not None:
            self.serial.close()
            return
        for inbox in self.inboxes:
            inbox.put(Stop())
        forced = stop_processes(self.processes)
        if forced:
            log.warning("sampler workers stopped by force: %s", ", ".join(forced))


def draw_tasks(train_tasks: list[Task], num: int, seed: int, iteration: int) -> list[Task]:
    """The meta-batch of `iteration`: `num` train tasks, without replacement when there are enough."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, 1_000_003, iteration]))
    idx = rng.choice(len(train_tasks), size=num, replace=num > len(train_tasks))
    return [dict(train_tasks[int(i)]) for i in idx]


def episode_returns(episodes: Episodes) -> torch.Tensor:
    """Undiscounted return of every episode [..., E] (the rewards of the steps taken)."""
    return (episodes.rewards * episodes.mask).sum(-1)


class MamlRun:
    """The meta-learner, its samplers and the run directory; `iteration` drives one meta-iteration."""

    def __init__(self, cfg: Cfg) -> None:
        self.cfg = cfg
        self.exp_dir = experiment_dir(cfg)
        env = make_env(cfg.env, max_episode_steps=cfg.max_episode_steps)
        self.obs_space, self.action_space = env.observation_space, env.action_space
        self.horizon = episode_horizon(env)
        self.train_tasks, self.test_tasks = task_split(env, cfg.num_train_tasks, cfg.num_test_tasks, cfg.seed)
        env.close()
        torch.manual_seed(cfg.seed)
        self.model = make_policy(cfg, self.obs_space, self.action_space)
        self.algo = MamlTrpo(cfg, self.model)
        self.meta_batch = meta_batch_size(cfg)
        self.shapes = [(name, tuple(p.shape)) for name, p in self.model.named_parameters()]
        rows = max(self.meta_batch, len(self.test_tasks))
        obs_dim, act_dim = int(np.prod(self.obs_space.shape)), int(np.prod(self.action_space.shape))
        num_params = sum(p.numel() for p in self.model.parameters())
        self.buffers = allocate_buffers(rows, cfg.fast_batch_size, self.horizon, obs_dim, act_dim, num_params)
        self.pool: SamplerPool | None = None
        self.iteration = 0
        self.env_steps = 0

    def start(self) -> None:
        self.pool = SamplerPool(self.cfg, self.buffers, self.shapes, self.cfg.fast_batch_size)

    # --- checkpoints ------------------------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        return {
            "model": self.model.state_dict(),
            "version": self.iteration,  # train/version counts meta-iterations, as the engine's key reads
            "env_steps": self.env_steps,
            "algo": self.cfg.algo,
            "policy_id": 0,
        }

    def save(self) -> Path:
        return save_checkpoint(
            checkpoint_dir(self.exp_dir, 0), self.state(), self.iteration, self.env_steps, self.cfg.keep_checkpoints
        )

    def resume(self) -> bool:
        loaded = load_latest(checkpoint_dir(self.exp_dir, 0))
        if loaded is None:
            return False
        state, path = loaded
        self.model.load_state_dict(state["model"])
        self.iteration, self.env_steps = int(state["version"]), int(state["env_steps"])
        log.info("MAML resumed from %s (iteration %d, %d env steps)", path, self.iteration, self.env_steps)
        return True

    # --- one meta-iteration -----------------------------------------------------------------------------
    def publish(self, row: int, params: dict[str, torch.Tensor]) -> None:
        self.buffers.weights[row] = flatten(params).detach().float()

    def collect(self, tasks: list[Task], iteration: int) -> tuple[Episodes, Episodes]:
        """Train episodes with theta, adaptation, validation episodes with each task's theta'."""
        assert self.pool is not None
        K = len(tasks)
        self.publish(0, params_of(self.model))
        self.pool.sample(TRAIN, TRAIN, iteration, tasks, [0] * K)
        train = self.pool.episodes(TRAIN, K)
        for k in range(K):
            self.publish(1 + k, self.algo.adapted(train.task(k)))
        self.pool.sample(VALID, VALID, iteration, tasks, [1 + k for k in range(K)])
        return train, self.pool.episodes(VALID, K)

    def meta_iteration(self) -> dict[str, float]:
        began, began_cpu = time.monotonic(), time.process_time()
        tasks = draw_tasks(self.train_tasks, self.meta_batch, self.cfg.seed, self.iteration)
        train, valid = self.collect(tasks, self.iteration)
        sampled = time.monotonic()
        assert self.pool is not None
        step = self.algo.step(train, valid, self.pool.hvp(self.iteration, len(tasks)))
        self.iteration += 1
        self.env_steps += int(train.mask.sum() + valid.mask.sum())
        now = time.monotonic()
        return {
            "maml/return_pre": float(episode_returns(train).mean()),
            "maml/return_post": float(episode_returns(valid).mean()),
            "maml/inner_loss": step.inner_loss,
            "maml/surrogate_before": step.surrogate_before,
            "maml/surrogate_after": step.surrogate_after,
            "maml/kl": step.kl,
            "maml/ls_steps": float(step.ls_steps),
            "maml/step_accepted": float(step.is_accepted),
            "maml/grad_norm": step.grad_norm,
            "perf/sampling_seconds": sampled - began,
            "perf/meta_step_seconds": now - sampled,
            "perf/seconds_per_iteration": now - began,
            # This process's CPU time: on a shared machine the wall times above include waiting for a core.
            "perf/driver_cpu_seconds": time.process_time() - began_cpu,
        }

    # --- meta-test ----------------------------------------------------------------------------------------
    def meta_test(self, checkpoint: Path) -> np.ndarray:
        """Returns [steps + 1, test tasks, episodes] of a fresh policy loaded from `checkpoint`: before, and after
        each of --meta_test_steps adaptation steps (each adapting on the previous step's episodes)."""
        assert self.pool is not None
        policy = make_policy(self.cfg, self.obs_space, self.action_space)
        policy.load_state_dict(load_checkpoint(checkpoint)["model"])
        learner = MamlTrpo(self.cfg, policy)
        tasks, K, S = self.test_tasks, len(self.test_tasks), self.cfg.meta_test_steps
        current = [{k: v.detach() for k, v in params_of(policy).items()} for _ in range(K)]
        returns = np.zeros((S + 1, K, self.cfg.fast_batch_size))
        for step in range(S + 1):
            for k in range(K):
                self.publish(1 + k, current[k])
            self.pool.sample(TRAIN, META_TEST_STREAM + step, self.iteration, tasks, [1 + k for k in range(K)])
            episodes = self.pool.episodes(TRAIN, K)
            returns[step] = episode_returns(episodes).numpy()
            if step < S:
                current = [learner.adapted(episodes.task(k), current[k], num_steps=1) for k in range(K)]
        return returns

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()


def run(cfg: Cfg) -> int:
    """Train with MAML-TRPO until a stop criterion; returns the exit status."""
    error = env_error(cfg)
    if error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    exp_dir = experiment_dir(cfg)
    exp_dir.mkdir(parents=True, exist_ok=True)
    cfg_path(exp_dir).write_text(json.dumps(cfg_to_dict(cfg), indent=2))
    init_logging(cfg.log_level, log_path(exp_dir), "driver")
    set_process_title(process_title(cfg, "maml"))
    # One thread: measured on this 2-core machine under other sessions' load, two torch threads made the meta-step
    # 10-100x slower (one thread spins at each barrier while the other waits for a core); and the thread count must
    # not follow --num_workers (torch's reductions depend on it; 1 or 4 workers give the same iterations).
    _threads = limit_threads(1)
    from tensorboardX import SummaryWriter

    received: list[int] = []

    def on_signal(signum: int, _frame: Any) -> None:
        received.append(signum)

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    maml = MamlRun(cfg)
    maml.resume()
    writer = SummaryWriter(str(summaries_dir(exp_dir, 0)), flush_secs=10)
    start, last_save, status, tested = time.monotonic(), time.monotonic(), 0, -1
    try:
        maml.start()
        while True:
            reason = should_stop(cfg, maml, start, received)
            if reason:
                log.info("stopping: %s", reason)
                break
            stats = maml.meta_iteration()
            write_summaries(writer, stats, maml)
            log.info(status_line(maml, stats, time.monotonic() - start))
            if time.monotonic() - last_save >= cfg.save_every_sec:
                maml.save()
                last_save = time.monotonic()
            if cfg.meta_test_interval > 0 and maml.iteration % cfg.meta_test_interval == 0:
                run_meta_test(maml, writer)
                tested = maml.iteration
        if maml.iteration > 0 and tested != maml.iteration:
            run_meta_test(maml, writer)  # saves the final checkpoint first
        elif maml.iteration > 0:
            maml.save()
    except Exception as exc:
        log.exception("MAML run failed: %s", exc)
        status = 1
    finally:
        maml.close()
        writer.close()
        for s, handler in previous.items():
            signal.signal(s, handler)
    return status


def env_error(cfg: Cfg) -> str | None:
    """Why --env cannot run MAML (one line), or None."""
    try:
        env = make_env(cfg.env, max_episode_steps=cfg.max_episode_steps)
    except UnknownEnvError as exc:
        return str(exc)
    try:
        if not is_task_env(env):
            return f"--env={cfg.env}: --algo=maml_trpo needs a task family ({', '.join(sorted(PROJECT_ENVS))})"
        for name, space in (("observation", env.observation_space), ("action", env.action_space)):
            if not isinstance(space, gym.spaces.Box) or len(space.shape) != 1:
                return f"--env={cfg.env}: --algo=maml_trpo needs flat Box {name}s, the env has {space}"
        episode_horizon(env)
    except ValueError as exc:
        return str(exc)
    finally:
        env.close()
    return None


def should_stop(cfg: Cfg, maml: MamlRun, start: float, received: list[int]) -> str | None:
    if received:
        return f"signal {received[0]}"
    if cfg.train_for_iterations > 0 and maml.iteration >= cfg.train_for_iterations:
        return f"reached {cfg.train_for_iterations} meta-iterations"
    if maml.env_steps >= cfg.train_for_env_steps:
        return f"reached {cfg.train_for_env_steps} env steps"
    if time.monotonic() - start >= cfg.train_for_seconds:
        return f"ran {cfg.train_for_seconds:g} s"
    return None


def run_meta_test(maml: MamlRun, writer: Any) -> None:
    """Save a checkpoint, meta-test a policy loaded from it, write the npz and the summaries."""
    path = maml.save()
    returns = maml.meta_test(path)
    out = maml.exp_dir / "meta_test" / f"iter_{maml.iteration}.npz"
    out.parent.mkdir(exist_ok=True)
    tasks = np.array([[t[key] for key in sorted(t)] for t in maml.test_tasks])
    np.savez(out, tasks=tasks, task_keys=np.array(sorted(maml.test_tasks[0])), returns=returns)
    for step, value in enumerate(returns.mean(axis=(1, 2))):
        writer.add_scalar(f"meta_test/return_step{step}", float(value), maml.env_steps)
    log.info(
        "meta-test at iteration %d: return after 0..%d steps %s",
        maml.iteration,
        returns.shape[0] - 1,
        " ".join(f"{v:.1f}" for v in returns.mean(axis=(1, 2))),
    )


def write_summaries(writer: Any, stats: dict[str, float], maml: MamlRun) -> None:
    for key, value in stats.items():
        writer.add_scalar(key, value, maml.env_steps)
    writer.add_scalar("train/version", maml.iteration, maml.env_steps)


def status_line(maml: MamlRun, stats: dict[str, float], elapsed: float) -> str:
    return (
        f"iteration {maml.iteration}, {maml.env_steps} env steps, {elapsed:.0f} s: return pre "
        f"{stats['maml/return_pre']:.1f} post {stats['maml/return_post']:.1f}, kl {stats['maml/kl']:.4f}, "
        f"ls {int(stats['maml/ls_steps'])}{'' if stats['maml/step_accepted'] else ' (rejected)'}, "
        f"{stats['perf/seconds_per_iteration']:.2f} s/it ({stats['perf/sampling_seconds']:.2f} sampling)"
    )
