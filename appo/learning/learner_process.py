"""The learner's process shell: the main thread receives messages and copies the next batch out of shared
memory while a background thread trains on the previous one (appo/learning/learner.py does the work).

With --learner_world_size=G, `run_learner` is rank 0 of the policy's G ranks and `run_learner_rank` each other
one: its main thread copies the shards rank 0 sends (appo/learning/shards.py) and its trainer thread trains on
them in step with rank 0's (appo/learning/distributed.py). Rank 0 forwards Stop after its last shard, so that
every rank trains the same iterations; a rank that dies takes the others down (a collective with a dead peer
raises; a rank waiting outside one watches the others' pids), and the driver stops the run."""

from __future__ import annotations

import gc
import queue
import threading
from pathlib import Path
from typing import Any

import gymnasium as gym
import torch

from appo.config.cfg import Cfg
from appo.config.derive import Derived, learner_threads
from appo.learning.batcher import Batch
from appo.learning.distributed import RankLink, join_group, leave_group
from appo.learning.learner import Learner
from appo.learning.shards import take_shard
from appo.protocol.messages import ShardReady, Stop
from appo.protocol.param_sync import ParamStore
from appo.protocol.processes import component_main, limit_threads
from appo.protocol.wiring import Queues, send
from appo.utils.logging import log


class TrainerThread:
    """Trains on the batches the receiving thread hands over (one waits at most), carries out PBT requests
    between iterations, and leaves every message to send in `outbox` (rank 0's only: the other learner ranks
    report nothing); a failure is kept for the main thread."""

    def __init__(self, learner: Learner) -> None:
        self.learner = learner
        self.batches: queue.Queue[Batch | None] = queue.Queue(maxsize=1)
        self.outbox: queue.Queue[list[Any]] = queue.Queue()
        self.failure: list[BaseException] = []
        self.thread = threading.Thread(target=self._run, name="trainer", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        learner = self.learner
        # This thread's torch ops, alone, run on --learner_threads threads (the main thread was limited to one, so
        # its copies never start an OpenMP pool): with a second pool in the process, libgomp counts more threads
        # than cores on a small machine and stops spinning between parallel regions, and two threads then trained
        # SAC slower than one (74 against 83 updates/s; one pool: 134).
        torch.set_num_threads(learner_threads(learner.cfg))
        try:
            while True:
                try:
                    batch = self.batches.get(timeout=0.1)
                except queue.Empty:
                    batch = False  # no batch yet: still carry out PBT requests
                if batch is None:
                    return
                if learner.ranks.is_distributed:
                    if batch is False:
                        continue
                    self._put(learner.apply_pbt())  # every rank, once before each iteration (a collective)
                elif learner.pbt_ops:
                    self._put(learner.apply_pbt())
                if batch is False:
                    continue
                report = learner.train(batch)
                learner.maybe_save()
                # Sync mode: slots go back only now, so that every new sample is taken with new weights (with
                # --collect_ahead, the next iteration's were filled meanwhile with the weights just trained on).
                if not learner.cfg.async_rl:
                    learner.batcher.mark_released(batch.releases)
                self._put([report] + ([] if learner.cfg.async_rl else batch.releases))
        except BaseException as exc:  # surfaced in the main thread, which reports and exits
            self.failure.append(exc)
            self.outbox.put([])

    def _put(self, msgs: list[Any]) -> None:
        if self.learner.is_lead:
            self.outbox.put(msgs)

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

    def stop(self, queues: Queues, drop_queued: bool = False) -> None:
        """End the thread after the iteration it trains now. `drop_queued`: a batch handed over but not started is
        not trained (the run is over; after a signal the learner's stop budget must hold the iteration under way
        and the final save, not a second iteration: a conv learner on a CPU takes seconds for one)."""
        if drop_queued:
            try:
                self.batches.get_nowait()
            except queue.Empty:
                pass
        while self.thread.is_alive():  # a dead trainer would never make room for the None
            try:
                self.batches.put(None, timeout=0.1)
                break
            except queue.Full:
                continue
        self.thread.join(timeout=60)
        self.drain(queues)


def receive(inbox: Any, timeout: float = 0.1) -> list[Any]:
    """What arrived in `inbox` within `timeout` seconds (nothing: an empty list)."""
    try:
        return inbox.get_many(timeout=timeout)
    except Exception:  # queue.Empty on timeout
        return []


def learner_loop(learner: Learner, queues: Queues, link: RankLink | None = None) -> None:
    """Main thread: receive messages, copy batches; trainer thread: train on them. `link`: this is rank 0 of
    several learner ranks."""
    inbox = queues.learner_queues[learner.policy_id]
    send([learner.hparams_report()], queues)
    trainer = TrainerThread(learner)
    stopping = False
    try:
        while not stopping:
            msgs = receive(inbox)
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
                raise explained(trainer.failure[0], learner, link)
    finally:
        trainer.stop(queues, drop_queued=link is None)  # (ranks train every shard rank 0 sent them: in step)
    if trainer.failure:
        raise explained(trainer.failure[0], learner, link)
    if not learner.ranks.is_distributed:
        # PBT messages that came after the last iteration: the final checkpoint holds what the driver decided
        # (a CopyPolicy still hands its snapshot on; a target that has stopped already never loads it).
        send(learner.apply_pbt(), queues)
    learner.save()
    if link is not None:
        for rank_inbox in link.inboxes[1:]:
            rank_inbox.put(Stop("learner rank 0"))  # after every shard: each rank trains what rank 0 trained
        learner.check_in_step("the end")


def follower_loop(learner: Learner, link: RankLink, queues: Queues) -> None:
    """Learner rank r > 0. Main thread: copy each shard rank 0 sends; trainer thread: train on them in step with
    rank 0 (and the other ranks) until rank 0's Stop, which follows its last shard."""
    rank = learner.ranks.rank
    inbox = link.inboxes[rank]
    trainer = TrainerThread(learner)
    stopping = False
    try:
        while not stopping:
            msgs = receive(inbox)
            for msg in msgs:
                if type(msg) is Stop:
                    stopping = True
                    break
                assert type(msg) is ShardReady and msg.rank == rank, f"learner rank {rank}: unexpected {msg!r}"
                with learner.timing.add_time("batch"):
                    batch = take_shard(learner.batcher, link, rank, msg)
                learner.env_steps += batch.env_steps
                trainer.hand_over(batch._replace(env_steps_total=learner.env_steps), queues)
            if trainer.failure:
                raise explained(trainer.failure[0], learner, link)
            if not stopping and not link.is_alive(0):
                raise RuntimeError(f"learner {learner.policy_id}: rank 0 died")
    finally:
        trainer.stop(queues)
    if trainer.failure:
        raise explained(trainer.failure[0], learner, link)
    learner.check_in_step("the end")


def explained(failure: BaseException, learner: Learner, link: RankLink | None) -> BaseException:
    """A trainer's failure; when a collective failed because a rank died, one that names the dead rank."""
    dead = link.dead_ranks() if link is not None else []
    if not dead:
        return failure
    error = RuntimeError(f"learner {learner.policy_id}: rank {dead[0]} died ({type(failure).__name__} in a collective)")
    error.__cause__ = failure
    return error


class Unpublished:
    """The weight store of learner ranks > 0: rank 0 publishes (the ranks hold the same weights) and fills the
    self-play pool."""

    snapshots: list[Any] = []

    def publish(self, model: Any, version: int) -> None:
        pass


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
    link: RankLink | None = None,
    replay_factory: Any = None,
) -> None:
    """Process entry point of the learner of policy `policy_id` (rank 0 of its ranks when `link` is given; with
    `replay_factory`, the backend's: its replay lives outside this process, e.g. in Ray replay shards)."""

    def train() -> None:
        torch.manual_seed(cfg.seed + policy_id)
        _threads = limit_threads(1)  # noqa: F841 - the main thread's; the trainer thread sets --learner_threads
        ranks = join_group(link, 0, device) if link is not None else None
        args = (cfg, derived, policy_id, buffers, params, spaces, ckpt_dir, device, control, ranks, link)
        learner = Learner(*args, replay_factory=replay_factory)
        try:
            learner.init()
            learner_loop(learner, queues, link)
        finally:
            log.info("learner %d profile: %s", policy_id, learner.timing.profile())
            leave_group()
            if replay_factory is not None:
                replay_factory.release()

    component_main(cfg, f"learner_{policy_id}", queues, lambda: free_after(train))


