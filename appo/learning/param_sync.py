"""Shared weights and a version counter: the learner publishes, policy workers pull.

One shared-memory CPU copy of the model's state_dict per policy (parameters and buffers, normalisers
included) and an int64 version. Publishing copies under a lock and then bumps the version; a policy
worker compares versions without the lock (a cheap read every batch) and copies under the lock only
when the version moved, so it never sees half of an update."""

from __future__ import annotations

import multiprocessing
from typing import Any

import torch
from torch import nn


class ParamStore:
    def __init__(self, template: nn.Module, ctx: Any = multiprocessing) -> None:
        self.state = {k: v.detach().cpu().clone().share_memory_() for k, v in template.state_dict().items()}
        self.version = torch.zeros(1, dtype=torch.int64).share_memory_()
        self.lock = ctx.Lock()

    def publish(self, model: nn.Module, version: int) -> None:
        """Copy the learner's weights in and announce `version`."""
        with self.lock, torch.no_grad():
            for name, value in model.state_dict().items():
                self.state[name].copy_(value.detach(), non_blocking=False)
            self.version[0] = version

    def current_version(self) -> int:
        return int(self.version[0])

    def pull(self, model: nn.Module) -> int:
        """Load the published weights into `model` (on any device); returns their version."""
        with self.lock, torch.no_grad():
            version = int(self.version[0])
            for name, value in model.state_dict().items():
                value.copy_(self.state[name])
        return version
