"""The classic server (tests/classic_server.py) with state of its own process: a server that
holds per-user state, for tests/test_instances.py.

Tools besides the classic ones: ``remember(value)`` keeps ``value`` and answers what this
process kept before ("" at first); ``pid()`` answers its process id; ``crash()`` exits at
once (status 1). With ``$INSTANCE_LOG`` set, each process appends ``start PID`` to that file
as it starts, and ``call PID TOOL`` for each call of these tools; with ``$INSTANCE_FAIL`` set,
a process started while that file exists exits at once (status 3), saying so on stderr; with
``$INSTANCE_HANG`` set, one started while that file exists notes ``hang PID`` and never answers.

Usage: ``python tests/instance_server.py`` (stdio).
"""

from __future__ import annotations

import os
import sys
import time

from classic_server import main, server  # (run as a script: its directory is on the path)

kept = {"value": ""}


def _note(line: str) -> None:
    if path := os.environ.get("INSTANCE_LOG"):
        with open(path, "a", encoding="utf-8") as log:
            log.write(line + "\n")


@server.tool()
def remember(value: str) -> str:
    """Keep ``value``; answer what was kept before."""
    _note(f"call {os.getpid()} remember")
    before, kept["value"] = kept["value"], value
    return before


@server.tool()
def pid() -> str:
    """This process's id."""
    _note(f"call {os.getpid()} pid")
    return str(os.getpid())


@server.tool()
def crash() -> str:
    """Exit at once."""
    _note(f"call {os.getpid()} crash")
    os._exit(1)


if __name__ == "__main__":
    if os.path.exists(os.environ.get("INSTANCE_FAIL", "\0")):
        sys.stderr.write("instance_server: told not to start\n")
        sys.exit(3)
    if os.path.exists(os.environ.get("INSTANCE_HANG", "\0")):
        _note(f"hang {os.getpid()}")
        time.sleep(3600)
    _note(f"start {os.getpid()}")
    main()
