"""Policy worker: batched inference for one policy. Drains every pending InferenceRequest, gathers the
observations of all those splits from the shared trajectory tensors, runs one forward pass on the
device, and scatters actions, log-probs, values, rnn states and the weights version back into the same
slots; then answers each split with ActionsReady (appo/sampling/inference.py). New weights are pulled whenever
the learner publishes (its store's publish stamp moved).

`PolicyWorker` is the component; `run_policy_worker` the process shell.
"""

from __future__ import annotations

import time
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from appo.config.cfg import Cfg
from appo.config.derive import Derived
from appo.models.device import to_device, to_numpy
from appo.models.numpy_twins import make_numpy_policy
from appo.models.registry import make_model
from appo.numpy_policy.ops import NumpyPass
from appo.protocol.messages import InferenceRequest, Stop
from appo.protocol.param_sync import ParamStore
from appo.protocol.processes import component_main
from appo.protocol.wiring import Queues, policy_queue, send
from appo.sampling.inference import Inference, actors_act, inference_layout, pass_seed
from appo.utils.seeding import incarnation_seed

__all__ = ["PolicyWorker", "actors_act", "make_policy_workers", "run_policy_worker"]


class PolicyWorker(Inference):
    """Serves policy `policy_id`, or every policy when `params` holds one store per policy (shared policy
    workers: a request then covers all the envs of a split, and `slot_policy` says which policy each runs). Torch
    models on `device`, pulled from the stores; on the CPU with --numpy_inference they act through their numpy
    passes (appo/sampling/inference.py has the gather, act and scatter)."""

    def __init__(
        self,
        cfg: Cfg,
        derived: Derived,
        policy_id: int,
        buffers: dict[str, torch.Tensor],
        params: ParamStore | list[ParamStore],
        spaces: tuple[gym.Space, gym.Space],
        device: str,
        control: dict[str, torch.Tensor] | None = None,
        stream: int = 0,
    ) -> None:
        """`stream` tells apart the random streams of several instances (policy workers, acting actors); a resumed
        run's (derived.resumed_steps > 0) are its own, so a resume does not replay the earlier sessions' noise."""
        stream = incarnation_seed(stream, 0, derived.resumed_steps)
        self.device = device
        stores = params if isinstance(params, list) else [params]
        self.models = [make_model(cfg, *spaces).to(device).eval() for _ in stores]
        fast: list[NumpyPass | None] = [
            make_numpy_policy(m, device, pass_seed(cfg, policy_id, k, stream)) if cfg.numpy_inference else None
            for k, m in enumerate(self.models)
        ]
        super().__init__(cfg, policy_id, buffers, stores, isinstance(params, list), fast, control, stream)

    def pull(self, k: int) -> int:
        version = self.stores[k].pull(self.models[k])
        if self.fast[k] is not None:
            self.fast[k].load(self.models[k])
        return version

    def act(self, k: int, obs: np.ndarray, rnn: np.ndarray | None) -> tuple[Any, ...]:
        if self.fast[k] is not None:
            return super().act(k, obs, rnn)
        with torch.inference_mode():
            out = self.models[k].act(to_device(obs, self.device), to_device(rnn, self.device))
        rnn_out = to_numpy(out.rnn_states) if self.cfg.use_rnn else None
        return to_numpy(out.actions), to_numpy(out.log_probs), to_numpy(out.values), rnn_out


def make_policy_workers(
    cfg: Cfg,
    derived: Derived,
    buffers: dict[str, torch.Tensor],
    params: list[ParamStore],
    spaces: tuple[gym.Space, gym.Space],
    device: str,
    control: dict[str, torch.Tensor] | None,
    stream: int = 0,
) -> list[PolicyWorker]:
    """The policy-worker components that answer every request of a run: one serving all policies (shared
    policy workers) or every weight set (more `params` than policies: an episodic run's), else one per policy
    (appo/sampling/inference.py inference_layout)."""
    return [
        PolicyWorker(
            cfg, derived, p, buffers, params if every else params[p], spaces, device, control if every else None, stream
        )
        for p, every in inference_layout(cfg, len(params))
    ]


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
    params: ParamStore | list[ParamStore],
    spaces: tuple[gym.Space, gym.Space],
    device: str,
    control: dict[str, torch.Tensor],
    queues: Queues,
) -> None:
    """Process entry point of policy worker `index` of policy `policy_id` (of every policy, given all stores)."""

    def body() -> None:
        # Actions sampled by torch (no --numpy_inference) draw from this process's global generator: a stream of
        # this worker's own, and of this session's in a resumed run.
        torch.manual_seed(pass_seed(cfg, policy_id, 0, incarnation_seed(index, 0, derived.resumed_steps)))
        worker = PolicyWorker(cfg, derived, policy_id, buffers, params, spaces, device, control, stream=index)
        slot = policy_id * cfg.policy_workers_per_policy + index
        heartbeat = control["policy_heartbeats"].numpy()[slot : slot + 1]
        try:
            policy_worker_loop(worker, queues, heartbeat)
        finally:
            from appo.utils.logging import log

            log.info("policy worker %d_%d profile: %s", policy_id, index, worker.timing.profile())

    component_main(cfg, f"policy_worker_{policy_id}_{index}", queues, body)
