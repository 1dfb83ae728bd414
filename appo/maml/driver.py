"""The MAML-TRPO driver (--algo=maml_trpo; appo/launch.py hands the run here): meta-iterations are synchronous
(every task's train episodes, then the adaptation, then every task's validation episodes, then the meta-step), so
the driver is the learner and steps the engine's actor workers through whole episode batches rather than through
the asynchronous batcher (appo/maml/actors.py; with --backend=ray, the same actor-worker components in
Ray actors: appo/maml/ray_actors.py):

    draw meta_batch_size train tasks (seeded by (seed, iteration))
    -> weight set 0 = theta; each task's train episodes on a free split of the actor workers (control channel)
    -> theta'_k per task (appo/maml/algorithm.py MamlTrpo.adapted) into weight sets 1 + k
    -> validation episodes -> MamlTrpo.step (TRPO; the KL's Hessian-vector products spread over helper processes,
       appo/maml/hvp_pool.py) -> summaries, status line, checkpoint, meta-test

The run directory is the engine's: cfg.json, log.txt, checkpoint_p0/ (model + counters; resume continues at the
next iteration), summaries/0/ (maml/*, train/version = meta-iterations, meta_test/return_step<k>) and
meta_test/iter_<N>.npz (tasks, returns [steps + 1, tasks, episodes]).
"""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from appo.config.algorithms.maml import meta_batch_size
from appo.config.cfg import Cfg, experiment_dir
from appo.driver.preflight import STOP_SIGNALS, budget_spent, prepare
from appo.envs import PROJECT_ENVS, UnknownEnvError, env_kwargs, is_task_env, make_env
from appo.envs.meta.tasks import task_split
from appo.learning.checkpoint import load_checkpoint, load_latest, save_checkpoint
from appo.maml.actors import ActorPool
from appo.maml.algorithm import Episodes, MamlTrpo, make_policy, params_of
from appo.maml.buffers import allocate_buffers, episode_horizon
from appo.maml.hvp_pool import HvpPool
from appo.protocol.buffers import obs_dtype
from appo.protocol.processes import child_pids, kill_children, limit_threads
from appo.utils.logging import log
from appo.utils.paths import checkpoint_dir, summaries_dir

TRAIN, VALID = 0, 1  # episode buffers, and the seed streams of training episodes
META_TEST_STREAM = 2  # + adaptation step: the meta-test's episodes (and enjoy.py's)


