"""Learner of one policy: batches of whole trajectories -> V-trace or GAE targets -> clipped PPO loss ->
Adam; then publishes the new weights and version. Also owns the policy's checkpoints.

`Learner` is the component (used directly by --serial_mode); `run_learner` is the process shell, in
which a background thread trains while the main thread copies the next batch out of shared memory.
"""

from __future__ import annotations

import dataclasses
import math
import queue
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

import gymnasium as gym
import torch
from torch import Tensor

from appo.cfg import Cfg, Derived, policy_hparams
from appo.checkpoint import load_checkpoint, load_latest, save_best, save_checkpoint, save_snapshot
from appo.learning.batcher import Batch, Batcher
from appo.learning.losses import entropy_loss, policy_loss, value_loss
from appo.learning.param_sync import ParamStore
from appo.learning.returns import gae, vtrace
from appo.messages import (
    CopyPolicy,
    HyperparamsReport,
    LoadPolicy,
    ReturnSummary,
    SetHyperparams,
    Stop,
    TrainReport,
    TrajectoryReady,
)
from appo.model import make_model
from appo.pbt import initial_hparams
from appo.processes import component_main
from appo.wiring import Queues, send
from utils.logging import log
from utils.timing import Timing

MAX_NONFINITE_IN_A_ROW = 10  # minibatch updates with NaN/inf loss or gradients before the run stops


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
    ) -> None:
        self.cfg, self.derived, self.policy_id, self.params = cfg, derived, policy_id, params
        self.ckpt_dir, self.device = ckpt_dir, device
        # This policy's own values of the hyperparameters PBT may change; self.cfg always carries them.
        self.hparams: dict[str, float] = {}
        self.set_hparams(initial_hparams(cfg) | policy_hparams(cfg).get(policy_id, {}))
        self.pbt_ops: deque[Any] = deque()  # filled by the receiving thread, applied by the training one
        self.model = make_model(cfg, *spaces).to(device).train()
        self.optimizer = torch.optim.Adam(
            self.model.parameters(), lr=cfg.learning_rate, betas=(cfg.adam_beta1, cfg.adam_beta2), eps=cfg.adam_eps
        )
        self.batcher = Batcher(
            buffers,
            derived.trajectories_per_iteration,
            device,
            control["group_at_learner"] if control is not None else None,
            (cfg.worker_num_splits, derived.slot_groups_per_split),
        )
        self.version = 0
        self.env_steps = 0
        self.dropped = 0
        self.best_return = -math.inf
        self.latest_return = -math.inf
        self.last_save = time.monotonic()
        self.timing = Timing()
        self.nonfinite_updates = 0
        self.nonfinite_in_a_row = 0

    # --- lifecycle ----------------------------------------------------------------------------------
    def init(self) -> None:
        """Restore the latest readable checkpoint, if any, and publish the weights."""
        loaded = load_latest(self.ckpt_dir, map_location=self.device)
        if loaded is not None:
            state, path = loaded
            self.model.load_state_dict(state["model"])
            self.optimizer.load_state_dict(state["optimizer"])
            self.version, self.env_steps = int(state["version"]), int(state["env_steps"])
            self.best_return = float(state.get("best_return", -math.inf))
            if "hparams" in state:
                self.set_hparams(state["hparams"])
            log.info(
                "learner %d resumed from %s (version %d, %d env steps)",
                self.policy_id,
                path,
                self.version,
                self.env_steps,
            )
        self.params.publish(self.model, self.version)

    def state(self) -> dict[str, Any]:
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "version": self.version,
            "env_steps": self.env_steps,
            "best_return": self.best_return,
            "policy_id": self.policy_id,
            "hparams": dict(self.hparams),
        }

    def set_hparams(self, hparams: dict[str, float]) -> None:
        self.hparams = self.hparams | hparams
        self.cfg = dataclasses.replace(self.cfg, **self.hparams)

    def hparams_report(self) -> HyperparamsReport:
        return HyperparamsReport(self.policy_id, dict(self.hparams))

    # --- population-based training ------------------------------------------------------------------
    def apply_pbt(self) -> list[Any]:
        """Carry out the PBT messages received since the last call (between training iterations, in the thread
        that trains); returns the messages to send."""
        out: list[Any] = []
        while self.pbt_ops:
            msg = self.pbt_ops.popleft()
            if type(msg) is SetHyperparams:
                self.set_hparams(msg.hparams)
                log.info("learner %d: PBT set hyperparameters %s", self.policy_id, msg.hparams)
            elif type(msg) is CopyPolicy:
                path = self.ckpt_dir / f"pbt_snapshot_for_p{msg.target}.pth"
                save_snapshot(self.state(), path)
                out.append(LoadPolicy(msg.target, self.policy_id, str(path), msg.hparams))
            elif type(msg) is LoadPolicy:
                self.load_policy(msg)
        return out

    def load_policy(self, msg: LoadPolicy) -> None:
        """Become a copy of policy `msg.source` (weights, optimizer state, normalisers) with new hyperparameters.
        The version jumps past --max_policy_lag, so experience collected by the replaced weights is dropped."""
        state = load_checkpoint(Path(msg.path), map_location=self.device)
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
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

    def save(self) -> Path:
        self.last_save = time.monotonic()
        return save_checkpoint(self.ckpt_dir, self.state(), self.version, self.env_steps, self.cfg.keep_checkpoints)

    def maybe_save(self) -> None:
        if time.monotonic() - self.last_save >= self.cfg.save_every_sec:
            with self.timing.add_time("checkpoint"):
                self.save()
        if self.latest_return > self.best_return and self.version > 0:
            self.best_return = self.latest_return
            save_best(self.ckpt_dir, self.state(), self.version, self.env_steps, self.best_return)

    # --- messages -----------------------------------------------------------------------------------
    def handle(self, msg: Any) -> None:
        if type(msg) is TrajectoryReady:
            self.batcher.add(msg)
        elif type(msg) is ReturnSummary:
            self.latest_return = msg.return_mean
        elif type(msg) in (SetHyperparams, CopyPolicy, LoadPolicy):
            self.pbt_ops.append(msg)
        else:
            raise TypeError(f"learner {self.policy_id}: unexpected message {msg!r}")

    def next_batch(self) -> Batch | None:
        if not self.batcher.is_ready():
            return None
        with self.timing.add_time("batch"):
            batch = self.batcher.take(self.version, self.cfg.max_policy_lag)
        self.env_steps += batch.env_steps
        self.dropped += batch.dropped
        return batch

    # --- training -----------------------------------------------------------------------------------
    def train(self, batch: Batch) -> TrainReport:
        """One iteration: num_epochs passes of num_batches_per_epoch minibatches; publishes weights."""
        stats: dict[str, float] = {}
        if batch.tensors["rewards"].shape[0] > 0 and not self.cfg.sampler_only:
            began = time.monotonic()
            with self.timing.add_time("train"):
                stats = self._train_iteration(batch.tensors)
            stats["train_seconds"] = time.monotonic() - began
            self.version += 1
            with self.timing.add_time("publish"):
                self.params.publish(self.model, self.version)
        if batch.lag.numel():
            lag = batch.lag.float()
            stats |= {"policy_lag_min": lag.min().item(), "policy_lag_avg": lag.mean().item()}
            stats["policy_lag_max"] = lag.max().item()
        stats["dropped_trajectories"] = float(self.dropped)
        return TrainReport(self.policy_id, self.env_steps, self.version, stats)

    def _set_learning_rate(self) -> float:
        lr = self.cfg.learning_rate
        if self.cfg.lr_schedule == "linear_decay":
            lr *= max(1.0 - self.env_steps / self.cfg.train_for_env_steps, 0.0)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        return lr

    def _denormalize(self, values: Tensor) -> Tensor:
        rn = self.model.returns_normalizer
        return rn.denormalize(values) if rn is not None else values

    def _normalize_targets(self, targets: Tensor) -> Tensor:
        rn = self.model.returns_normalizer
        return rn.normalize(targets) if rn is not None else targets

    def _targets(self, b: dict[str, Tensor], values_n: Tensor, log_rhos: Tensor | None) -> tuple[Tensor, Tensor]:
        """Advantages and value targets [N, T] (raw reward units) from values_n [N, T + 1]."""
        cfg = self.cfg
        values = self._denormalize(values_n)
        rewards = b["rewards"]
        if cfg.value_bootstrap:
            # A time-limit truncation is not a death: add the discounted value of the state instead of
            # zero. V(s_t) stands in for V(s_{t+1}) because the post-step observation was replaced by reset.
            rewards = rewards + cfg.gamma * values[:, :-1] * b["truncated"]
        discounts = cfg.gamma * (1.0 - b["dones"])
        tm = lambda x: x.transpose(0, 1)  # noqa: E731 - [N, T] -> time-major [T, N]
        if log_rhos is not None:
            vs, adv = vtrace(
                tm(log_rhos),
                tm(discounts),
                tm(rewards),
                tm(values[:, :-1]),
                values[:, -1],
                cfg.vtrace_rho,
                cfg.vtrace_c,
            )
            return tm(adv), tm(vs)
        adv, returns = gae(tm(discounts), tm(rewards), tm(values[:, :-1]), values[:, -1], cfg.gae_lambda)
        return tm(adv), tm(returns)

    def _all_values(self, b: dict[str, Tensor], idx: Tensor) -> Tensor:
        """Normalised values [n, T + 1] of trajectories `idx` under the current weights, no grad."""
        with torch.no_grad():
            T = b["rewards"].shape[1]
            feats = self.model.features(
                b["obs"][idx, :T], b["rnn_states"][idx, :T], b["dones"][idx], self.derived.recurrence
            )
            values = self.model.value_head(feats).squeeze(-1)
            boot = self.model.value_of(b["obs"][idx, T], b["rnn_states"][idx, T])
        return torch.cat([values, boot.unsqueeze(1)], dim=1)

    def _minibatches(self, N: int, T: int) -> list[tuple[Tensor, Tensor | None]]:
        """(trajectory indices, step mask) per minibatch. Whole trajectories when targets or memory need
        them (V-trace, RNN); otherwise single steps shuffled over the whole batch."""
        k = self.derived.minibatches_per_epoch
        if self.cfg.with_vtrace or self.cfg.use_rnn:
            return [(idx, None) for idx in torch.randperm(N, device=self.device).chunk(k)]
        flat = torch.randperm(N * T, device=self.device).chunk(k)
        return [(idx, None) for idx in flat]

    def _train_iteration(self, b: dict[str, Tensor]) -> dict[str, float]:
        cfg = self.cfg
        N, T = b["rewards"].shape
        lr = self._set_learning_rate()
        if self.model.obs_normalizer is not None:
            _update_finite(self.model.obs_normalizer, b["obs"][:, :T])
        is_per_step = not (cfg.with_vtrace or cfg.use_rnn)
        adv_all = ret_all = None
        if not cfg.with_vtrace:
            # GAE: targets once per iteration, from the weights before this iteration's updates.
            adv_all, ret_all = self._targets(b, self._all_values(b, torch.arange(N, device=self.device)), None)
            if self.model.returns_normalizer is not None:
                _update_finite(self.model.returns_normalizer, ret_all)
        sums: dict[str, float] = {}
        count = 0
        for _ in range(cfg.num_epochs):
            for idx, _mask in self._minibatches(N, T):
                if is_per_step:
                    out = self._per_step_loss(b, idx, adv_all, ret_all)
                else:
                    out = self._trajectory_loss(b, idx, adv_all, ret_all)
                loss, mb_stats = out
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                max_norm = cfg.max_grad_norm if cfg.max_grad_norm > 0 else float("inf")
                grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), max_norm)
                if not (torch.isfinite(loss) and torch.isfinite(grad_norm)):
                    self._on_nonfinite(loss, grad_norm)
                    continue
                self.nonfinite_in_a_row = 0
                mb_stats["grad_norm"] = float(grad_norm)
                self.optimizer.step()
                for key, value in mb_stats.items():
                    sums[key] = sums.get(key, 0.0) + float(value)
                count += 1
        stats = {key: value / max(count, 1) for key, value in sums.items()}
        stats["learning_rate"] = lr
        stats["nonfinite_updates"] = float(self.nonfinite_updates)
        return stats

    def _on_nonfinite(self, loss: Tensor, grad_norm: Tensor) -> None:
        """Skip an update whose loss or gradients are NaN or inf; too many in a row end the run, leaving the
        last checkpoint (saved from finite weights) as it is."""
        self.optimizer.zero_grad(set_to_none=True)
        self.nonfinite_updates += 1
        self.nonfinite_in_a_row += 1
        log.warning(
            "learner %d: skipped an update with loss %s, gradient norm %s (%d in a row)",
            self.policy_id,
            float(loss),
            float(grad_norm),
            self.nonfinite_in_a_row,
        )
        if self.nonfinite_in_a_row >= MAX_NONFINITE_IN_A_ROW:
            raise FloatingPointError(
                f"learner {self.policy_id}: {self.nonfinite_in_a_row} updates in a row with NaN/inf loss or "
                f"gradients; stopping with the last good checkpoint (lower --learning_rate or check the env's rewards)"
            )

    def _loss(
        self,
        log_probs: Tensor,
        old_log_probs: Tensor,
        entropy: Tensor,
        values: Tensor,
        old_values: Tensor,
        adv: Tensor,
        targets: Tensor,
    ) -> tuple[Tensor, dict[str, float]]:
        cfg = self.cfg
        if cfg.normalize_advantage and adv.numel() > 1:
            adv = (adv - adv.mean()) / (adv.std() + 1e-8)
        p_loss, p_stats = policy_loss(log_probs, old_log_probs, adv, cfg.ppo_clip_ratio)
        v_loss = value_loss(values, old_values, self._normalize_targets(targets), cfg.ppo_clip_value or None)
        e_loss = entropy_loss(entropy)
        loss = p_loss + cfg.value_loss_coeff * v_loss + cfg.exploration_loss_coeff * e_loss
        stats = {"policy_loss": p_loss.item(), "value_loss": v_loss.item(), "entropy": -e_loss.item()}
        stats |= {"kl": p_stats["approx_kl"].item(), "clip_fraction": p_stats["clip_fraction"].item()}
        return loss, stats

    def _per_step_loss(
        self, b: dict[str, Tensor], idx: Tensor, adv_all: Tensor, ret_all: Tensor
    ) -> tuple[Tensor, dict[str, float]]:
        """Minibatch of single steps (feed-forward model, GAE): idx indexes the flattened [N * T]."""
        T = b["rewards"].shape[1]
        n, t = idx // T, idx % T
        out = self.model.evaluate(
            b["obs"][n, t].unsqueeze(1),
            b["actions"][n, t].unsqueeze(1),
            b["rnn_states"][n, t].unsqueeze(1),
            b["dones"][n, t].unsqueeze(1),
            1,
        )
        return self._loss(
            out.log_probs[:, 0],
            b["log_probs"][n, t],
            out.entropy[:, 0],
            out.values[:, 0],
            b["values"][n, t],
            adv_all[n, t],
            ret_all[n, t],
        )

    def _trajectory_loss(
        self, b: dict[str, Tensor], idx: Tensor, adv_all: Tensor | None, ret_all: Tensor | None
    ) -> tuple[Tensor, dict[str, float]]:
        """Minibatch of whole trajectories (V-trace and/or RNN)."""
        T = b["rewards"].shape[1]
        obs, rnn = b["obs"][idx], b["rnn_states"][idx]
        out = self.model.evaluate(obs[:, :T], b["actions"][idx], rnn[:, :T], b["dones"][idx], self.derived.recurrence)
        old_log_probs = b["log_probs"][idx]
        if adv_all is None:
            sub = {k: b[k][idx] for k in ("rewards", "dones", "truncated")}
            with torch.no_grad():
                boot = self.model.value_of(obs[:, T], rnn[:, T])
            values_n = torch.cat([out.values.detach(), boot.unsqueeze(1)], dim=1)
            adv, targets = self._targets(sub, values_n, out.log_probs.detach() - old_log_probs)
            if self.model.returns_normalizer is not None:
                _update_finite(self.model.returns_normalizer, targets)
        else:
            adv, targets = adv_all[idx], ret_all[idx]
        return self._loss(out.log_probs, old_log_probs, out.entropy, out.values, b["values"][idx], adv, targets)


