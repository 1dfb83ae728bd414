"""`flag()`: how every hyperparameter is declared, once, with its default and a one-line help. Shared by the
engine's flag groups (appo/cfg.py) and each algorithm's own group (appo/algorithms/*_flags.py), and free of
torch so that parsing flags stays cheap."""

from __future__ import annotations

from dataclasses import field
from typing import Any


def flag(default: Any, help: str) -> Any:  # noqa: A002 - "help" reads best next to each field
    if isinstance(default, list):
        return field(default_factory=lambda: list(default), metadata={"help": help})
    return field(default=default, metadata={"help": help})
