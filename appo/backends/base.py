"""What a backend is: the calls the driver's loop (appo/driver/runner.py `drive`) makes of it, and the table of
backends by name. A backend places the components `plan(cfg)` asks for (appo/backends/plan.py), moves messages
between them and the driver, and stops them:

- `LocalBackend` (appo/backends/local.py): one process per component on this machine, shared-memory tensors and
  queues; a Supervisor restarts what can be restarted;
- `SerialBackend` (appo/backends/serial.py, --serial_mode): the same component objects driven round-robin in the
  driver process;
- `RayBackend` (appo/backends/ray/backend.py, --backend=ray): LocalBackend with actor workers as Ray actors, whose
  trajectories reach the driver as arrays through Ray's object store.

A new backend is a class with these calls and a row in BACKENDS (and its name among --backend's values).
"""

from __future__ import annotations

import importlib
from typing import Any, Protocol

from appo.config.cfg import Cfg


class Backend(Protocol):
    """Built as `cls(cfg, derived, exp_dir, spaces, device, buffers, control)`: the run's cfg and derived values, its
    folder, the env's (observation, action) spaces, the learners' device, and the shared trajectory and control
    tensors the runner allocated."""

    uses_watchdog: bool  # a driver blocked for long is killed with every child (not in a debugger's process)

    @property
    def restarts(self) -> int:
        """Components restarted so far (stats/worker_restarts)."""
        ...

    def start(self) -> None:
        """Start every component of the plan."""

    def poll(self, timeout: float) -> list[Any]:
        """The messages for the driver that arrived within `timeout` seconds."""
        ...

    def send(self, msgs: list[Any]) -> None:
        """Deliver the driver's messages (return summaries, evaluation requests, PBT operations)."""

    def check(self) -> list[str]:
        """One line per component that failed for good (the run then stops with an error)."""
        ...

    def stop(self, driver: Any) -> None:
        """Stop every component in order (actors, policy workers, learners that save, the evaluator), joining each."""

    def kill_all(self) -> None:
        """Kill every process at once (a second Ctrl-C, the watchdog): nothing left behind."""


# --backend (and --serial_mode) -> "module:Class"; imported only when chosen (a local run never imports Ray).
BACKENDS = {
    "local": "appo.backends.local:LocalBackend",
    "serial": "appo.backends.serial:SerialBackend",
    "ray": "appo.backends.ray.backend:RayBackend",
}


def backend_class(cfg: Cfg) -> type[Backend]:
    module, _, name = BACKENDS["serial" if cfg.serial_mode else cfg.backend].partition(":")
    return getattr(importlib.import_module(module), name)
