"""Policy worker: batched inference for one policy. Drains every pending InferenceRequest, gathers the
observations of all those splits from the shared trajectory tensors, runs one forward pass on the
device, and scatters actions, log-probs, values, rnn states and the weights version back into the same
slots; then answers each split with ActionsReady. New weights are pulled whenever the learner's
version moved.

`PolicyWorker` is the component; `run_policy_worker` the process shell.
"""

from __future__ import annotations

import time
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from appo.buffers import numpy_views
from appo.cfg import Cfg, Derived
from appo.learning.param_sync import ParamStore
from appo.messages import ActionsReady, InferenceRequest, Stop
from appo.model import make_model
from appo.processes import component_main
from appo.wiring import Queues, policy_queue, send
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
        self.cfg, self.policy_id, self.params, self.device = cfg, policy_id, params, device
        self.np_buf = numpy_views(buffers)
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
        buf = self.np_buf
        # A request covers consecutive slots at one time index (plain slices), or some of them when a split's
        # envs run several policies (an index array).
        spans = [(_slots(r), r.t) for r in requests]
        with self.timing.add_time("gather"):
            obs = np.concatenate([buf["obs"][s, t] for s, t in spans]) if len(spans) > 1 else buf["obs"][spans[0]]
            rnn = np.concatenate([buf["rnn_states"][s, t] for s, t in spans])
        with self.timing.add_time("forward"), torch.inference_mode():
            out = self.model.act(torch.from_numpy(obs).to(self.device), torch.from_numpy(rnn).to(self.device))
            actions, log_probs = out.actions.cpu().numpy(), out.log_probs.cpu().numpy()
            values = out.values.cpu().numpy()
            rnn_out = out.rnn_states.cpu().numpy() if self.cfg.use_rnn else None
        with self.timing.add_time("scatter"):
            start = 0
            for (s, t), r in zip(spans, requests, strict=True):
                end = start + r.num_envs
                buf["actions"][s, t] = actions[start:end]
                buf["log_probs"][s, t] = log_probs[start:end]
                buf["values"][s, t] = values[start:end]
                buf["policy_versions"][s, t] = self.version
                if rnn_out is not None:
                    buf["rnn_states"][s, t + 1] = rnn_out[start:end]
                start = end
        self.samples += start
        pid = self.policy_id
        return [ActionsReady(r.worker_idx, r.split_idx, r.first_slot, r.t, r.incarnation, pid) for r in requests]


def _slots(r: InferenceRequest) -> slice | np.ndarray:
    if r.envs is None:
        return slice(r.first_slot, r.first_slot + r.num_envs)
    return r.first_slot + np.asarray(r.envs)


def policy_worker_loop(worker: PolicyWorker, queues: Queues, heartbeat: Any = None) -> None:
    """Serve requests until Stop. `heartbeat` (a one-element shared array) is stamped every loop, so that a
    worker blocked for good inside its queue (a writer killed in the critical section) is found and replaced."""
    while True:
        if heartbeat is not None:
            heartbeat[0] = time.time()
        queue = policy_queue(queues, worker.policy_id)  # moves on when a sibling was restarted
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
    control: dict[str, torch.Tensor],
    queues: Queues,
) -> None:
    """Process entry point of policy worker `index` of policy `policy_id`."""

    def body() -> None:
        worker = PolicyWorker(cfg, derived, policy_id, buffers, params, spaces, device)
        slot = policy_id * cfg.policy_workers_per_policy + index
        heartbeat = control["policy_heartbeats"].numpy()[slot : slot + 1]
        try:
            policy_worker_loop(worker, queues, heartbeat)
        finally:
            from utils.logging import log

            log.info("policy worker %d_%d profile: %s", policy_id, index, worker.timing.profile())

    component_main(cfg, f"policy_worker_{policy_id}_{index}", queues, body)
