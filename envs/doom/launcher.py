"""Doom games that die with the process that started them.

vizdoom runs each game as a child process of its own (the `vizdoom` binary), which outlives a SIGKILLed parent
and ignores SIGTERM; a game that dies uncleanly leaves its shared memory and message queues in /dev/shm
(ViZDoomSM<id>, ViZDoomMQCtr<id>, ViZDoomMQDoom<id>). So appo points vizdoom at a launcher of its own
(`DoomGame.set_vizdoom_path`): a small Python script that

- starts the real binary as its child, in a process group of its own (a Ctrl-C at the terminal reaches the
  engine's components, which close their games, not the games themselves) and with SIGKILL as that child's
  parent-death signal, so the game cannot outlive the launcher;
- watches the process that started it (named in APPO_VIZDOOM_PARENT; its parent's pid, checked every 0.2 s:
  the kernel's parent-death signal follows the starting thread, not the process, and a thread pool may start a
  game from a thread that ends before the process does), and on its death, or on SIGTERM, kills the game;
- when the game has ended, for whatever reason, removes its /dev/shm entries (the instance id is among the game's
  arguments) and exits with the game's status.

The game writes its _vizdoom.ini in its working directory: the launcher's private folder, not the user's."""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
from pathlib import Path

PARENT_VARIABLE = "APPO_VIZDOOM_PARENT"

_SCRIPT = r"""#!{python} -S
import ctypes, os, signal, sys, time

REAL, WORKDIR, PR_SET_PDEATHSIG = {real!r}, {workdir!r}, 1
args = sys.argv[1:]
instance = args[args.index("+viz_instance_id") + 1] if "+viz_instance_id" in args else None


def remove_shared_memory():
    if instance:
        for prefix in ("ViZDoomSM", "ViZDoomMQCtr", "ViZDoomMQDoom"):
            try:
                os.unlink("/dev/shm/" + prefix + instance)
            except OSError:
                pass


parent = int(os.environ.get({variable!r}, "0") or 0) or os.getppid()
if os.getppid() != parent:  # the process that started it is gone already (its queues made, no game to run)
    remove_shared_memory()
    sys.exit(1)
libc = ctypes.CDLL(None, use_errno=True)
os.chdir(WORKDIR)
signal.signal(signal.SIGINT, signal.SIG_IGN)
me = os.getpid()
child = os.fork()
if child == 0:
    os.setpgid(0, 0)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != me:
        os._exit(1)
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.execv(REAL, [REAL] + args)


def stop(signum=None, frame=None):
    try:
        os.kill(child, signal.SIGKILL)
    except ProcessLookupError:
        pass


signal.signal(signal.SIGTERM, stop)
status = 0
while True:
    try:
        done, status = os.waitpid(child, os.WNOHANG)
    except ChildProcessError:
        break
    if done:
        break
    if os.getppid() != parent:
        stop()
    time.sleep(0.2)
remove_shared_memory()
code = os.waitstatus_to_exitcode(status) if status else 0
os._exit(code if code >= 0 else 128 - code)
"""


def private_folder() -> Path:
    """This user's folder for the launcher script and the games' working directory."""
    folder = Path(tempfile.gettempdir()) / f"appo-vizdoom-{os.getuid()}"
    folder.mkdir(mode=0o700, exist_ok=True)
    return folder


def launcher_path(real_binary: str) -> str:
    """The launcher script for `real_binary` (vizdoom's own `vizdoom`), written once per interpreter and binary; the
    path to give `DoomGame.set_vizdoom_path`. Also sets APPO_VIZDOOM_PARENT to this process for the games it
    starts."""
    folder = private_folder()
    text = _SCRIPT.format(python=sys.executable, real=real_binary, workdir=str(folder), variable=PARENT_VARIABLE)
    name = f"launch-{hashlib.sha1(text.encode()).hexdigest()[:16]}.py"
    path = folder / name
    if not path.exists() or path.read_text() != text:
        tmp = folder / f".{name}.{os.getpid()}"
        tmp.write_text(text)
        tmp.chmod(0o755)
        os.replace(tmp, path)
    os.environ[PARENT_VARIABLE] = str(os.getpid())
    return str(path)
