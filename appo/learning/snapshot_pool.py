"""Self-play against past selves: each policy's pool of frozen snapshots (--selfplay_pool of them), the opponents
its agents meet in a share of multi-agent games (--selfplay_pool_prob; appo/sampling/agent_split.py draws them).

Every snapshot is a weight set of its own: a ParamStore beside the policies' stores, which the inference components
serve like any weight set (the run's weight sets are the policies' stores, then policy 0's snapshots, policy 1's,
...). The policy's learner fills its pool: every --selfplay_snapshot_every versions it publishes its weights into
a slot (--selfplay_pool_keep: the oldest's, or, to keep the pool spaced over the whole run, the one whose snapshot
leaves the smallest gap between its neighbours), and writes the snapshot's version into the control table
`snapshot_versions` [policies, pool] (0: an empty slot), which is how actor workers know which snapshots they may
draw. The pool is part of the learner's checkpoint, so a resumed run meets the same past selves."""

from __future__ import annotations

from typing import Any

from torch import nn

from appo.config.cfg import Cfg
from appo.protocol.param_sync import ParamStore


def attach_snapshots(cfg: Cfg, stores: list[ParamStore], template: nn.Module) -> list[ParamStore]:
    """Make the run's snapshot stores (--selfplay_pool per policy; none without a pool), hand each policy's store
    its own (`ParamStore.snapshots`, which its learner fills) and return them all, policy by policy."""
    k = cfg.selfplay_pool
    snapshots = [ParamStore(template) for _ in range(len(stores) * k)]
    for p, store in enumerate(stores):
        store.snapshots = snapshots[p * k : (p + 1) * k]
    return snapshots


class SnapshotPool:
    """One policy's pool, kept by its learner (see the module docstring)."""

    def __init__(self, cfg: Cfg, policy_id: int, stores: list[ParamStore], versions: Any) -> None:
        self.every, self.keep = cfg.selfplay_snapshot_every, cfg.selfplay_pool_keep
        self.stores, self.policy_id = stores, policy_id
        self.versions = versions  # the control table's row of this policy (shared), or None
        self.added = 0  # snapshots taken so far; the next goes to slot added % pool size

    def after_publish(self, model: nn.Module, version: int) -> None:
        """Take a snapshot when `version` is a multiple of --selfplay_snapshot_every."""
        if not self.stores or version <= 0 or version % self.every:
            return
        slot = self._slot(version)
        self.stores[slot].publish(model, version)
        if self.versions is not None:
            self.versions[self.policy_id, slot] = version
        self.added += 1

    def _slot(self, version: int) -> int:
        """The slot the snapshot of `version` goes to: an empty one while there is one; then the oldest (recent), or
        (spread) of the snapshots after the first, the one whose neighbours (the next being `version` for the newest)
        lie closest together, the newer on a tie, which keeps the pool's versions spread over the whole run with
        gaps that double as it goes on."""
        if self.keep == "recent" or self.added < len(self.stores) or len(self.stores) == 1:
            return self.added % len(self.stores)
        held = sorted((store.current_version(), slot) for slot, store in enumerate(self.stores))
        versions = [v for v, _ in held] + [version]
        gaps = [(versions[j + 1] - versions[j - 1], -j) for j in range(1, len(held))]
        return held[-min(gaps)[1]][1]

    def state_dict(self) -> dict[str, Any]:
        """The pool for a checkpoint: each slot's weights and version (None, 0: empty). Read from the stores, whose
        one writer is this learner."""
        versions = [store.current_version() for store in self.stores]
        states = [
            {name: t.clone() for name, t in store.state.items()} if version else None
            for store, version in zip(self.stores, versions, strict=True)
        ]
        return {"added": self.added, "states": states, "versions": versions}

    def load_state_dict(self, state: dict[str, Any], template: nn.Module) -> int:
        """Refill the stores (and the control table) from a checkpoint's pool; `template` a model to load into.
        A slot empty in the saved pool is emptied here (a PBT copy takes the source's pool whole, not mixed with
        the target's own past selves). Returns the snapshots restored."""
        filled = 0
        self.added = int(state.get("added", 0))
        saved_slots = list(zip(state.get("states", []), state.get("versions", []), strict=True))
        for slot, store in enumerate(self.stores):
            saved, version = saved_slots[slot] if slot < len(saved_slots) else (None, 0)
            if saved is None:
                store.version[0] = 0  # empty: actor workers draw no snapshot whose table entry is 0
                version = 0
            else:
                template.load_state_dict(saved)
                store.publish(template, int(version))
                filled += 1
            if self.versions is not None:
                self.versions[self.policy_id, slot] = int(version)
        return filled