def _update_finite(normalizer: Any, x: Tensor) -> None:
    """Running statistics take only finite data: one NaN would poison them (and every later value) for good."""
    if bool(torch.isfinite(x).all()):
        normalizer.update(x)


# --- process shell ------------------------------------------------------------------------------------
class TrainerThread:
    """Trains on the batches the receiving thread hands over (one waits at most), carries out PBT requests
    between iterations, and leaves every message to send in `outbox`; a failure is kept for the main thread."""

    def __init__(self, learner: Learner) -> None:
        self.learner = learner
        self.batches: queue.Queue[Batch | None] = queue.Queue(maxsize=1)
        self.outbox: queue.Queue[list[Any]] = queue.Queue()
        self.failure: list[BaseException] = []
        self.thread = threading.Thread(target=self._run, name="trainer", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        learner = self.learner
        try:
            while True:
                try:
                    batch = self.batches.get(timeout=0.1)
                except queue.Empty:
                    batch = False  # no batch yet: still carry out PBT requests
                if batch is None:
                    return
                if learner.pbt_ops:
                    self.outbox.put(learner.apply_pbt())
                if batch is False:
                    continue
                report = learner.train(batch)
                learner.maybe_save()
                # Sync mode: slots go back only now, so that every new sample is taken with new weights.
                if not learner.cfg.async_rl:
                    learner.batcher.mark_released(batch.releases)
                self.outbox.put([report] + ([] if learner.cfg.async_rl else batch.releases))
        except BaseException as exc:  # surfaced in the main thread, which reports and exits
            self.failure.append(exc)
            self.outbox.put([])

    def hand_over(self, batch: Batch, queues: Queues) -> None:
        """Give the trainer `batch`, sending its messages while waiting for room."""
        while self.thread.is_alive():
            try:
                self.batches.put(batch, timeout=0.05)
                return
            except queue.Full:
                self.drain(queues)

    def drain(self, queues: Queues) -> None:
        while True:
            try:
                send(self.outbox.get_nowait(), queues)
            except queue.Empty:
                return

    def stop(self, queues: Queues) -> None:
        while self.thread.is_alive():  # a dead trainer would never make room for the None
            try:
                self.batches.put(None, timeout=0.1)
                break
            except queue.Full:
                continue
        self.thread.join(timeout=60)
        self.drain(queues)


def learner_loop(learner: Learner, queues: Queues) -> None:
    """Main thread: receive messages, copy batches; trainer thread: train on them."""
    inbox = queues.learner_queues[learner.policy_id]
    send([learner.hparams_report()], queues)
    trainer = TrainerThread(learner)
    stopping = False
    try:
        while not stopping:
            try:
                msgs = inbox.get_many(timeout=0.1)
            except Exception:  # queue.Empty on timeout
                msgs = []
            for msg in msgs:
                if type(msg) is Stop:
                    stopping = True
                else:
                    learner.handle(msg)
            while not stopping and trainer.thread.is_alive() and (batch := learner.next_batch()) is not None:
                if learner.cfg.async_rl:
                    learner.batcher.mark_released(batch.releases)
                    send(batch.releases, queues)
                trainer.hand_over(batch, queues)
            trainer.drain(queues)
            if trainer.failure:
                raise trainer.failure[0]
    finally:
        trainer.stop(queues)
    if trainer.failure:
        raise trainer.failure[0]
    learner.save()


def run_learner(
    cfg: Cfg,
    derived: Derived,
    policy_id: int,
    buffers: dict[str, torch.Tensor],
    params: ParamStore,
    spaces: tuple[gym.Space, gym.Space],
    ckpt_dir: Path,
    device: str,
    control: dict[str, torch.Tensor],
    queues: Queues,
) -> None:
    """Process entry point of the learner of policy `policy_id`."""

    def body() -> None:
        torch.manual_seed(cfg.seed + policy_id)
        learner = Learner(cfg, derived, policy_id, buffers, params, spaces, ckpt_dir, device, control)
        learner.init()
        try:
            learner_loop(learner, queues)
        finally:
            log.info("learner %d profile: %s", policy_id, learner.timing.profile())

    component_main(cfg, f"learner_{policy_id}", queues, body)
