"""The event loop ``serve`` runs on: uvloop where it is installed, else asyncio's own.

Every call through the gateway crosses its loop several times (a line read, a task woken,
a line written, on each side), and uvloop does that loop work in C: per stdio call 3% less
time and 10-12% less gateway CPU, in both eras (bench/README.md). The servers a gateway
starts and the commands other than ``serve`` keep asyncio's loop. ``PREFIXGATE_UVLOOP=0``
turns it off (asyncio's loop, as where uvloop is not installed: Windows, PyPy).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Mapping
from typing import Any

UVLOOP_ENV = "PREFIXGATE_UVLOOP"


def backend_options(environ: Mapping[str, str] = os.environ) -> dict[str, Any]:
    """anyio's asyncio backend options for ``serve``: uvloop unless turned off or missing."""
    if environ.get(UVLOOP_ENV, "1").strip().lower() in ("0", "false", "no", "off"):
        return {}
    if importlib.util.find_spec("uvloop") is None:
        return {}
    return {"use_uvloop": True}


def standard_fds_open() -> None:
    """Open ``/dev/null`` on each of file descriptors 0, 1 and 2 that is closed.

    Started with one closed (a daemon manager that closes stdin, ``serve --http <&-``), the
    first pipe or socket the gateway opens would take its number: libuv (uvloop) then
    refuses to start the server on that pipe and aborts the whole process when it closes
    it, and a child would inherit it as its own standard stream. Opening returns the
    lowest free descriptor, so each ``open`` lands on the one that was closed (those below it
    are open by then).

    Python itself sets ``sys.stdin``, ``sys.stdout`` or ``sys.stderr`` to None for a descriptor
    closed at its start: each such one is opened on the ``/dev/null`` now there, so a command
    whose stdout is closed (``serve --http >&-``, printing its URL; ``catalog >&-``) runs to its
    own exit status instead of stopping on a traceback.
    """
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            os.open(os.devnull, os.O_RDWR)
    for fd, name in enumerate(("stdin", "stdout", "stderr")):
        if getattr(sys, name) is None:
            stream = open(fd, "r" if fd == 0 else "w", closefd=False, errors="backslashreplace" if fd == 2 else None)
            setattr(sys, name, stream)
            setattr(sys, f"__{name}__", stream)
