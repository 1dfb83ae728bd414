"""Actor worker: a process that owns `num_envs_per_worker` envs in `worker_num_splits` EnvRunners.

`ActorWorker` is the component (plain object, driven by the process loop below or by --serial_mode);
`run_actor_worker` is the thin process shell: start up, loop over the inbox, shut down.

With --actor_inference (feed-forward and recurrent models), the worker holds its own inference components
and answers its splits' InferenceRequests itself: one numpy pass over all its envs per round, no queue hop and
no policy worker process. Requests and replies are the same messages either way, and so are the writes (rnn
states included); they just never leave.

The process never imports torch: the driver hands it the shared tensors as numpy arrays and the weight stores as
ParamViews (appo/protocol/shared_views.py), and it acts with numpy passes built from the model's description
(appo/sampling/inference.py NumpyInference). Serial mode hands `ActorWorker` torch policy-worker components
instead; the component does not care which.
"""

from __future__ import annotations

import random
import time
from functools import partial
from typing import Any

import numpy as np

from appo.config.cfg import Cfg
from appo.config.derive import Derived
from appo.envs import make_run_env, make_run_vector
from appo.envs.meta.wrappers import task_bucket
from appo.protocol.messages import ActionsReady, EpisodeReport, InferenceRequest, SlotsReleased, Stop
from appo.protocol.processes import component_main
from appo.protocol.shared_views import ParamViews, numpy_views
from appo.protocol.wiring import Queues, actor_inbox, send
from appo.sampling.agent_split import AgentEnvRunner
from appo.sampling.env_runner import EnvRunner
from appo.sampling.inference import Inference, make_numpy_inference
from appo.sampling.split_envs import FinishedEpisode
from appo.sampling.vector_split import VectorEnvRunner
from appo.utils.seeding import incarnation_seed
from appo.utils.timing import Timing

EPISODE_REPORT_SECONDS = 1.0


def trial_summary(trial: dict) -> dict:
    """What the driver reads of a finished trial: its episodes' returns and its task's bucket label, not the task
    itself (a tabular MDP's task is its tables: kilobytes a trial, which once overflowed the driver's queue)."""
    return {"returns": [float(r) for r in trial["returns"]], "bucket": task_bucket(trial["task"])}


def by_agent(episodes: list[FinishedEpisode]) -> dict[str, list[float]]:
    """Multi-agent envs: the returns of finished episodes by the name of the agent that played them."""
    out: dict[str, list[float]] = {}
    for e in episodes:
        if e.agent is not None:
            out.setdefault(e.agent, []).append(e.episode_return)
    return out


def acting_stream(worker_idx: int, incarnation: int, resumed_steps: int = 0) -> int:
    """The random stream of an actor worker acting for its own envs: apart from policy worker processes' streams,
    from its predecessors' (a restarted worker draws new action noise) and, in a resumed run (`resumed_steps`: the
    env steps its checkpoints hold), from the earlier sessions' (a resume does not replay their action noise)."""
    return incarnation_seed(1000 + worker_idx, incarnation, resumed_steps)


REQUEST_TIMEOUT = 10.0  # seconds before an unanswered InferenceRequest is sent again


