"""Every backend in the table answers every call of the Backend protocol that the driver's loop makes, and
--serial_mode and --backend pick the class from the table."""

from __future__ import annotations

import importlib
import inspect

import pytest

from appo.backends.base import BACKENDS, Backend, backend_class
from appo.config.cfg import Cfg

CALLS = [name for name, _ in inspect.getmembers(Backend) if not name.startswith("_")] + ["uses_watchdog"]


@pytest.mark.parametrize("name", sorted(BACKENDS))
def test_backend_answers_the_protocol(name: str) -> None:
    module, _, attr = BACKENDS[name].partition(":")
    cls = getattr(importlib.import_module(module), attr)
    missing = [call for call in CALLS if not hasattr(cls, call)]
    assert not missing, f"{cls.__qualname__} lacks {missing}"


def test_flags_pick_the_backend() -> None:
    assert backend_class(Cfg(serial_mode=True, backend="ray")).__name__ == "SerialBackend"
    assert backend_class(Cfg(backend="local")).__name__ == "LocalBackend"
    assert backend_class(Cfg(backend="ray")).__name__ == "RayBackend"


def test_every_backend_in_the_table_is_a_valid_flag_value() -> None:
    """verify_backend (appo/config/verify.py, below the backends' layer) names the --backend values itself: they
    and the table must agree."""
    from appo.config.verify import verify_backend

    for name in set(BACKENDS) - {"serial"}:  # --serial_mode picks "serial"
        assert not [e for e in verify_backend(Cfg(backend=name)) if "must be" in e], name
    assert verify_backend(Cfg(backend="nope")) == ["--backend=nope: must be local or ray"]
