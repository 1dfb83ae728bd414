"""Joining a Ray cluster, or starting a private instance on loopback, with the driver's signal handlers kept."""

from __future__ import annotations

import os
import signal

from appo.config.cfg import Cfg


def connect(cfg: Cfg, namespace: str | None = None) -> bool:
    """Join the cluster at --ray_address, or start a private instance on loopback; returns whether Ray was
    started here (and so is to be stopped at exit)."""
    return connect_ray(cfg.ray_address, cfg.ray_object_store_mb, cfg.log_level == "debug", namespace)


def connect_ray(
    address: str, object_store_mb: int = 0, log_to_driver: bool = False, namespace: str | None = None
) -> bool:
    """Join the cluster at `address` (auto, HEAD:6379), or with an empty one start a private instance on
    loopback with every CPU of this machine; returns whether Ray was started here (stop it at exit). Named
    actors are found within `namespace` (None: Ray's anonymous namespace of this job)."""
    if not address:
        # Before Ray is imported: its processes then listen on (and advertise) 127.0.0.1 only, not every
        # interface (ray._private.services.get_node_ip_address; Ray's cluster services trust their network).
        os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    import ray

    # ray.init installs its own SIGTERM handler (it aborts the process); the caller's must stay: the driver
    # stops every component in order and saves (appo/driver/runner.py), a sweep stops its runs.
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    quiet = {"logging_level": "warning", "log_to_driver": log_to_driver, "namespace": namespace}
    try:
        if address:
            ray.init(address=address, **quiet)
            return False
        extra = {"object_store_memory": object_store_mb * 2**20} if object_store_mb > 0 else {}
        # address="local": a new instance even when this machine runs another (a `ray start`, a test's cluster);
        # without it ray.init would join that one, and then refuse num_cpus.
        ray.init(address="local", num_cpus=os.cpu_count(), include_dashboard=False, **quiet, **extra)
        return True
    finally:
        for s, handler in handlers.items():
            if handler is not None:
                signal.signal(s, handler)
