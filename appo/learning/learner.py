"""The learner core of one policy, for any algorithm: it feeds the algorithm batches, counts versions and env
steps, publishes weights, saves checkpoints, guards against NaN updates, carries out PBT's operations and
reports stats. What an update computes is the algorithm's (appo/algorithms/); how the learner is fed and
run as a process is appo/learning/learner_process.py. --serial_mode drives this object directly."""

from __future__ import annotations

import copy
import dataclasses
import math
import sys
import time
from collections import deque
from pathlib import Path
from typing import Any

import gymnasium as gym
import torch

from appo.algorithms.base import Algorithm, NonFiniteGuard
from appo.algorithms.common.ranks import Ranks
from appo.algorithms.registry import algorithm_class
from appo.config.cfg import Cfg
from appo.config.derive import Derived, budget_fraction
from appo.config.pbt import initial_hparams, policy_hparams
from appo.learning.batcher import Batch, Batcher, within_lag
from appo.learning.checkpoint import (
    best_metric,
    load_checkpoint,
    load_latest,
    load_replay,
    save_best,
    save_checkpoint,
    save_replay,
    save_snapshot,
)
from appo.learning.distributed import RankLink, state_digest
from appo.learning.resume_state import random_states, resumed_hparams, set_random_states
from appo.learning.snapshot_pool import SnapshotPool
from appo.models.device import compute_dtype
from appo.models.encoders import set_compute_dtype
from appo.models.registry import make_model
from appo.protocol.messages import (
    CopyPolicy,
    HyperparamsReport,
    LoadPolicy,
    ReturnSummary,
    SetHyperparams,
    TrainReport,
    TrajectoryReady,
)
from appo.protocol.param_sync import ParamStore
from appo.utils.logging import log
from appo.utils.timing import Timing