class ActorWorker:
    def __init__(
        self,
        cfg: Cfg,
        derived: Derived,
        worker_idx: int,
        buffers: dict[str, Any],
        control: dict[str, Any] | None = None,
        incarnation: int = 0,
        inference: list[Inference] | None = None,
    ) -> None:
        """`buffers`, `control`: shared tensors or numpy arrays over them. `inference`: components to answer this
        worker's requests in-process (or None)."""
        self.cfg, self.derived, self.worker_idx, self.incarnation = cfg, derived, worker_idx, incarnation
        self.inference = {w.policy_id: w for w in inference or []}
        self.pending: list[InferenceRequest] = []  # requests to answer here at the next act_locally
        views = numpy_views(buffers)
        self.control = numpy_views(control) if control is not None else None
        self.starting()  # imported and running: a sign of life for the supervisor
        env_fn = partial(self._build_env, cfg)
        vector_fn = make_run_vector(cfg)
        runner = EnvRunner if vector_fn is None else partial(VectorEnvRunner, vector_fn=vector_fn)
        if derived.multi_agent:  # games of several agents, a row each
            runner = partial(AgentEnvRunner, agents_per_env=derived.agents_per_env)
        self.runners = [
            runner(cfg, derived, worker_idx, split, views, env_fn, self.control, incarnation)
            for split in range(cfg.worker_num_splits)
        ]
        self.timing = Timing()
        self.last_report = time.monotonic()
        self.last_stepping = 0.0
        self.handlers = {ActionsReady: self._on_actions, SlotsReleased: self._on_slots_released}

    def starting(self) -> None:
        """Start-up progress for the supervisor (appo/backends/supervision.py): the heartbeat, negative."""
        if self.control is not None:
            self.control["heartbeats"][self.worker_idx] = -time.time()

    def _build_env(self, cfg: Cfg, env_idx: int) -> Any:
        env = make_run_env(cfg, env_idx, training=True)
        self.starting()
        return env

    def seed(self, seed: int) -> int:
        """`seed` for this worker's start: its own after a restart and in a resumed run (appo/utils/seeding.py)."""
        return incarnation_seed(seed, self.incarnation, self.derived.resumed_steps)

    def init(self) -> list[Any]:
        msgs: list[Any] = []
        for runner in self.runners:
            seed = self.cfg.seed * 100_003 + (self.worker_idx * self.cfg.worker_num_splits + runner.split_idx) * 1009
            msgs += runner.init(self.seed(seed))  # env seeds, noise, policy draws
        if self.cfg.decorrelate_experience_max_seconds > 0:
            seconds = random.Random(self.seed(self.cfg.seed + self.worker_idx)).uniform(
                0, self.cfg.decorrelate_experience_max_seconds
            )
            for runner in self.runners:
                runner.decorrelate(seconds / len(self.runners))
        return msgs

    def handle(self, msg: Any) -> list[Any]:
        handler = self.handlers.get(type(msg))
        if handler is None:
            raise TypeError(f"actor worker {self.worker_idx}: unexpected message {msg!r}")
        return handler(msg)

    def _on_actions(self, msg: ActionsReady) -> list[Any]:
        with self.timing.add_time("env_step"):
            return self.runners[msg.split_idx].on_actions(msg)

    def _on_slots_released(self, msg: SlotsReleased) -> list[Any]:
        return self.runners[msg.split_idx].on_slots_released(msg.group_idx, msg.policy_id, msg.incarnation)

    def keep_local(self, msgs: list[Any]) -> list[Any]:
        """Hold the InferenceRequests this worker answers itself; returns the messages to send."""
        if not self.inference:
            return msgs
        out = []
        for msg in msgs:
            (self.pending if type(msg) is InferenceRequest else out).append(msg)
        return out

    def act_locally(self) -> list[Any]:
        """Answer the held requests (one pass per policy-worker component) and step the splits they name;
        returns the messages to send (their next requests are held again)."""
        if not self.pending:
            return []
        requests, self.pending = self.pending, []
        with self.timing.add_time("inference"):
            replies = [
                reply
                for pid, worker in self.inference.items()
                for reply in worker.infer([r for r in requests if r.policy_id == pid])
            ]
        out: list[Any] = []
        for reply in replies:
            out += self.handle(reply)
        return self.keep_local(out)

    def reports(self, force: bool = False) -> list[Any]:
        """Finished episodes since the last report, at most once a second (fewer, larger messages)."""
        now = time.monotonic()
        if not force and now - self.last_report < EPISODE_REPORT_SECONDS:
            return []
        # Utilisation: the share of wall time since the last report spent stepping envs (and acting for them).
        stepping = self.timing.totals["env_step"] + self.timing.totals["inference"]
        busy = (stepping - self.last_stepping) / max(now - self.last_report, 1e-9)
        self.last_report, self.last_stepping = now, stepping
        by_policy: dict[int, list[FinishedEpisode]] = {}
        for runner in self.runners:
            for episode in runner.pop_finished():
                by_policy.setdefault(episode.policy, []).append(episode)
        if not by_policy:  # still report utilisation
            by_policy[0] = []
        return [
            EpisodeReport(
                pid,
                self.worker_idx,
                [e.episode_return for e in eps],
                [e.length for e in eps],
                [trial_summary(e.trial) for e in eps if e.trial and "returns" in e.trial],
                busy,
                [e.episode_return for e in eps if e.vs_pool],
                [e.true_objective for e in eps if e.true_objective is not None],
                by_agent(eps),
            )
            for pid, eps in by_policy.items()
        ]

    def heartbeat(self) -> list[Any]:
        """Stamp the heartbeat the driver watches; re-send requests whose reply is overdue (a policy worker
        that died takes its pending requests with it)."""
        now = time.monotonic()
        if self.control is not None:
            self.control["heartbeats"][self.worker_idx] = time.time()
        return [m for runner in self.runners for m in runner.resend_if_stale(now, REQUEST_TIMEOUT)]

    def close(self) -> None:
        for runner in self.runners:
            runner.close()


