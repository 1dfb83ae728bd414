"""Shared weights and a version counter: the learner publishes, policy workers (or actor workers acting
for their own envs) pull.

One shared-memory CPU copy of the model's state_dict per policy (parameters and buffers, normalisers
included) and an int64 version. The copy is guarded by a sequence counter, not a lock (a seqlock): the one
writer, the learner, makes the counter odd, copies, then makes it even again; a reader copies and keeps the
copy only if the counter was even and unchanged around it, else it copies again. Readers never block the
writer, and a reader killed mid-copy (actor workers are killed and restarted) leaves nothing held.

A reader decides whether to copy by the counter too, not by the version: it remembers the counter it last copied
at (`current_stamp`, a cheap read every batch) and copies again when it moved. The version is what the weights
are called (it goes into every sample as the policy version), and the same version can be published twice with
other weights: a PBT copy refills a self-play pool with its source's snapshots (appo/learning/snapshot_pool.py),
which both learners took at the same multiples of --selfplay_snapshot_every. Every publish moves the counter, so
a reader never keeps acting with weights that were replaced under an equal version.

The counter alone is enough only where stores become visible to other cores in program order (x86). Python has
no memory fence, and on weakly ordered CPUs (aarch64: Graviton, Grace) a reader may see the counter even and
unchanged around a copy that holds some of a later publish's bytes. So the writer also stores a crc32 of the
weights it copied (after them), and a reader keeps its copy only when the crc32 of the copy equals the stored
one: a torn copy fails that (but for a 2^-32 chance) and is taken again. The check costs a crc32 of the state
per publish and per pull (benchmarks/param_checksum.py: tens of microseconds for the MuJoCo preset's model)."""

from __future__ import annotations

import time

import torch
from torch import nn

from appo.protocol.shared_views import ParamViews, SharedArray, state_checksum


class ParamStore:
    def __init__(self, template: nn.Module) -> None:
        self.state = {k: v.detach().cpu().clone().share_memory_() for k, v in template.state_dict().items()}
        self.version = torch.zeros(1, dtype=torch.int64).share_memory_()
        self.sequence = torch.zeros(1, dtype=torch.int64).share_memory_()  # odd while a publish is copying
        self.checksum = torch.zeros(1, dtype=torch.int64).share_memory_()  # crc32 of the published state
        self.checksum[0] = self._crc()
        # A policy's store carries its self-play snapshot stores (appo/learning/snapshot_pool.py), which its
        # learner fills; empty without --selfplay_pool.
        self.snapshots: list[ParamStore] = []

    def publish(self, model: nn.Module, version: int) -> None:
        """Copy the learner's weights in and announce `version` (one writer per store: its learner)."""
        with torch.no_grad():
            self.sequence += 1
            for name, value in model.state_dict().items():
                self.state[name].copy_(value.detach(), non_blocking=False)
            self.checksum[0] = self._crc()
            self.version[0] = version
            self.sequence += 1

    def clear(self) -> None:
        """Mark the store empty (version 0: an empty self-play slot), as a publish does, so readers see it."""
        self.sequence += 1
        self.version[0] = 0
        self.sequence += 1

    def _crc(self) -> int:
        return state_checksum(t.numpy() for t in self.state.values())

    def numpy_views(self) -> ParamViews:
        """This store for a process without torch (appo/protocol/shared_views.py): the same shared memory."""
        return ParamViews(
            {k: SharedArray(v) for k, v in self.state.items()},
            SharedArray(self.version),
            SharedArray(self.sequence),
            SharedArray(self.checksum),
        )

    def pull_state(self, patience: float = 5.0) -> tuple[int, dict]:
        """As ParamViews.pull_state: (version, the published state dict as numpy copies)."""
        return self.numpy_views_here().pull_state(patience)

    def numpy_views_here(self) -> ParamViews:
        """ParamViews over this process's own tensors (no pickling involved)."""
        return ParamViews(
            {k: v.numpy() for k, v in self.state.items()},
            self.version.numpy(),
            self.sequence.numpy(),
            self.checksum.numpy(),
        )

    def current_version(self) -> int:
        # Read through a numpy view of the shared counter: a policy worker asks every store at each step (an
        # episodic run has dozens of weight sets), and torch indexing costs microseconds a call.
        view = self.__dict__.get("_version_view")
        if view is None:
            view = self._version_view = self.version.numpy()
        return int(view[0])

    def current_stamp(self) -> int:
        """The publish stamp: the sequence counter, which every publish (and `clear`) moves. A reader that read it
        before its last copy and reads another now has a publish to copy, whatever its version (module docstring).
        Read through a numpy view, as `current_version`."""
        view = self.__dict__.get("_stamp_view")
        if view is None:
            view = self._stamp_view = self.sequence.numpy()
        return int(view[0])

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        for view in ("_version_view", "_stamp_view"):  # a numpy view would be pickled as a copy, not the counter
            state.pop(view, None)
        return state

    def pull(self, model: nn.Module, patience: float = 5.0) -> int:
        """Load the published weights into `model` (on any device); returns their version. Copies again when
        a publish overlapped the copy (or the copy fails the checksum), so the model never holds half of an update.
        A publish that stays unfinished for `patience` seconds (its learner died mid-copy) raises instead of waiting
        forever."""
        deadline = time.monotonic() + patience
        with torch.no_grad():
            while True:
                before = int(self.sequence[0])
                if before % 2 == 0:
                    version = int(self.version[0])
                    copy = {name: value.clone() for name, value in self.state.items()}
                    whole = state_checksum(t.numpy() for t in copy.values()) == int(self.checksum[0])
                    if int(self.sequence[0]) == before and whole:
                        for name, value in model.state_dict().items():
                            value.copy_(copy[name])
                        return version
                if time.monotonic() > deadline:
                    raise RuntimeError(f"published weights unfinished for {patience:g} s (their learner died?)")
                time.sleep(0.0001)  # the learner is mid-publish: a few microseconds more
