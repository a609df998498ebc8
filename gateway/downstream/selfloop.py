"""A gateway that is its own downstream server: told by a header over HTTP, by an environment
variable over stdio.

A server entry whose URL leads back to the gateway that serves it (prefixgate registered in an
agent over HTTP, then imported under another name; one profile's path named as a server of
another) made the gateway front itself: its own tools came back to it renamed one level
deeper, over and over. Every HTTP request to a downstream server carries ``HEADER`` with this
process's ``INSTANCE`` (random: it says nothing, and no other process sends it); the HTTP
front refuses a request that bears it (508 Loop Detected, ``REFUSAL``), before anything else,
so that server fails at its first request, saying why, and the gateway serves the others.

Over stdio a loop is a chain of processes: gateway A starts gateway B as a server, B starts A
again, which starts B... (two configs that list each other: three processes and some 230 MB
more every second, without end). Every server a gateway starts is told, in ``CHAIN_ENV``, the
configs of the gateways above it, its own last (``environment``); ``serve`` with a config
already among them, or nested ``MAX_NESTED`` deep, exits 2 at once naming the loop
(``loop``), so that server fails, saying why, and the gateway above serves the others.
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Mapping
from pathlib import Path

HEADER = "prefixgate-instance"
INSTANCE = secrets.token_hex(16)
REFUSAL = "this URL is the prefixgate gateway that connects to it: a gateway cannot be its own server"

CHAIN_ENV = "PREFIXGATE_GATEWAYS"
"""The configs of the gateways above a server (a JSON array of paths, the nearest last)."""
MAX_NESTED = 8
"""Gateways above a ``serve`` at most: a loop through configs written anew for each start has
no config twice in its chain, and is stopped here."""

LOOP_FIX = "a gateway cannot be its own server, even through others: remove one from the other's [servers]"

_chain: list[str] = []
"""The gateways above this process and this one, once it read its config (``enter``)."""


def with_instance(headers: dict[str, str]) -> dict[str, str]:
    """A downstream connection's headers (the config's), with this gateway's ``HEADER``."""
    return {**headers, HEADER: INSTANCE}


def above(env: Mapping[str, str] | None = None) -> list[str]:
    """The configs of the gateways above this process (``CHAIN_ENV``; unreadable: none)."""
    try:
        chain = json.loads((os.environ if env is None else env).get(CHAIN_ENV) or "[]")
    except ValueError:
        return []
    return [str(item) for item in chain] if isinstance(chain, list) else []


def identity(config: Path) -> str:
    """A config as the chain names it: its real path (a link to it is the same config)."""
    return os.path.realpath(config)


def loop(config: Path) -> str | None:
    """Why ``serve`` with ``config`` must not run here (a loop of gateways), or None."""
    chain, me = above(), identity(config)
    if me in chain:
        return " -> ".join([*chain[chain.index(me) :], me])
    if len(chain) >= MAX_NESTED:
        return f"{len(chain)} gateways deep ({' -> '.join([*chain, me])})"
    return None


def enter(config: Path) -> None:
    """This process is the gateway of ``config``: the servers it starts see it above them."""
    _chain[:] = [*above(), identity(config)]


def environment() -> dict[str, str]:
    """What a server this gateway starts is told of the gateways above it (``CHAIN_ENV``)."""
    return {CHAIN_ENV: json.dumps(_chain)} if _chain else {}
