"""Self-play against past selves: each policy's pool of frozen snapshots (--selfplay_pool of them), the opponents
its agents meet in a share of multi-agent games (--selfplay_pool_prob; appo/sampling/agent_split.py draws them).

Every snapshot is a weight set of its own: a ParamStore beside the policies' stores, which the inference components
serve like any weight set (the run's weight sets are the policies' stores, then policy 0's snapshots, policy 1's,
...). The policy's learner fills its pool: every --selfplay_snapshot_every versions it publishes its weights into
a slot (--selfplay_pool_keep: the oldest's, or, to keep the pool spaced over the whole run, the one whose snapshot
leaves the smallest gap between its neighbours), and writes the snapshot's version into the control table
`snapshot_versions` [policies, pool] (0: an empty slot), which is how actor workers know which snapshots they may
draw. The pool is part of the learner's checkpoint, so a resumed run meets the same past selves.

Which snapshot is older is told by the pool's own order of arrival (`arrivals`: the number of snapshots the pool
had taken when it took each one), not by versions. A PBT replacement takes its source's pool whole, arrivals and
versions included: from then on the pool is the source's lineage, and its next snapshot arrives after the
source's last. The versions stay the source's (the names the weights had when they were taken), while the
replaced learner keeps counting its own (appo/learning/learner.py load_policy): the copied versions can lie above
the learner's, so ordering by version would make the newest copied snapshot look older than the next one taken,
and the spread keep would drop it first. The versions are the control table's marks of filled slots and nothing
more; the inference components tell a refilled slot by its store's publish stamp, not by its version
(appo/protocol/param_sync.py), so a slot refilled under the version it held before acts with the new weights."""

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
        self.added = 0  # snapshots taken so far (the number the next one arrives as)
        self.arrivals = [-1] * len(stores)  # per slot, the number its snapshot arrived as (-1: empty)

    def after_publish(self, model: nn.Module, version: int) -> None:
        """Take a snapshot when `version` is a multiple of --selfplay_snapshot_every."""
        if not self.stores or version <= 0 or version % self.every:
            return
        slot = self._slot()
        self.stores[slot].publish(model, version)
        self.arrivals[slot] = self.added
        if self.versions is not None:
            self.versions[self.policy_id, slot] = version
        self.added += 1

    def _slot(self) -> int:
        """The slot the next snapshot goes to: an empty one while there is one; then the oldest (recent), or (spread)
        of the snapshots after the first, the one whose neighbours in order of arrival (the next being the new one
        for the newest) lie closest together, the newer on a tie, which keeps the pool spread over the whole run with
        gaps that double as it goes on. Between PBT copies snapshots arrive every --selfplay_snapshot_every versions,
        so gaps in arrivals are gaps in versions over that factor."""
        held = sorted((arrival, slot) for slot, arrival in enumerate(self.arrivals))  # empty slots (-1) first
        if self.keep == "recent" or held[0][0] < 0 or len(held) == 1:
            return held[0][1]
        order = [arrival for arrival, _ in held] + [self.added]
        gaps = [(order[j + 1] - order[j - 1], -j) for j in range(1, len(held))]
        return held[-min(gaps)[1]][1]

    def state_dict(self) -> dict[str, Any]:
        """The pool for a checkpoint: each slot's weights, version and arrival (None, 0, -1: empty). Read from the
        stores, whose one writer is this learner."""
        versions = [store.current_version() for store in self.stores]
        states = [
            {name: t.clone() for name, t in store.state.items()} if version else None
            for store, version in zip(self.stores, versions, strict=True)
        ]
        arrivals = [arrival if version else -1 for arrival, version in zip(self.arrivals, versions, strict=True)]
        return {"added": self.added, "states": states, "versions": versions, "arrivals": arrivals}

    def load_state_dict(self, state: dict[str, Any], template: nn.Module) -> int:
        """Refill the stores (and the control table) from a checkpoint's pool; `template` a model to load into.
        A slot empty in the saved pool is emptied here (a PBT copy takes the source's pool whole, not mixed with
        the target's own past selves). Returns the snapshots restored."""
        filled = 0
        self.added = int(state.get("added", 0))
        saved_slots = list(zip(state.get("states", []), state.get("versions", []), strict=True))
        arrivals = state.get("arrivals") or saved_arrivals(state, self.added, self.every)
        for slot, store in enumerate(self.stores):
            saved, version = saved_slots[slot] if slot < len(saved_slots) else (None, 0)
            if saved is None:
                store.clear()  # empty: actor workers draw no snapshot whose table entry is 0
                version, self.arrivals[slot] = 0, -1
            else:
                template.load_state_dict(saved)
                store.publish(template, int(version))
                self.arrivals[slot] = int(arrivals[slot])
                filled += 1
            if self.versions is not None:
                self.versions[self.policy_id, slot] = int(version)
        return filled


def saved_arrivals(state: dict[str, Any], added: int, every: int) -> list[int]:
    """The arrivals of a pool saved without them (an older checkpoint). A pool that only ever took its own snapshots
    took the one of version v as its (v / every)-th: that, where it fits before `added`; otherwise (a pool a PBT copy
    mixed up) its filled slots in order of version, the newest having arrived last."""
    saved_slots = zip(state.get("states", []), state.get("versions", []), strict=True)
    versions = [int(v) if saved is not None else 0 for saved, v in saved_slots]
    filled = [slot for slot, v in enumerate(versions) if v > 0]
    arrivals = [versions[slot] // every - 1 if slot in filled else -1 for slot in range(len(versions))]
    if all(0 <= arrivals[slot] < added for slot in filled):
        return arrivals
    for rank, slot in enumerate(sorted(filled, key=lambda slot: versions[slot])):
        arrivals[slot] = added - len(filled) + rank
    return arrivals
