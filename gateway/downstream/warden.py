"""The warden: a small process that ends the servers' process groups once the gateway is gone.

A gateway killed with SIGKILL (the OOM killer, a crashed agent) stops nothing: each stdio
server runs in a session of its own, so a server that ignores the EOF on its stdin ran on
for good, and so did a server behind a wrapper (``sh -c``, ``npx``) and the wrapper waiting
for it. ``PR_SET_PDEATHSIG`` reaches neither a grandchild (it is not inherited) nor, reliably,
a child (it fires when the *thread* that forked exits). The warden holds the read end of a
pipe only the gateway writes: each spawned server's group is announced (``+PGID``) and, once
stopped, withdrawn (``-PGID``); when the pipe ends (the gateway exited, however) the groups
still announced get SIGTERM, a short grace, then SIGKILL. It runs in a session of its own,
so a signal to the gateway's process group does not take it along, and exits then.

Only groups the gateway started are ever signalled: a group's id stays taken while any member
lives, and the warden checks that it is still a session of that id (as ``start_new_session``
made it) before signalling. This file is run as a script (``python -I -S``): standard library
only, nothing of the gateway imported.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time

log = logging.getLogger("prefixgate.warden")

GRACE_SECONDS = 0.5
"""How long the groups get after SIGTERM before SIGKILL, once the gateway is gone."""


class _Gateway:
    """The gateway's side: the warden process, started at the first server, and the pipe to it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # servers are spawned from the prelude and from the event loop
        self._fd: int | None = None
        self._failed = False
        self._process: subprocess.Popen[bytes] | None = None

    def _start(self) -> int | None:
        read, write = os.pipe()  # (neither end inherited by a server: only the warden's stdin)
        try:
            self._process = subprocess.Popen(
                [sys.executable, "-I", "-S", os.path.abspath(__file__)],
                stdin=read,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                cwd="/",
                start_new_session=True,
                close_fds=True,
            )
        except OSError as exc:
            os.close(write)
            log.warning("cannot start the warden (a gateway killed with SIGKILL leaves its servers running): %s", exc)
            return None
        finally:
            os.close(read)
        os.set_blocking(write, False)  # a warden that reads nothing never blocks a spawn
        return write

    def _send(self, line: bytes) -> None:
        with self._lock:
            if self._failed:
                return
            if self._fd is None:
                self._fd = self._start()
                if self._fd is None:
                    self._failed = True
                    return
            try:
                os.write(self._fd, line)  # under PIPE_BUF: written whole or not at all
            except OSError as exc:  # BlockingIOError, BrokenPipeError: the warden is stuck or gone
                log.warning("the warden takes no more servers: %s", exc)
                self._failed = True

    def watch(self, pgid: int) -> None:
        """``pgid`` (a server just spawned) is ended should the gateway die before it stops it."""
        self._send(b"+%d\n" % pgid)

    def release(self, pgid: int) -> None:
        """``pgid`` was stopped by the gateway: the warden forgets it."""
        if self._fd is not None:
            self._send(b"-%d\n" % pgid)


GATEWAY = _Gateway()


# --- the warden's side (run as a script) ------------------------------------------------------


def _sessions() -> set[int] | None:
    """The process groups that are sessions of their own id (``setsid``'s), or None (no ``/proc``)."""
    try:
        names = os.listdir("/proc")
    except OSError:
        return None
    found: set[int] = set()
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as handle:
                fields = handle.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 3 and fields[2] == fields[3]:  # pgrp == session
            found.add(int(fields[2]))
    return found


def _signal(groups: set[int], signum: int) -> set[int]:
    """``signum`` to each group; the groups that still exist."""
    left = set()
    for pgid in groups:
        try:
            os.killpg(pgid, signum)
            left.add(pgid)
        except ProcessLookupError:
            pass
        except OSError:
            left.add(pgid)
    return left


def end(groups: set[int]) -> None:
    """SIGTERM to each group still ours, a grace while any exists, then SIGKILL."""
    sessions = _sessions()
    if sessions is not None:
        groups = groups & sessions
    left = _signal(groups, signal.SIGTERM)
    deadline = time.monotonic() + GRACE_SECONDS
    while left and time.monotonic() < deadline:
        time.sleep(0.02)
        left = _signal(left, 0)
    _signal(left, signal.SIGKILL)


def main() -> None:
    groups: set[int] = set()
    for line in sys.stdin.buffer:  # until the gateway's end closes: it exited, however it exited
        try:
            pgid = int(line[1:])
        except ValueError:
            continue
        if line.startswith(b"+"):
            groups.add(pgid)
        elif line.startswith(b"-"):
            groups.discard(pgid)
    end(groups)


if __name__ == "__main__":
    main()
