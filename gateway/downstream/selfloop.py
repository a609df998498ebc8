"""A gateway that is its own downstream server, told by a header only this process sends.

A server entry whose URL leads back to the gateway that serves it (prefixgate registered in an
agent over HTTP, then imported under another name; one profile's path named as a server of
another) made the gateway front itself: its own tools came back to it renamed one level
deeper, over and over. Every HTTP request to a downstream server carries ``HEADER`` with this
process's ``INSTANCE`` (random: it says nothing, and no other process sends it); the HTTP
front refuses a request that bears it (508 Loop Detected, ``REFUSAL``), before anything else,
so that server fails at its first request, saying why, and the gateway serves the others.
"""

from __future__ import annotations

import secrets

HEADER = "prefixgate-instance"
INSTANCE = secrets.token_hex(16)
REFUSAL = "this URL is the prefixgate gateway that connects to it: a gateway cannot be its own server"


def with_instance(headers: dict[str, str]) -> dict[str, str]:
    """A downstream connection's headers (the config's), with this gateway's ``HEADER``."""
    return {**headers, HEADER: INSTANCE}
