"""start_process forks every child with SIGINT and SIGTERM blocked, the first one of a fresh interpreter included:
multiprocessing launches its resource tracker on a spawn context's first start and unblocks both signals in the
calling thread afterwards, which once let the run's first child start with them unblocked and die of a Ctrl-C to
the process group while its interpreter was still starting."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

# Its own ROOT, not conftest's: the probe's children import this module, and conftest would bring pytest and its
# SIGINT handling into them.
ROOT = Path(__file__).resolve().parents[2]

STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM}


def exit_with_the_inherited_mask() -> None:
    """A child's body: exit 0 when both stop signals are blocked (the mask it was forked with), 3 otherwise."""
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, set())
    sys.exit(0 if STOP_SIGNALS <= blocked else 3)


# A fresh interpreter, so that no resource tracker runs yet: three children in turn, each must find both signals
# blocked; the parent's own mask must be what it was before (nothing blocked).
PROBE = """
import signal, sys
from appo.protocol.processes import spawn_context, start_process
from tests.unit.test_start_process import exit_with_the_inherited_mask

codes = []
for i in range(3):
    child = start_process(spawn_context(), exit_with_the_inherited_mask, (), f"probe_{i}")
    child.join(120)
    codes.append(child.exitcode)
print("children", codes, "parent blocks", sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, set())))
"""


def test_every_child_starts_with_the_stop_signals_blocked_the_first_included():
    out = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "children [0, 0, 0] parent blocks []" in out.stdout, out.stdout + out.stderr