def draw_tasks(num_train: int, num: int, seed: int, iteration: int) -> list[int]:
    """The meta-batch of `iteration`: `num` indices of train tasks, without replacement when there are enough."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, 1_000_003, iteration]))
    return [int(i) for i in rng.choice(num_train, size=num, replace=num > num_train)]


def episode_returns(episodes: Episodes) -> torch.Tensor:
    """Undiscounted return of every episode [..., E] (the rewards of the steps taken)."""
    return (episodes.rewards * episodes.mask).sum(-1)


class MamlRun:
    """The meta-learner, its samplers and the run directory; `iteration` drives one meta-iteration."""

    def __init__(self, cfg: Cfg) -> None:
        self.cfg = cfg
        self.exp_dir = experiment_dir(cfg)
        env = make_env(cfg.env, max_episode_steps=cfg.max_episode_steps, **env_kwargs(cfg))
        self.obs_space, self.action_space = env.observation_space, env.action_space
        self.horizon = episode_horizon(env)
        self.train_tasks, self.test_tasks = task_split(env, cfg.num_train_tasks, cfg.num_test_tasks, cfg.seed)
        env.close()
        torch.manual_seed(cfg.seed)
        self.model = make_policy(cfg, self.obs_space, self.action_space)
        self.algo = MamlTrpo(cfg, self.model)
        self.meta_batch = meta_batch_size(cfg)
        self.rows = max(self.meta_batch, len(self.test_tasks))
        obs_dim, act_dim = int(np.prod(self.obs_space.shape)), int(np.prod(self.action_space.shape))
        num_params = sum(p.numel() for p in self.model.parameters())
        self.buffers = allocate_buffers(
            self.rows, cfg.fast_batch_size, self.horizon, obs_dim, act_dim, num_params, obs_dtype(self.obs_space)
        )
        self.pool: ActorPool | None = None
        self.hvps: HvpPool | None = None
        self.iteration = 0
        self.env_steps = 0

    def start(self) -> None:
        spaces = (self.obs_space, self.action_space)
        num_tasks = len(self.train_tasks) + len(self.test_tasks)  # envs.run_tasks: train, then test
        pool_class = ActorPool
        if self.cfg.backend == "ray":  # the same pool over Ray actors, on this machine or a cluster's nodes
            from appo.maml.ray_actors import RayActorPool

            pool_class = RayActorPool
        self.pool = pool_class(self.cfg, spaces, self.horizon, self.buffers, 1 + self.rows, num_tasks)
        self.pool.start()
        # The helpers compute per-task products, which are the KL's Hessian only with one inner step.
        if self.algo.has_task_hvps:
            self.hvps = HvpPool(self.cfg, self.buffers, spaces, self.pool.params[0])

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
        """Weight set `row` for the actor workers (set 0, the meta-parameters, is the helpers' theta too)."""
        assert self.pool is not None
        self.pool.publish(row, params)

    def collect(self, tasks: list[int], iteration: int) -> tuple[Episodes, Episodes]:
        """Train episodes with theta, adaptation, validation episodes with each task's theta'."""
        assert self.pool is not None
        K = len(tasks)
        self.publish(0, params_of(self.model))
        self.pool.sample(TRAIN, TRAIN, iteration, tasks, [0] * K)
        train = self.buffers.episodes(TRAIN, K)
        for k in range(K):
            self.publish(1 + k, self.algo.adapted(train.task(k)))
        self.pool.sample(VALID, VALID, iteration, tasks, [1 + k for k in range(K)])
        return train, self.buffers.episodes(VALID, K)

    def meta_iteration(self) -> dict[str, float]:
        began, began_cpu = time.monotonic(), time.process_time()
        tasks = draw_tasks(len(self.train_tasks), self.meta_batch, self.cfg.seed, self.iteration)
        train, valid = self.collect(tasks, self.iteration)
        sampled = time.monotonic()
        hvp = self.hvps.hvp(self.iteration, len(tasks)) if self.hvps is not None else None  # None: the learner's own
        step = self.algo.step(train, valid, hvp)
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
        K, S = len(self.test_tasks), self.cfg.meta_test_steps
        tasks = [len(self.train_tasks) + j for j in range(K)]  # the test split, in the run's task table
        current = [{k: v.detach() for k, v in params_of(policy).items()} for _ in range(K)]
        returns = np.zeros((S + 1, K, self.cfg.fast_batch_size))
        for step in range(S + 1):
            for k in range(K):
                self.publish(1 + k, current[k])
            self.pool.sample(TRAIN, META_TEST_STREAM + step, self.iteration, tasks, [1 + k for k in range(K)])
            episodes = self.buffers.episodes(TRAIN, K)
            returns[step] = episode_returns(episodes).numpy()
            if step < S:
                # One adaptation per batch of episodes, as trained: --num_inner_steps gradient steps.
                current = [learner.adapted(episodes.task(k), current[k]) for k in range(K)]
        return returns

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()
        if self.hvps is not None:
            self.hvps.close()


def run(cfg: Cfg) -> int:
    """Train with MAML-TRPO until a stop criterion; returns the exit status."""
    error = env_error(cfg)
    if error:  # before anything is written
        print(f"error: {error}", file=sys.stderr)
        return 2
    exp_dir, *_, spent = prepare(cfg)  # the engine's start-up: verification, checkpoints, cfg.json, logging
    if spent:  # a finished run: nothing trained, no meta-test again
        return 0
    # One thread: measured on this 2-core machine under other sessions' load, two torch threads made the meta-step
    # 10-100x slower (one thread spins at each barrier while the other waits for a core); and the thread count must
    # not follow --num_workers (torch's reductions depend on it; 1 or 4 workers give the same iterations).
    _threads = limit_threads(1)
    from tensorboardX import SummaryWriter

    writer = SummaryWriter(str(summaries_dir(exp_dir, 0)), flush_secs=10)
    if cfg.with_wandb:  # every scalar into the policy's wandb run too (utils/tracking.py)
        from appo.utils.tracking import mirror_writers

        writer = mirror_writers([writer], cfg, exp_dir)[0]
    received: list[int] = []
    before = child_pids()

    def on_signal(signum: int, _frame: Any) -> None:
        if received:  # a second Ctrl-C, as in the engine's driver: no more waiting, but no orphans either
            log.warning("second signal: killing every process now")
            kill_children(before)
            os._exit(130)
        received.append(signum)  # the first: the meta-iteration in flight ends, a checkpoint, no final meta-test

    previous = {s: signal.signal(s, on_signal) for s in STOP_SIGNALS}
    maml = MamlRun(cfg)
    maml.resume()
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
        if maml.iteration > 0 and tested != maml.iteration and not received:
            run_meta_test(maml, writer)  # saves the final checkpoint first
        elif maml.iteration > 0:
            maml.save()  # stopped by a signal: the checkpoint only (the next start meta-tests on schedule)
    except Exception as exc:
        log.exception("MAML run failed: %s", exc)
        status = 1
    finally:
        maml.close()
        writer.close()
        for s, handler in previous.items():
            signal.signal(s, handler)
    if status == 0 and received:  # as the engine's driver: 143 after SIGTERM, 0 after Ctrl-C
        status = 143 if received[0] == signal.SIGTERM else 0
    return status


def env_error(cfg: Cfg) -> str | None:
    """Why --env cannot run MAML (one line), or None."""
    try:
        env = make_env(cfg.env, max_episode_steps=cfg.max_episode_steps, **env_kwargs(cfg))
    except UnknownEnvError as exc:
        return str(exc)
    try:
        if not is_task_env(env):
            return f"--env={cfg.env}: --algo=maml_trpo needs a task family ({', '.join(sorted(PROJECT_ENVS))})"
        obs, act = env.observation_space, env.action_space
        if not isinstance(obs, gym.spaces.Box) or len(obs.shape) != 1:
            return f"--env={cfg.env}: --algo=maml_trpo needs flat Box observations, the env has {obs}"
        if not isinstance(act, gym.spaces.Discrete) and (not isinstance(act, gym.spaces.Box) or len(act.shape) != 1):
            return f"--env={cfg.env}: --algo=maml_trpo needs flat Box or Discrete actions, the env has {act}"
        episode_horizon(env)
    except ValueError as exc:
        return str(exc)
    finally:
        env.close()
    return None


def should_stop(cfg: Cfg, maml: MamlRun, start: float, received: list[int]) -> str | None:
    if received:
        return f"signal {received[0]}"
    return budget_spent(cfg, maml.env_steps, maml.iteration, time.monotonic() - start)


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
