"""The validation worker: a child process that validates arguments against referencing schemas.

jsonschema-rs holds the GIL for the whole of a validation, and a schema with references
can cost exponential time (subschemas shared through ``$ref``), so neither the event loop
nor a thread can bound it. A process can be killed. Protocol, JSON lines on stdin/stdout:
``{"key", "schema", "instance"}`` in; ``{"valid": true}``, ``{"path", "message"}`` or
``{"failure"}`` out. A ``{"ready": true}`` line is written once the imports are done.

Imports only the standard library and ``catalog.validation`` so it starts fast.
"""

from __future__ import annotations

import json
import resource
import sys
from typing import Any

from catalog.validation import compile_validator, violation

MEMORY_LIMIT = 1 << 30
"""Address-space cap: a validation that would need more fails here, not in the gateway."""
CACHE = 256
"""Compiled validators kept, by schema key."""
NAME_KEPT = 1000
"""Characters of each name on a violation's path sent back."""


def answer(request: dict[str, Any], cache: dict[str, Any]) -> dict[str, Any]:
    key = request["key"]
    validator = cache.get(key)
    if validator is None:
        if len(cache) >= CACHE:
            cache.pop(next(iter(cache)))
        validator = cache[key] = compile_validator(request["schema"])
    found = violation(validator, request["instance"])
    if found is None:
        return {"valid": True}
    path, message = found
    # Each name cut (the gateway shows 200 characters of the whole path): a call's own keys
    # may be megabytes long, and the reply line is read within gateway.engine.validation._MAX_LINE.
    path = [part if isinstance(part, int) else part[:NAME_KEPT] for part in path]
    return {"path": path, "message": message[:2000]}


def _die_with_parent() -> None:
    """Linux: get SIGKILL when the gateway dies, even in the middle of a long validation
    (which never reads stdin, so it would not notice the EOF)."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes
        import signal

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def main() -> None:
    _die_with_parent()
    try:
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
    except (ValueError, OSError):
        pass
    out = sys.stdout
    out.write('{"ready": true}\n')
    out.flush()
    cache: dict[str, Any] = {}
    for line in sys.stdin:
        try:
            reply = answer(json.loads(line), cache)
        except (ValueError, TypeError, KeyError, RecursionError, MemoryError) as exc:
            reply = {"failure": " ".join(str(exc).split())[:300] or type(exc).__name__}
        out.write(json.dumps(reply) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
