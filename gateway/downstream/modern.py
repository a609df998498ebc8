"""The 2026-07-28 protocol toward a downstream server: negotiation and per-request stamping.

The gateway forwards requests raw (below the SDK's typed layer, so one bad tool is
quarantined rather than failing the page), so it cannot use the SDK session's own
request stamp, which is private. ``stamp`` does the same with the SDK's public
constants; checked against mcp 2.3.0 (``mcp/client/session.py: _make_modern_stamp``).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping
from typing import Any

import mcp_types as types
from mcp.client.session import ClientSession
from mcp.shared.exceptions import MCPError
from mcp.shared.inbound import (
    MCP_METHOD_HEADER,
    MCP_NAME_HEADER,
    MCP_PROTOCOL_VERSION_HEADER,
    NAME_BEARING_METHODS,
    encode_header_value,
    find_invalid_x_mcp_header,
    mcp_param_headers,
    x_mcp_header_map,
)
from mcp.shared.jsonrpc_dispatcher import JSONRPCDispatcher
from mcp_types import (
    CLIENT_CAPABILITIES_META_KEY,
    CLIENT_INFO_META_KEY,
    CONNECTION_CLOSED,
    LOG_LEVEL_META_KEY,
    PROTOCOL_VERSION_META_KEY,
    REQUEST_TIMEOUT,
    UNSUPPORTED_PROTOCOL_VERSION,
)
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS, LATEST_HANDSHAKE_VERSION, MODERN_PROTOCOL_VERSIONS
from pydantic import ValidationError

log = logging.getLogger("prefixgate.downstream")

ENVELOPE = "io.modelcontextprotocol/"
"""Prefix of the per-request protocol keys in ``_meta``: they belong to one hop, never forwarded."""
CLIENT_CAPABILITIES: dict[str, Any] = {
    "elicitation": {"form": {}, "url": {}},
    "roots": {"listChanged": True},
    "sampling": {"tools": {}},
}
"""What the gateway declares to servers: it relays all three to the client that can answer."""


def relayable(client_capabilities: Any) -> dict[str, Any] | None:
    """The capabilities to declare for one client's request: those of :data:`CLIENT_CAPABILITIES`
    the client itself declared (its own value), or ``None`` when it declared none per request.

    On 2026-07-28 a server may ask only for what the request declares, and the gateway can
    relay only what its client can answer: declaring more would make a server ask for input
    it must then refuse, where the server itself would have chosen differently (answered
    -32021, or asked only for what the client supports).
    """
    if not isinstance(client_capabilities, dict):
        return None
    return {k: v for k, v in client_capabilities.items() if k in CLIENT_CAPABILITIES and isinstance(v, dict)}


async def negotiate(session: ClientSession) -> bool:
    """``server/discover`` first; the ``initialize`` handshake unless the server offers 2026-07-28.

    Returns whether the modern protocol was adopted. Only a server that names modern
    versions and no handshake-era one (-32022 with a disjoint list) fails; every other
    refusal or unparsable answer falls back to the handshake, as the SDK's own
    ``mode="auto"`` client does. Used for ``protocol = "modern"`` and, by default, for a
    server that refused the handshake (:func:`refused_handshake`).
    """
    try:
        await session.discover()
        return True
    except MCPError as exc:
        supported = _supported(exc)
        if exc.code == UNSUPPORTED_PROTOCOL_VERSION and supported:
            if not any(v in HANDSHAKE_PROTOCOL_VERSIONS for v in supported):
                raise
    except (ValidationError, RuntimeError) as exc:
        log.debug("server/discover answer not usable (%s); using the handshake", exc)
    try:
        await session.initialize()
    except MCPError as exc:
        # A server slower to start than the probe's timeout read the probe after all and
        # settled on 2026-07-28; its -32022 names its versions: ask once more (the SDK's
        # own client does the same).
        if exc.code != UNSUPPORTED_PROTOCOL_VERSION or not any(v in MODERN_PROTOCOL_VERSIONS for v in _supported(exc)):
            raise
        await session.discover()
        return True
    return False


async def handshake(session: ClientSession, dispatcher: JSONRPCDispatcher[Any], *, http: bool) -> None:
    """The ``initialize`` handshake; over HTTP its request also carries the 2026-07-28 headers
    (``MCP-Protocol-Version``, ``Mcp-Method``) and ``_meta`` envelope, naming the handshake's
    version: a 2026-07-28 server expects them on every request before it refuses the
    handshake (-32022), and a server of both eras takes the version they name (the SDK's does).
    """
    if not http:
        await session.initialize()
        return
    from gateway import __version__

    version, info = LATEST_HANDSHAKE_VERSION, client_info(__version__)
    params, headers = stamp(
        "initialize",
        {"protocolVersion": version, "capabilities": CLIENT_CAPABILITIES, "clientInfo": info},
        version=version,
        client_info=info,
        log_level=None,
        header_maps={},
    )
    raw = await dispatcher.send_raw_request("initialize", params, {"headers": headers})
    result = types.InitializeResult.model_validate(raw)
    if result.protocol_version not in HANDSHAKE_PROTOCOL_VERSIONS:
        raise RuntimeError(f"Unsupported protocol version from the server: {result.protocol_version}")
    session.adopt(result)
    await session.send_notification(types.InitializedNotification())


def refused_handshake(exc: BaseException) -> bool:
    """Whether an ``initialize`` failed in a way a 2026-07-28-only server's would: an error
    answer (say -32022 naming only modern versions, or no such method) or an answer naming a
    version the handshake does not have; not a connection that closed or timed out."""
    if isinstance(exc, MCPError):
        return exc.code not in (CONNECTION_CLOSED, REQUEST_TIMEOUT)
    return isinstance(exc, ValidationError | RuntimeError)


def _supported(exc: MCPError) -> list[str]:
    """The versions a -32022 error names (empty when it names none)."""
    data = exc.error.data
    supported = data.get("supported") if isinstance(data, dict) else None
    return [v for v in supported if isinstance(v, str)] if isinstance(supported, list) else []


def is_modern(version: str | None) -> bool:
    return version in MODERN_PROTOCOL_VERSIONS


def stamp(
    method: str,
    params: Mapping[str, Any] | None,
    *,
    version: str,
    client_info: dict[str, Any],
    log_level: str | None,
    header_maps: Mapping[str, dict[tuple[str, ...], str]],
    capabilities: dict[str, Any] | None = None,
    headers: bool = True,
) -> tuple[dict[str, Any], dict[str, str]]:
    """The params (with the ``_meta`` envelope) and HTTP headers of one modern request.

    ``capabilities``: what to declare for this request (:func:`relayable`); by default all
    the gateway can relay. ``headers``: false for a request with no HTTP to carry them (no
    headers are made).

    Headers: Mcp-Protocol-Version, Mcp-Method, Mcp-Name for name-bearing methods, and
    for ``tools/call`` the ``Mcp-Param-*`` headers the tool's schema declares (SEP-2243).
    """
    data = dict(params or {})
    meta = dict(data.get("_meta") or {})
    meta[PROTOCOL_VERSION_META_KEY] = version
    meta[CLIENT_INFO_META_KEY] = client_info
    meta[CLIENT_CAPABILITIES_META_KEY] = CLIENT_CAPABILITIES if capabilities is None else capabilities
    if log_level is not None:
        meta.setdefault(LOG_LEVEL_META_KEY, log_level)
    data["_meta"] = meta
    if not headers:
        return data, {}
    made = {MCP_PROTOCOL_VERSION_HEADER: version, MCP_METHOD_HEADER: method}
    name_key = NAME_BEARING_METHODS.get(method)
    if name_key is not None and isinstance(name := data.get(name_key), str):
        made[MCP_NAME_HEADER] = encode_header_value(name)
    if method == "tools/call" and isinstance(name := data.get("name"), str) and name in header_maps:
        arguments = data.get("arguments")
        made.update(mcp_param_headers(header_maps[name], arguments if isinstance(arguments, dict) else {}))
    return data, made


def header_maps(tools: tuple[Any, ...]) -> dict[str, dict[tuple[str, ...], str]]:
    """Each tool's ``x-mcp-header`` map (argument path -> header name), for its calls.

    A tool whose annotations are invalid gets none: the catalog quarantines it
    (``gateway.published.wire_problem``), so it is never called; the others are kept.
    """
    maps: dict[str, dict[tuple[str, ...], str]] = {}
    for tool in tools:
        if not isinstance(tool, dict) or not isinstance(name := tool.get("name"), str):
            continue
        schema = tool.get("inputSchema")
        try:
            if find_invalid_x_mcp_header(schema) is None and (mapping := x_mcp_header_map(schema)):
                maps[name] = mapping
        except Exception:  # noqa: BLE001 - a malformed schema is the catalog's to quarantine
            continue
    return maps


def hop_local_removed(result: dict[str, Any]) -> dict[str, Any]:
    """A modern server's result without what belongs to its hop alone.

    Its cache hints (``ttlMs``, ``cacheScope``) describe its own answer to the gateway,
    not the gateway's answer to a client (which may be shared by others): the gateway
    publishes its own hints. ``resultType: complete`` and the envelope keys in ``_meta``
    (its ``serverInfo``) are the gateway's to set for its own clients. An
    ``input_required`` result keeps its type: the caller answers it.
    """
    if not isinstance(result, dict):
        return result
    cleaned = dict(result)
    cleaned.pop("ttlMs", None)
    cleaned.pop("cacheScope", None)
    if cleaned.get("resultType") == "complete":
        del cleaned["resultType"]
    meta = cleaned.get("_meta")
    if isinstance(meta, dict):
        kept = {k: v for k, v in meta.items() if not (isinstance(k, str) and k.startswith(ENVELOPE))}
        if kept:
            cleaned["_meta"] = kept
        else:
            del cleaned["_meta"]
    return cleaned


def relayed_meta(meta: Mapping[str, Any]) -> dict[str, Any]:
    """A client's request ``_meta`` as the server it goes on to receives it: the client's
    progress token and its 2026-07-28 envelope belong to the client's own hop (the gateway
    sends its own on the server's), the rest (a trace context, say) travels on."""
    return {k: v for k, v in meta.items() if k != "progressToken" and not k.startswith(ENVELOPE)}


def client_info(version: str) -> dict[str, Any]:
    return dict(_client_info(version))


@functools.cache
def _client_info(version: str) -> dict[str, Any]:
    """Made once: it goes into every 2026-07-28 request's envelope."""
    return types.Implementation(name="prefixgate", version=version).model_dump(by_alias=True, exclude_none=True)