def run_learner_rank(
    cfg: Cfg,
    derived: Derived,
    policy_id: int,
    rank: int,
    buffers: dict[str, torch.Tensor],
    spaces: tuple[gym.Space, gym.Space],
    ckpt_dir: Path,
    device: str,
    control: dict[str, torch.Tensor],
    queues: Queues,
    link: RankLink,
) -> None:
    """Process entry point of learner rank `rank` > 0 of policy `policy_id`."""

    def train() -> None:
        torch.manual_seed(cfg.seed + policy_id)  # the same stream as rank 0: the same minibatch shuffles
        _threads = limit_threads(1)  # noqa: F841 - the main thread's; the trainer thread sets --learner_threads
        ranks = join_group(link, rank, device)
        params: Any = Unpublished()
        learner = Learner(cfg, derived, policy_id, buffers, params, spaces, ckpt_dir, device, control, ranks)
        try:
            learner.init()
            follower_loop(learner, link, queues)
        finally:
            log.info("learner %d rank %d profile: %s", policy_id, rank, learner.timing.profile())
            leave_group()

    component_main(cfg, rank_name(policy_id, rank), queues, lambda: free_after(train))


def free_after(train: Any) -> None:
    """Run `train`, then free what its frame held (learner, DDP model, process group and, on rank 0, the group's
    TCPStore) while the interpreter is still whole: left to interpreter shutdown, gloo's threads sometimes
    abort the process (SIGABRT, "terminate called without an active exception", seen in CI)."""
    try:
        train()
    finally:
        gc.collect()


def rank_name(policy_id: int, rank: int) -> str:
    """The process name of learner rank `rank` of policy `policy_id` (rank 0 is plain learner_<policy>)."""
    return f"learner_{policy_id}" if rank == 0 else f"learner_{policy_id}_rank{rank}"
