"""One named logger ("appo") for every process: the process name in each line, console plus the run's
log.txt. Child processes append to the same file; each line is one write, so lines do not interleave."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

LOGGER_NAME = "appo"
_FORMAT = "[%(asctime)s][%(processName)s] %(levelname)s %(message)s"

log = logging.getLogger(LOGGER_NAME)


def init_logging(level: str = "info", log_file: Path | None = None, process_name: str | None = None) -> None:
    """Configure the "appo" logger for this process (idempotent: old handlers are replaced)."""
    import multiprocessing

    if process_name:
        multiprocessing.current_process().name = process_name
    log.setLevel(level.upper())
    log.propagate = False
    for handler in list(log.handlers):
        log.removeHandler(handler)
        handler.close()
    formatter = logging.Formatter(_FORMAT, datefmt="%H:%M:%S")
    console = logging.StreamHandler(sys.stderr)
    console.setFormatter(formatter)
    log.addHandler(console)
    if log_file is not None:
        log_file.parent.mkdir(parents=True, exist_ok=True)
        file_handler = logging.FileHandler(log_file, mode="a")
        file_handler.setFormatter(formatter)
        log.addHandler(file_handler)


def first_line(exc: BaseException, limit: int = 0) -> str:
    """An exception as one line for a log or an error message: the first non-empty line of its message (the
    exception's type name when it has none), cut to `limit` characters when `limit` > 0 (Ray's run to pages)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    text = lines[0] if lines else type(exc).__name__
    return text[:limit] if limit > 0 else text