class Learner:
    def __init__(
        self,
        cfg: Cfg,
        derived: Derived,
        policy_id: int,
        buffers: dict[str, torch.Tensor],
        params: ParamStore,
        spaces: tuple[gym.Space, gym.Space],
        ckpt_dir: Path,
        device: str,
        control: dict[str, torch.Tensor] | None = None,
        ranks: Ranks | None = None,
        link: RankLink | None = None,
        replay_factory: Any = None,
    ) -> None:
        self.cfg, self.derived, self.policy_id, self.params = cfg, derived, policy_id, params
        self.ckpt_dir, self.device = ckpt_dir, device
        # This policy's learner ranks (--learner_world_size; appo/learning/distributed.py). Rank 0 alone takes
        # batches, publishes, saves and reports; `link` (rank 0's) carries each batch's shards to the others.
        self.ranks = ranks if ranks is not None else Ranks()
        self.is_lead = self.ranks.rank == 0
        spec, algo_cls = cfg.traits, algorithm_class(cfg.algo)
        if self.ranks.is_distributed and spec.consumes != "fresh":
            raise ValueError(f"--learner_world_size={self.ranks.world_size}: --algo={cfg.algo} trains on one rank")
        self.model = make_model(cfg, *spaces, kind=spec.model_kind).to(device).train()
        set_compute_dtype(self.model, compute_dtype(cfg.learner_precision, device))  # --learner_precision
        self.guard = NonFiniteGuard(policy_id, ranks=self.ranks)
        self.algorithm: Algorithm = algo_cls(cfg, derived, self.model, device, self.guard)
        self.algorithm.control = control
        # The session's clock (--train_for_seconds): the driver's start where it stamped one, else this learner's.
        self.session_start = control.get("session_start") if control is not None else None
        self.created = time.monotonic()
        if replay_factory is not None and spec.replay_shards:
            # A replay the backend keeps elsewhere (--backend=ray: Ray actors that rollout actors fill), built by the
            # factory the backend handed over: `replay_factory(capacity, device)`.
            self.algorithm.replay = replay_factory(cfg.replay_size, device)  # type: ignore[attr-defined]
        # This policy's own values of the hyperparameters PBT may change; self.cfg always carries them.
        self.hparams: dict[str, float] = {}
        self.flag_hparams = initial_hparams(cfg) | policy_hparams(cfg).get(policy_id, {})  # as the flags give them
        self.set_hparams(dict(self.flag_hparams))
        self.pbt_ops: deque[Any] = deque()  # filled by the receiving thread, applied by the training one
        if spec.consumes not in ("fresh", "replay"):
            raise ValueError(f"--algo={cfg.algo}: consumes {spec.consumes!r} data, which no feeder serves")
        # "replay": every trajectory, one at a time as it arrives, however old (the algorithm keeps a replay).
        self.is_off_policy = spec.consumes == "replay"
        self.algorithm.publish = self.publish
        versions = control.get("snapshot_versions") if control is not None else None
        self.pool = SnapshotPool(cfg, policy_id, params.snapshots if params is not None else [], versions)
        # Synchronous PPO with one policy: an iteration is the same number of groups from every split (appo/learning/
        # batcher.py _take_rounds), which with --collect_ahead keeps every sample within one version.
        synchronous = not (self.is_off_policy or cfg.async_rl or cfg.num_policies > 1)
        self.batcher = Batcher(
            buffers,
            1 if self.is_off_policy else derived.trajectories_per_iteration,
            device,
            control["group_at_learner"] if control is not None else None,
            (cfg.worker_num_splits, derived.slot_groups_per_split),
            derived.slot_groups_per_split // (1 + cfg.collect_ahead) if synchronous else None,
        )
        self.version = 0
        self.env_steps = 0
        self.dropped = 0
        self.best_return = -math.inf
        self.latest_return = -math.inf
        self.last_save = time.monotonic()
        self.timing = Timing()
        self.ranks.timing = self.timing  # forward, backward and all-reduce times in the shutdown profile
        if self.ranks.is_distributed and self.is_lead:
            from appo.learning.shards import ShardingBatcher

            assert link is not None, "rank 0 of several learner ranks needs their RankLink"
            self.batcher = ShardingBatcher(self.batcher, link, policy_id, self.session_seconds)  # type: ignore
        self.handlers = {
            TrajectoryReady: self.batcher.add,
            ReturnSummary: self._on_return_summary,
            SetHyperparams: self.pbt_ops.append,
            CopyPolicy: self.pbt_ops.append,
            LoadPolicy: self.pbt_ops.append,
        }

    # --- lifecycle ----------------------------------------------------------------------------------
    def init(self) -> None:
        """Restore the latest readable checkpoint, if any (rank 0's choice, for every rank), and publish the
        weights."""
        loaded = load_latest(self.ckpt_dir, map_location=self.device) if self.is_lead else None
        if self.ranks.is_distributed:
            chosen = self.ranks.broadcast(None if loaded is None else str(loaded[1]))
            if not self.is_lead and chosen is not None:
                loaded = load_checkpoint(Path(chosen), map_location=self.device), Path(chosen)
        if loaded is not None:
            state, path = loaded
            self._load_state(state)
            self.version, self.env_steps = int(state["version"]), int(state["env_steps"])
            # A best checkpoint saved after this one (the run was killed before its next save) still counts.
            self.best_return = max(float(state.get("best_return", -math.inf)), best_metric(self.ckpt_dir))
            hparams, overridden = resumed_hparams(state, self.flag_hparams)
            self.set_hparams(hparams)
            if overridden:
                log.info("learner %d: %s as the command line gives them", self.policy_id, ", ".join(overridden))
            if "random_states" in state:
                set_random_states(state["random_states"])
            replay = load_replay(self.ckpt_dir, self.device, self.policy_id, path, self.version, self.env_steps)
            if replay is not None:
                self.algorithm.load_replay_state(replay)
            log.info(
                "learner %d resumed from %s (version %d, %d env steps)",
                self.policy_id,
                path,
                self.version,
                self.env_steps,
            )
        if self.ranks.is_distributed:
            log.info(
                "learner %d rank %d: training state sha256 %s (%s)",
                self.policy_id,
                self.ranks.rank,
                self.state_digest(),
                f"from {loaded[1]}" if loaded is not None else "fresh",
            )
        self.algorithm.set_ranks(self.ranks)
        self.check_in_step("start")
        self.params.publish(self.model, self.version)

    def state_digest(self) -> str:
        """sha256 of what must be equal on every rank: weights, normalisers, the algorithm's state (Adam's
        moments) and the random state the minibatch shuffle draws from."""
        rng = [torch.get_rng_state()] + ([torch.cuda.get_rng_state(self.device)] if "cuda" in self.device else [])
        return state_digest(self.model.state_dict(), self.algorithm.state_dict(), rng)

    def check_in_step(self, when: str) -> None:
        """Several ranks: raise unless every rank holds the same training state."""
        if not self.ranks.is_distributed:
            return
        digests = self.ranks.check_in_step(self.state_digest())
        if len(set(digests)) > 1:
            raise RuntimeError(f"learner {self.policy_id}: ranks out of step at {when}: sha256 {digests}")
        if self.is_lead:
            log.info(
                "learner %d: %d ranks in step at %s (training state sha256 %s)",
                self.policy_id,
                len(digests),
                when,
                digests[0],
            )

    def _load_state(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.algorithm.load_state_dict(state)
        if "snapshot_pool" in state and self.pool.stores:
            filled = self.pool.load_state_dict(state["snapshot_pool"], copy.deepcopy(self.model))
            log.info("learner %d: self-play pool restored, %d snapshots", self.policy_id, filled)

    def state(self) -> dict[str, Any]:
        return {
            "model": self.model.state_dict(),
            **self.algorithm.state_dict(),
            "version": self.version,
            "env_steps": self.env_steps,
            "best_return": self.best_return,
            "policy_id": self.policy_id,
            "hparams": dict(self.hparams),
            "flag_hparams": dict(self.flag_hparams),
            "algo": self.cfg.algo,
            "random_states": random_states(),
        } | ({"snapshot_pool": self.pool.state_dict()} if self.pool.stores else {})

    def set_hparams(self, hparams: dict[str, float]) -> None:
        self.hparams = self.hparams | hparams
        self.cfg = dataclasses.replace(self.cfg, **self.hparams)
        self.algorithm.set_cfg(self.cfg)

    def hparams_report(self) -> HyperparamsReport:
        return HyperparamsReport(self.policy_id, dict(self.hparams))

    # --- population-based training ------------------------------------------------------------------
    def apply_pbt(self) -> list[Any]:
        """Carry out the PBT messages received since the last call (between training iterations, in the thread
        that trains); returns the messages to send."""
        ops = {SetHyperparams: self._on_set_hparams, CopyPolicy: self._on_copy_policy, LoadPolicy: self.load_policy}
        received: list[Any] = []
        while self.pbt_ops:
            received.append(self.pbt_ops.popleft())
        if self.ranks.is_distributed:
            # Several ranks call this once per iteration, before training: rank 0's messages reach every rank at
            # the same iteration; rank 0 alone writes the snapshot a CopyPolicy asks for.
            received = [m for m in self.ranks.broadcast(received) if self.is_lead or type(m) is not CopyPolicy]
        out: list[Any] = []
        for msg in received:
            out += ops[type(msg)](msg) or []
        return out

    def _on_set_hparams(self, msg: SetHyperparams) -> None:
        self.set_hparams(msg.hparams)
        log.info("learner %d: PBT set hyperparameters %s", self.policy_id, msg.hparams)

    def _on_copy_policy(self, msg: CopyPolicy) -> list[Any]:
        path = self.ckpt_dir / f"pbt_snapshot_for_p{msg.target}.pth"
        save_snapshot(self.state(), path)
        return [LoadPolicy(msg.target, self.policy_id, str(path), msg.hparams)]

    def load_policy(self, msg: LoadPolicy) -> None:
        """Become a copy of policy `msg.source` (weights, optimizer state, normalisers, its self-play pool whole)
        with new hyperparameters. The version jumps past --max_policy_lag, so experience collected by the replaced
        weights is dropped (at train time: see `train`). The learner goes on counting its own versions (its
        iterations, which --train_for_iterations and the lag of its batches count), not the source's; the pool keeps
        the source's versions and order of arrival (appo/learning/snapshot_pool.py), and inference components tell
        its refilled slots by their stores' publish stamps, whatever versions the slots held before."""
        state = load_checkpoint(Path(msg.path), map_location=self.device)
        self._load_state(state)
        self.set_hparams(msg.hparams)
        self.version += self.cfg.max_policy_lag + 1
        self.params.publish(self.model, self.version)
        self.latest_return = -math.inf
        log.info(
            "learner %d: PBT replaced by a copy of policy %d (its version %d), now version %d",
            self.policy_id,
            msg.source,
            int(state["version"]),
            self.version,
        )

    # --- checkpoints --------------------------------------------------------------------------------
    def save(self) -> Path:
        self.last_save = time.monotonic()
        path = save_checkpoint(self.ckpt_dir, self.state(), self.version, self.env_steps, self.cfg.keep_checkpoints)
        replay = self.algorithm.replay_state()  # an off-policy algorithm's replay, when asked to keep it
        if replay is not None:
            save_replay(self.ckpt_dir, replay, self.version, self.env_steps)
        return path

    def publish(self) -> None:
        """Hand the newest weights to the actors as a new version (after each iteration, and whenever an
        algorithm doing many updates per iteration asks)."""
        self.version += 1
        self.params.publish(self.model, self.version)
        self.pool.after_publish(self.model, self.version)

    def maybe_save(self) -> None:
        if not self.is_lead:
            return  # rank 0 writes every checkpoint
        if time.monotonic() - self.last_save >= self.cfg.save_every_sec:
            with self.timing.add_time("checkpoint"):
                self.save()
        if self.latest_return > self.best_return and self.version > 0:
            self.best_return = self.latest_return
            save_best(self.ckpt_dir, self.state(), self.version, self.env_steps, self.best_return)

    # --- messages -----------------------------------------------------------------------------------
    def handle(self, msg: Any) -> None:
        handler = self.handlers.get(type(msg))
        if handler is None:
            raise TypeError(f"learner {self.policy_id}: unexpected message {msg!r}")
        handler(msg)

    def _on_return_summary(self, msg: ReturnSummary) -> None:
        self.latest_return = msg.return_mean

    def next_batch(self) -> Batch | None:
        if not self.batcher.is_ready():
            return None
        with self.timing.add_time("batch"):
            batch = self.batcher.take(self.version, self.max_policy_lag)
        self.env_steps += batch.env_steps
        self.dropped += batch.dropped
        seconds = batch.seconds if batch.seconds >= 0 else self.session_seconds()
        return batch._replace(env_steps_total=self.env_steps, seconds=seconds)

    def session_seconds(self) -> float:
        """Seconds since this session's start (the driver's, where it stamped one in the control arrays)."""
        start = float(self.session_start[0]) if self.session_start is not None else 0.0
        return time.time() - start if start > 0 else time.monotonic() - self.created

    # --- training -----------------------------------------------------------------------------------
    @property
    def max_policy_lag(self) -> int:
        """Versions a trajectory may lag and still be trained on: unlimited for an off-policy algorithm."""
        return sys.maxsize if self.is_off_policy else self.cfg.max_policy_lag

    def train(self, batch: Batch) -> TrainReport:
        """One iteration of the algorithm on `batch`, then publish the new weights and version. Policy lag is
        checked again here, against the version being trained: a PBT replacement between taking the batch
        and training on it makes the experience of the replaced weights too old."""
        tensors, lag = self._drop_stale(batch)
        stats: dict[str, float] = {}
        N, T = tensors["rewards"].shape
        _, n_global = self.ranks.layout(N)  # trajectories kept on every rank together
        if n_global > 0 and not self.cfg.sampler_only:
            began = time.monotonic()
            with self.timing.add_time("train"):
                # The schedules' clock: the env steps and seconds counted when the batch was taken (the same on
                # every rank, whenever each trains); the budget used is the largest fraction of any budget.
                steps = batch.env_steps_total if batch.env_steps_total >= 0 else self.env_steps
                seconds = batch.seconds if batch.seconds >= 0 else self.session_seconds()
                self.algorithm.budget_used = budget_fraction(self.cfg, steps, self.version, seconds)
                stats = self.algorithm.update(tensors, steps)
            stats["train_seconds"] = time.monotonic() - began
            stats["learner_samples_per_sec"] = n_global * T / max(stats["train_seconds"], 1e-9)
            with self.timing.add_time("publish"):
                self.publish()
        stats |= self._lag_stats(lag)
        stats["dropped_trajectories"] = float(self.dropped)
        stats["nonfinite_updates"] = float(self.guard.skipped)
        return TrainReport(self.policy_id, self.env_steps, self.version, stats)

    def _lag_stats(self, lag: torch.Tensor) -> dict[str, float]:
        """Min, mean and max policy lag of the kept samples of every rank; empty when there are none."""
        lag = lag.double()
        n = lag.numel()
        low, high = (lag.min(), lag.max()) if n else (math.inf, -math.inf)
        rows = self.ranks.gather(torch.tensor([n, float(lag.sum()), float(low), float(high)], dtype=torch.float64))
        count = float(rows[:, 0].sum())
        if count == 0:
            return {}
        avg = float(rows[:, 1].sum()) / count
        return {
            "policy_lag_min": float(rows[:, 2].min()),
            "policy_lag_avg": avg,
            "policy_lag_max": float(rows[:, 3].max()),
        }

    def _drop_stale(self, batch: Batch) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        """The batch's trajectories within --max_policy_lag of the current version, and their lag [n * T]."""
        keep = within_lag(batch.tensors["policy_versions"], self.version, self.max_policy_lag)
        tensors = batch.tensors
        if not bool(keep.all()):
            self.dropped += int((~keep).sum())
            tensors = {k: v[keep] for k, v in tensors.items()}
        return tensors, (self.version - tensors["policy_versions"]).flatten()