def actor_worker_loop(worker: ActorWorker, queues: Queues) -> None:
    inbox = actor_inbox(queues, worker.worker_idx)
    # The first heartbeat comes once the envs are built and reset: until then --worker_start_timeout governs
    # (building many heavy envs on a busy machine can take longer than --worker_stuck_timeout).
    send(worker.keep_local(worker.init()), queues)
    worker.heartbeat()
    while True:
        with worker.timing.add_time("wait"):
            try:
                # With requests of its own to answer, the worker only looks whether anything came in.
                msgs = inbox.get_many(block=not worker.pending, timeout=0.5)
            except Exception:  # faster_fifo raises queue.Empty on timeout
                msgs = []
        out: list[Any] = []
        for msg in msgs:
            if type(msg) is Stop:
                send(worker.reports(force=True), queues)
                return
            out += worker.handle(msg)
        out += worker.act_locally()
        out += worker.reports()
        out += worker.heartbeat()
        send(worker.keep_local(out), queues)


def run_actor_worker(
    cfg: Cfg,
    derived: Derived,
    worker_idx: int,
    buffers: dict[str, np.ndarray],
    control: dict[str, np.ndarray],
    incarnation: int,
    queues: Queues,
    params: list[ParamViews] | None = None,
    description: dict[str, Any] | None = None,
) -> None:
    """Process entry point of actor worker `worker_idx` (its `incarnation`-th start); its arguments as
    appo/protocol/shared_views.py for_numpy_process makes them. Given every policy's `params` and the model's
    `description`, it acts for its own envs (numpy, on the CPU)."""

    def body() -> None:
        inference = None
        if params is not None:
            stream = acting_stream(worker_idx, incarnation, derived.resumed_steps)
            inference = make_numpy_inference(cfg, buffers, params, description, control, stream)
        worker = ActorWorker(cfg, derived, worker_idx, buffers, control, incarnation, inference)
        try:
            actor_worker_loop(worker, queues)
        finally:
            worker.close()
            from appo.utils.logging import log

            log.info("actor worker %d profile: %s", worker_idx, worker.timing.profile())
            for w in worker.inference.values():
                log.info("actor worker %d inference for policy %d: %s", worker_idx, w.policy_id, w.timing.profile())

    cpu = worker_idx if cfg.set_workers_cpu_affinity else None
    component_main(cfg, f"actor_worker_{worker_idx}", queues, body, cpu=cpu)
