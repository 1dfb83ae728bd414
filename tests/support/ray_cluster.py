"""Ray test helpers: a skip mark when Ray is not installed, Ray's own multi-node simulation as a fixture
(ray.cluster_utils.Cluster: a head and a worker node on loopback), and Ray's processes on this machine: all of them,
or those of one run (`RayWatch`)."""

from __future__ import annotations

import importlib.util
import time
import uuid
from collections.abc import Iterator

import psutil
import pytest

# Not imported here: Ray reads RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER (loopback addresses) when first imported.
_skip_without_ray = pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="needs pip install -e '.[ray]'")


# A Ray test's marks: skipped without Ray, and in pytest-xdist's group "ray": Ray tests run one after another in one
# worker, as each checks that no Ray process is left on the machine (`ray_processes`) when it ends.
RAY_MARKS = (pytest.mark.xdist_group("ray"), _skip_without_ray)


def needs_ray(test):
    """A Ray test (RAY_MARKS); `pytest.param(..., marks=RAY_MARKS)` marks one parameter of a test so."""
    return RAY_MARKS[0](RAY_MARKS[1](test))


OBJECT_STORE = 100 * 2**20


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple]:
    """A head (2 CPUs, room for both actors once the other node is gone) and a worker node (1 CPU) on loopback."""
    monkeypatch.setenv("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # loopback addresses (read when ray is imported)
    from ray.cluster_utils import Cluster

    head_args = {"num_cpus": 2, "object_store_memory": OBJECT_STORE, "include_dashboard": False}
    c = Cluster(initialize_head=True, head_node_args=head_args)
    try:
        worker = c.add_node(num_cpus=1, object_store_memory=OBJECT_STORE)
        yield c, worker
    finally:
        c.shutdown()


def ray_processes() -> set[int]:
    """Ray's own processes on this machine (GCS, raylet, workers and actors, agents)."""
    names = ("gcs_server", "raylet", "ray::", "default_worker.py", "dashboard.py", "log_monitor.py", "monitor.py")
    out = set()
    for p in psutil.process_iter(["pid", "cmdline"]):
        try:
            cmdline = " ".join(p.info["cmdline"] or [])
        except psutil.Error:
            continue
        if "site-packages/ray" in cmdline or any(cmdline.startswith(n) for n in names):
            out.add(p.info["pid"])
    return out


TAG = "APPO_TEST_RAY_TAG"


class RayWatch:
    """The Ray processes one run starts, told from any other test's or program's on the machine: the run is started
    with `env` (a tag of its own in its environment, which Ray's GCS, raylet and workers inherit); `look` notes each
    Ray process holding the tag and its descendants (Ray's agents, children of the raylet, get an environment of
    their own), so look while the run's Ray is up; `alive` is what of them still runs."""

    def __init__(self) -> None:
        self.tag = uuid.uuid4().hex
        self.env = {TAG: self.tag}
        self.seen: set[psutil.Process] = set()

    def look(self) -> set[psutil.Process]:
        for pid in ray_processes():
            try:
                p = psutil.Process(pid)
                if p.environ().get(TAG) == self.tag:
                    self.seen |= {p, *p.children(recursive=True)}
            except psutil.Error:
                continue
        return self.seen

    def alive(self) -> list[str]:
        """Pid, age and command line of each of the run's Ray processes still running."""
        self.look()
        out = []
        for p in sorted(self.seen, key=lambda p: p.pid):
            try:
                if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                    out.append(f"{p.pid} ({time.time() - p.create_time():.0f} s old) {' '.join(p.cmdline())[:100]}")
            except psutil.Error:
                continue
        return out
