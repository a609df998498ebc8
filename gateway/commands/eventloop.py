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
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

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


STOP_SIGNALS = ("SIGTERM", "SIGHUP")
T = TypeVar("T")


def run_until_stopped(func: Callable[..., Awaitable[T]], *args: Any) -> T:
    """``anyio.run(func, *args)`` for the commands that start servers (``catalog``, ``doctor``,
    ``catalog lock`` ...), ended by SIGTERM or SIGHUP as by Ctrl-C: the command's task is
    cancelled, so the servers it started are stopped, and it exits 128 + the signal's number.

    Each server runs in a session of its own (``gateway.downstream.spawn``), out of reach of
    a signal to the terminal's process group: killed at once by the signal's default action,
    the command left every server it had started running (a closed terminal's SIGHUP, a CI
    job's SIGTERM), until each noticed the end of its input, if it ever did."""
    import signal

    import anyio

    from gateway.commands.base import Exit

    stopped: list[int] = []
    # (one ignored where the command starts, as nohup leaves SIGHUP, stays ignored)
    watched = [n for n in (getattr(signal, name) for name in STOP_SIGNALS) if signal.getsignal(n) != signal.SIG_IGN]

    async def main() -> list[T]:
        async with anyio.create_task_group() as tg:

            async def watch(*, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
                with anyio.open_signal_receiver(*watched) as received:
                    task_status.started()
                    async for signum in received:
                        stopped.append(signum)
                        tg.cancel_scope.cancel()
                        return

            await tg.start(watch)
            result = await func(*args)
            tg.cancel_scope.cancel()
            return [result]
        return []  # (cancelled by a signal)

    result = anyio.run(main)
    if stopped or not result:
        signum = stopped[0] if stopped else signal.SIGTERM
        raise Exit(128 + signum, f"prefixgate: stopped by {signal.Signals(signum).name}")
    return result[0]
