"""Policy worker: batched inference for one policy. Drains every pending InferenceRequest, gathers the
observations of all those splits from the shared trajectory tensors, runs one forward pass on the
device, and scatters actions, log-probs, values, rnn states and the weights version back into the same
slots; then answers each split with ActionsReady. New weights are pulled whenever the learner's
version moved.

`PolicyWorker` is the component; `run_policy_worker` the process shell.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import torch

from appo.cfg import Cfg, Derived
from appo.learning.param_sync import ParamStore
from appo.messages import ActionsReady, InferenceRequest, Stop
from appo.model import make_model
from appo.processes import component_main
from appo.wiring import Queues, send
from utils.timing import Timing


class PolicyWorker:
    def __init__(
        self,
        cfg: Cfg,
        derived: Derived,
        policy_id: int,
        buffers: dict[str, torch.Tensor],
        params: ParamStore,
        spaces: tuple[gym.Space, gym.Space],
        device: str,
    ) -> None:
        self.cfg, self.policy_id, self.buf, self.params, self.device = cfg, policy_id, buffers, params, device
        self.model = make_model(cfg, *spaces).to(device).eval()
        self.version = -1
        self.timing = Timing()
        self.samples = 0

    def maybe_pull_weights(self) -> None:
        if self.params.current_version() != self.version:
            with self.timing.add_time("weight_sync"):
                self.version = self.params.pull(self.model)

    def infer(self, requests: list[InferenceRequest]) -> list[Any]:
        """One forward pass for every request; returns the ActionsReady replies."""
        if not requests:
            return []
        self.maybe_pull_weights()
        buf = self.buf
        with self.timing.add_time("gather"):
            index = [(torch.arange(r.first_slot, r.first_slot + r.num_envs), r.t) for r in requests]
            slots = torch.cat([s for s, _ in index])
            ts = torch.cat([torch.full((len(s),), t, dtype=torch.int64) for s, t in index])
            obs = buf["obs"][slots, ts].to(self.device, non_blocking=True)
            rnn = buf["rnn_states"][slots, ts].to(self.device, non_blocking=True)
        with self.timing.add_time("forward"):
            out = self.model.act(obs, rnn)
        with self.timing.add_time("scatter"):
            buf["actions"][slots, ts] = out.actions.to("cpu", buf["actions"].dtype)
            buf["log_probs"][slots, ts] = out.log_probs.cpu()
            buf["values"][slots, ts] = out.values.cpu()
            buf["policy_versions"][slots, ts] = self.version
            if self.cfg.use_rnn:
                buf["rnn_states"][slots, ts + 1] = out.rnn_states.cpu()
        self.samples += len(slots)
        return [ActionsReady(r.worker_idx, r.split_idx) for r in requests]


def policy_worker_loop(worker: PolicyWorker, queues: Queues) -> None:
    queue = queues.policy_queues[worker.policy_id]
    while True:
        with worker.timing.add_time("wait"):
            try:
                msgs = queue.get_many(timeout=0.5)
            except Exception:  # queue.Empty on timeout
                msgs = []
        requests = [m for m in msgs if type(m) is InferenceRequest]
        send(worker.infer(requests), queues)
        if any(type(m) is Stop for m in msgs):
            return


def run_policy_worker(
    cfg: Cfg,
    derived: Derived,
    policy_id: int,
    index: int,
    buffers: dict[str, torch.Tensor],
    params: ParamStore,
    spaces: tuple[gym.Space, gym.Space],
    device: str,
    queues: Queues,
) -> None:
    """Process entry point of policy worker `index` of policy `policy_id`."""

    def body() -> None:
        worker = PolicyWorker(cfg, derived, policy_id, buffers, params, spaces, device)
        try:
            policy_worker_loop(worker, queues)
        finally:
            from utils.logging import log

            log.info("policy worker %d_%d profile: %s", policy_id, index, worker.timing.profile())

    component_main(cfg, f"policy_worker_{policy_id}_{index}", queues, body)
