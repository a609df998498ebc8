"""A launch identity: everything that determines the catalog a gateway will publish.

The warm-start record (``catalog.warm``) is kept under the SHA-256 of this identity, so a
record is used only by a gateway that would build the same catalog: the same servers
started the same way (command, arguments, environment, URL, headers), shaped the same way
(prefix, include/exclude, deferral, protocol), for the same client profile and declaration
settings and the same ``[profiles.NAME]`` view, under the same catalog lock, by the same
prefixgate and SDK. Secret values (env, headers, a client secret) enter only as digests, and
only inside the one digest of the whole identity. Settings that change nothing a client sees (timeouts, ``required``,
policy, which is enforced at call time) are left out, so changing them keeps the start warm.

Computed before anything heavy is imported (the stdio start answers from the record while
the rest of the gateway loads): standard library and ``gateway.config`` only.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import stat
from dataclasses import fields
from pathlib import Path
from typing import Any

from gateway import __version__
from gateway.config import Config, ServerConfig
from gateway.config import lock_path as lock_path
from gateway.config import lock_target as lock_target

MAX_LOCK_BYTES = 64 << 20
"""A lock this large is not read for the identity (and no warm start happens under it)."""
_SERVER_FIELDS = (
    "id",
    "enabled",
    "transport",
    "command",
    "args",
    "cwd",
    "url",
    "prefix",
    "include",
    "exclude",
    "deferred",
    "protocol",
    "unset",
    "auth",
    "client_id",
    "client_metadata_url",
    "scopes",
    "issuer",
)
"""The ``ServerConfig`` fields that decide how a server starts and how its tools are published."""


def _digest(value: str | bytes) -> str:
    return hashlib.sha256(value.encode("utf-8") if isinstance(value, str) else value).hexdigest()


def _server(server: ServerConfig) -> dict[str, Any]:
    identity: dict[str, Any] = {name: getattr(server, name) for name in _SERVER_FIELDS}
    identity["args"] = list(server.args)
    identity["include"], identity["exclude"] = list(server.include), list(server.exclude)
    identity["scopes"], identity["unset"] = list(server.scopes), [list(u) for u in server.unset]
    identity["unusable"] = [list(u) for u in server.unusable]
    identity["env"] = {name: _digest(value) for name, value in sorted(server.env.items())}
    identity["headers"] = {name.lower(): _digest(value) for name, value in sorted(server.headers.items())}
    identity["client_secret"] = _digest(server.client_secret) if server.client_secret is not None else None
    return identity


def _sdk_release() -> list[str]:
    """The installed mcp SDK's distribution names (e.g. ``mcp-2.3.0.dist-info``): the wire models
    that shape the published bytes. Read from the directory listing, without importing it."""
    spec = importlib.util.find_spec("mcp_types")
    if spec is None or spec.origin is None:
        return []
    site = Path(spec.origin).resolve().parent.parent
    try:
        names = os.listdir(site)
    except OSError:
        return []
    return sorted(n for n in names if n.endswith(".dist-info") and n.split("-")[0] in ("mcp", "mcp_types"))


def launch_identity(config: Config, lock: bytes | None) -> dict[str, Any]:
    """The identity as a JSON value (``lock``: the catalog lock's bytes, None without a lock)."""
    client = {f.name: getattr(config.client, f.name) for f in fields(config.client)}
    client["defer"] = list(config.client.defer)
    return {
        "prefixgate": __version__,
        "sdk": _sdk_release(),
        "servers": [_server(s) for s in config.servers],
        "client": client,
        "separator": config.gateway.separator,
        "lock": None if lock is None else _digest(lock),
        "lock_new": config.gateway.lock_new,
        "spill": {"enabled": config.spill.enabled, "output_schemas": config.spill.output_schemas},
        "profile": {"name": config.profile, "include": list(config.include), "exclude": list(config.exclude)},
    }


def read_lock_bytes(config: Config) -> tuple[bool, bytes | None]:
    """(usable, bytes) of the lock the gateway will serve under: (True, None) without one;
    (False, None) when a lock is configured or present but cannot be read (no warm start)."""
    path = lock_path(config)
    if path is None:
        return True, None
    try:  # non-blocking and regular files only: a FIFO named as the lock must not hang the start
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False, None
    if not stat.S_ISREG(os.fstat(fd).st_mode):  # (before fdopen, which refuses a directory with an error)
        os.close(fd)
        return False, None
    with os.fdopen(fd, "rb") as handle:
        data = handle.read(MAX_LOCK_BYTES + 1)
    return (len(data) <= MAX_LOCK_BYTES), data
