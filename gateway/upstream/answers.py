"""The gateway's own answers to a start's first requests, captured for the warm-start record.

A warm start answers ``initialize``, ``server/discover`` and the lists (tools, prompts,
resources, resource templates) before the gateway has imported its MCP machinery
(``gateway.upstream.prelude``), so the bytes it sends must be the ones the gateway itself
would send. They are not rebuilt by hand: the requests are run through the gateway's real
server (the same ``Handlers``, the SDK's dispatch and result pipeline, the stdio end's
encoder) over in-memory streams, once per protocol version, and each response line is kept
as it came out.
"""

from __future__ import annotations

import logging
import weakref
from typing import Any

import anyio
import mcp_types as types
from mcp.shared.message import SessionMessage
from mcp_types import CLIENT_CAPABILITIES_META_KEY, CLIENT_INFO_META_KEY, PROTOCOL_VERSION_META_KEY
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, MODERN_PROTOCOL_VERSIONS

from catalog.warm import LISTS, TOOLS_SHELL, Answer
from gateway import __version__
from gateway.engine.hub import Hub
from gateway.engine.surface import Surface
from gateway.state.session import ClientState
from gateway.upstream.server import build_server
from gateway.upstream.stdio import encode_reply

log = logging.getLogger("prefixgate.answers")

CAPTURE_TIMEOUT = 10.0
"""Seconds the whole capture may take; past that the record is kept without answers."""
_CLIENT = {"name": "prefixgate-warm-start", "version": __version__}


_surface_answers: weakref.WeakKeyDictionary[Hub, tuple[Surface, dict[str, list[bytes]]]] = weakref.WeakKeyDictionary()
"""Each hub's last captured answers to the lists after ``tools/list``, with the surface they
list: a capture runs after every rebuild, and its lists through the SDK's pipeline, once a
protocol version, held the loop ~3 s at each tools change beside 100,000 resources, templates
and prompts (their answers change only with the surface, which is rebuilt only when they do)."""


def _prefix(request_id: int) -> bytes:
    return b'{"jsonrpc":"2.0","id":' + str(request_id).encode() + b',"result":'


async def capture(hub: Hub) -> list[Answer]:
    """Every version's answers to the epoch ``hub`` serves now; empty if any cannot be captured."""
    epoch = hub.router.epoch
    if epoch is None:
        return []
    surface = hub.surface
    kept = _surface_answers.get(hub)
    known = kept[1] if kept is not None and kept[0] is surface else {}  # (this surface's, captured before)
    found: dict[str, list[bytes]] = {}
    seen: list[bytes] = []
    answers: list[Answer] = []
    try:
        with anyio.fail_after(CAPTURE_TIMEOUT):
            for version in HANDSHAKE_PROTOCOL_VERSIONS:
                init = {"protocolVersion": version, "capabilities": {}, "clientInfo": _CLIENT}
                asked = LISTS[:1] if version in known else LISTS
                lines = await _exchange(hub, [("initialize", init), None, *((m, None) for m in asked)])
                found[version] = known.get(version) or _shared(lines[2:], seen)
                published = epoch.published(version).encoded()
                answers += _answers(version, "initialize", lines[:2] + found[version], published)
            for version in MODERN_PROTOCOL_VERSIONS:
                envelope = {
                    "_meta": {
                        PROTOCOL_VERSION_META_KEY: version,
                        CLIENT_CAPABILITIES_META_KEY: {},
                        CLIENT_INFO_META_KEY: _CLIENT,
                    }
                }
                asked = LISTS[:1] if version in known else LISTS
                lines = await _exchange(hub, [("server/discover", envelope), *((m, envelope) for m in asked)])
                found[version] = known.get(version) or _shared(lines[2:], seen)
                published = epoch.published(version).encoded()
                answers += _answers(version, "server/discover", lines[:2] + found[version], published)
    except (TimeoutError, ValueError) as exc:
        if hub.router.epoch is epoch and hub.surface is surface:
            log.warning("warm-start answers not captured: %s", exc)
        # (else a new epoch began meanwhile, its lists answered in its place: no fault, as below)
        return []
    if hub.router.epoch is not epoch or hub.surface is not surface:
        return []  # a new epoch (or surface) began meanwhile: these answers belong to the old one
    _surface_answers[hub] = (surface, found)
    return answers


def _shared(lines: list[bytes], seen: list[bytes]) -> list[bytes]:
    """``lines``, each equal to one in ``seen`` replaced by it (the others added): the versions
    that answer a list alike keep one copy of its bytes between captures."""
    shared = []
    for line in lines:
        same = next((s for s in seen if s == line), None)
        if same is None:
            seen.append(line)
        shared.append(line if same is None else same)
    return shared


def _answers(version: str, opening: str, lines: list[bytes], tools: bytes) -> list[Answer]:
    """The opening request's answer, then one per list (``tools/list`` first, spliced)."""
    listed = [_tools(version, lines[1], tools)]
    listed += [Answer(method, version, line) for method, line in zip(LISTS[1:], lines[2:], strict=True)]
    return [Answer(opening, version, lines[0]), *listed]


def _tools(version: str, result: bytes, tools: bytes) -> Answer:
    """A ``tools/list`` result as its shell and its tools array (spliced back by ``Answer.line``)."""
    head = b'{"tools":'
    if not result.startswith(head + tools):
        raise ValueError(f"tools/list {version}: the answer does not carry the epoch's tools first")
    return Answer("tools/list", version, TOOLS_SHELL + result[len(head) + len(tools) :], tools)


async def _exchange(hub: Hub, requests: list[tuple[str, Any] | None]) -> list[bytes]:
    """Run ``requests`` (None: ``notifications/initialized``) on one connection of the gateway's
    real server; the JSON result of each, as the stdio end writes it."""
    server, options = build_server(hub, lambda ctx: ClientState(), detached=True)
    to_server, server_reads = anyio.create_memory_object_stream[SessionMessage | Exception](len(requests))
    server_writes, from_server = anyio.create_memory_object_stream[SessionMessage](16)
    results: dict[int, bytes] = {}
    asked = 0
    async with anyio.create_task_group() as tg:
        tg.start_soon(server.run, server_reads, server_writes, options)
        async with to_server, from_server:
            for request in requests:
                if request is None:
                    message: Any = types.JSONRPCNotification(jsonrpc="2.0", method="notifications/initialized")
                else:
                    asked += 1
                    message = types.JSONRPCRequest(jsonrpc="2.0", id=asked, method=request[0], params=request[1])
                await to_server.send(SessionMessage(message))
            async for reply in from_server:
                msg = reply.message
                if isinstance(msg, types.JSONRPCError):
                    raise ValueError(f"request {msg.id}: {msg.error.message}")
                if not isinstance(msg, types.JSONRPCResponse) or not isinstance(msg.id, int):
                    continue  # a notification (list_changed, a log line): not an answer
                line, prefix = encode_reply(reply), _prefix(msg.id)
                if not (line.startswith(prefix) and line.endswith(b"}\n")):
                    raise ValueError("a response line is not shaped as the warm start writes it")
                results[msg.id] = line[len(prefix) : -2]
                if len(results) == asked:
                    break
        tg.cancel_scope.cancel()
    return [results[n] for n in range(1, asked + 1)]
