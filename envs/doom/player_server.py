"""One player of a multiplayer Doom match in a process of its own, driven over a pipe.

vizdoom's network game runs its players in lockstep: each player's `make_action` returns when every player's tics
are done, so players driven from threads of one process desynchronise; each needs its own process (vizdoom's own
multiplayer examples run one per player). `PlayerProcess` starts `python -m appo.envs.doom.player_server` with
pipes for stdin and stdout and speaks to it in pickled requests and replies:

- ("start", PlayerGame's keyword arguments, bots, limit) -> the player's buttons: builds the game and starts it (the
  host's start returns once every player has joined); on the host, `bots` of vizdoom's built-in bots join every
  episode; `limit`: the match's length in tics;
- ("reset", first) -> (observation, counts): a new episode (not at the first, which the start began, but in a
  game with bots); counts: the player's frags, deaths, damage dealt and damage taken (COUNTS), which the game
  totals over episodes;
- ("tic", button values, last) -> (observation, counts, finished): one tic with the buttons held (a dead player
  respawns by itself), the observation and counts only at the `last` tic of an agent step or at the episode's
  end (else None). The env advances every player one tic at a time, each tic awaited from all: make_action's
  frame skip, or one player's tics running ahead, stall vizdoom's synchronous network game (reported on vizdoom's
  tracker; Sample Factory steps its Doom players the same way). A game of one player and bots now and then ends at
  the player's death: it goes on in a new episode, which the env's own clock of the match ends;
- ("close",) -> None, and the process ends.

The server dies with the process that started it: it exits when its parent's pid changes (checked every 0.2 s by a
thread, since a request may block inside a tic) or its request pipe closes, and its game dies with it
(envs/doom/launcher.py). Whatever the game prints goes to stderr: stdout carries only the replies."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import threading
import time
from typing import Any

import numpy as np

COUNTS = ("FRAGCOUNT", "DEATHCOUNT", "DAMAGECOUNT", "DAMAGE_TAKEN")


class PlayerProcess:
    """The parent's side: a player server process; `send` a request, `receive` its reply (in that order, so that
    requests to several players can be sent before any reply is awaited)."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "appo.envs.doom.player_server", str(os.getpid())],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )

    def send(self, *request: Any) -> None:
        pickle.dump(request, self.proc.stdin, protocol=pickle.HIGHEST_PROTOCOL)
        self.proc.stdin.flush()

    def receive(self) -> Any:
        try:
            reply = pickle.load(self.proc.stdout)
        except EOFError:
            raise RuntimeError(f"Doom player process {self.proc.pid} ended (exit {self.proc.wait()})") from None
        if isinstance(reply, BaseException):
            raise reply
        return reply

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.send("close")
                self.proc.wait(timeout=10)
            except (OSError, ValueError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout):
            try:
                pipe.close()
            except OSError:
                pass


class _Server:
    def __init__(self) -> None:
        self.player: Any = None
        self.bots = self.limit = 0
        self.offset = np.zeros(len(COUNTS))

    def start(self, kwargs: dict[str, Any], bots: int, limit: int) -> list[str]:
        from appo.envs.doom.game import PlayerGame

        self.player = PlayerGame(**kwargs)
        self.player.start()
        self.bots, self.limit = bots, limit
        return self.player.buttons

    def _add_bots(self) -> None:
        if self.bots:
            self.player.game.send_game_command("removebots")
            for _ in range(self.bots):
                self.player.game.send_game_command("addbot")

    def reset(self, first: bool) -> Any:
        # With bots, a new episode even at the first reset (which in a game of several players would stall it).
        if not first or self.bots:
            self.player.game.new_episode()
            self._add_bots()
        return self.player.observe(), self._counts()

    def _counts(self) -> tuple[float, ...]:
        """The player's COUNTS: the game's totals (a new episode does not reset them)."""
        return tuple(self.player.variable(name) - float(self.offset[i]) for i, name in enumerate(COUNTS))

    def tic(self, buttons: list[float], last: bool) -> tuple[Any, tuple[float, ...] | None, bool]:
        game = self.player.game
        game.set_action(buttons)
        game.advance_action(1, last)
        finished = game.is_episode_finished()  # (a dead player respawns by itself: +sv_forcerespawn)
        if finished and self.bots and game.get_episode_time() < self.limit - 1:
            # A game of one player and bots now and then ends at the player's death: the match goes on in a new
            # one, which the env's clock ends (the counts are the game's totals: nothing is lost).
            before = self._counts()
            game.new_episode()
            self._add_bots()
            self.offset += np.subtract(self._counts(), before)  # what the restart itself counts is not the player's
            finished = False
        if not (last or finished):
            return None, None, False
        return self.player.observe(), self._counts(), finished

    def close(self) -> None:
        if self.player is not None:
            self.player.close()


def _watch_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(0.2)
    os._exit(1)


def main() -> None:
    parent = int(sys.argv[1])
    if os.getppid() != parent:
        sys.exit(1)
    threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()
    replies = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # what the game or vizdoom print goes to stderr
    requests = sys.stdin.buffer
    server = _Server()
    while True:
        try:
            name, *args = pickle.load(requests)
        except EOFError:
            break
        if name == "close":
            server.close()
            pickle.dump(None, replies)
            replies.flush()
            break
        try:
            reply = getattr(server, name)(*args)
        except Exception as exc:  # noqa: BLE001 - the parent raises it
            reply = RuntimeError(f"Doom player {name}: {exc}")
        pickle.dump(reply, replies, protocol=pickle.HIGHEST_PROTOCOL)
        replies.flush()
    server.close()


if __name__ == "__main__":
    main()
