"""A stdio start's first answers, given before the gateway has imported its MCP machinery.

An agent gives a server about a second to list its tools (Codex CLI starts its session
without a slower one), and importing the gateway's serve path alone costs ~0.8 s. So
``serve`` reads the config, starts every stdio server (``gateway.downstream.spawn``: they
start up while the gateway does) and, when the warm-start record of this exact config
exists (``catalog.warm``), answers from it in a thread of its own while the rest loads:
``initialize`` (or a 2026-07-28 ``server/discover``) and the lists (tools, prompts,
resources, templates: Claude Code counts a server connected only once all are answered),
with the bytes the gateway itself gave last time (``gateway.upstream.answers`` captured
them), and a 2026-07-28 ``subscriptions/listen`` for list changes is acknowledged (Claude
Code lists only once its stream is; the gateway serves the stream). Everything
else is kept, in order, for the gateway, which takes over the pipe (``stop``) once it is
up: it reads first the lines kept here, the handshake's opening request among them under
a private id (so the SDK's session is in the state the client believes it is in, and its
second answer to it is dropped), then the pipe.

Only what the record answers exactly is answered: a request whose every field the gateway's
own session takes (``HANDSHAKE``, ``ENVELOPE``), at a protocol version the record holds, with
a plain id; anything else, and everything once one request was left to the gateway's own
session, waits for the gateway. Standard library only.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import select
import signal
import stat
import threading
import time
from dataclasses import dataclass
from typing import Any

from catalog.text import plural
from catalog.warm import LISTS, Answer, Record, record_key
from gateway.config import Config
from gateway.downstream.spawn import Spawned, spawn
from gateway.launch import launch_identity, read_lock_bytes
from gateway.state.warmrecords import load_record

log = logging.getLogger("prefixgate.prelude")

LINE_LIMIT = 1 << 20
"""A longer request line is not parsed here: the gateway reads it (and everything after it)."""
KEPT_LIMIT = 8 << 20
"""Bytes kept for the gateway before this end stops reading (the client then waits on its pipe)."""
OUT_LIMIT = 1 << 20
"""Bytes of answers the client has not taken off its pipe before this end stops answering and
reading, as the gateway's own end stops at ``MAX_IN_FLIGHT``: a 47-byte ``tools/list`` costs a
whole catalog here, so a client that never reads would otherwise grow this process without bound."""
PRELUDE_ENV = "PREFIXGATE_PRELUDE"
"""``0`` answers nothing before the gateway is up (the servers still start at once): an escape
hatch, and the tests' way to compare these answers with the gateway's own."""
PROTOCOL_VERSION = "io.modelcontextprotocol/protocolVersion"
CLIENT_CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"
CLIENT_INFO = "io.modelcontextprotocol/clientInfo"
"""The 2026-07-28 request envelope's ``_meta`` keys (``mcp_types``; tests/test_warm_start.py keeps them equal)."""
LATEST_HANDSHAKE = "2025-11-25"
"""The version the SDK answers a handshake with when the client asks for one it does not know
(``mcp_types.version.LATEST_HANDSHAKE_VERSION``, kept equal by the same test)."""
_PLAIN_ID = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.:")


@dataclass(frozen=True)
class Handoff:
    """What the gateway's stdio end takes over from the prelude."""

    unread: bytes
    """Read here but not answered: the gateway reads these lines (and a partial last one) first."""
    unwritten: bytes
    """Answers the client has not taken off the pipe yet: written first."""
    private_ids: frozenset[str]
    """Requests replayed to the gateway's session whose answers the client already has (dropped)."""
    acknowledged: frozenset[str | int] = frozenset()
    """The ids of the listen requests acknowledged here: the gateway's own acknowledgment of each is dropped."""


def _plain_id(value: Any) -> bytes | None:
    """The id as the gateway's encoder writes it, for ids whose encoding is unambiguous."""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value).encode()
    if isinstance(value, str) and 0 < len(value) <= 128 and set(value) <= _PLAIN_ID:
        return b'"' + value.encode() + b'"'
    return None


class _Each:
    """In a shape: an object each of whose values fits ``of`` (an open map: ``experimental``)."""

    def __init__(self, of: Any) -> None:
        self.of = of


ANY = object()
"""In a shape: any JSON value (what the SDK keeps unread)."""
GATEWAY = object()
"""In a shape: a field the SDK reads that is not modelled here (``icons``, ``tasks``): when it
is there, the request is the gateway's to judge."""
OBJECT = _Each(ANY)
"""Any object: a capability offered with whatever options (the SDK reads none of them)."""
META: dict[str, Any] = {"progressToken": (str, int)}
CAPABILITIES: dict[str, Any] = {
    "roots": {"listChanged": bool},
    "sampling": {"context": OBJECT, "tools": OBJECT},
    "elicitation": {"form": OBJECT, "url": OBJECT},
    "experimental": _Each(OBJECT),
    "extensions": _Each(OBJECT),
    "tasks": GATEWAY,
}
CLIENT: dict[str, Any] = {
    "name": str,
    "version": str,
    "title": str,
    "description": str,
    "websiteUrl": str,
    "icons": GATEWAY,
}
HANDSHAKE: dict[str, Any] = {"protocolVersion": str, "capabilities": CAPABILITIES, "clientInfo": CLIENT, "_meta": META}
ENVELOPE: dict[str, Any] = {
    PROTOCOL_VERSION: str,
    CLIENT_CAPABILITIES: CAPABILITIES,
    CLIENT_INFO: CLIENT,
    "progressToken": (str, int),
}
"""The opening requests answered here, in shapes whose every instance the gateway's session
takes (tests/test_warm_start.py checks them against the SDK's models): a field of the shape
must have its type exactly (a bool is no int); any other field the SDK ignores, and so may
this (Claude Code's ``websiteUrl``, Codex's ``experimental`` capability: the agents this end
exists for), but one it reads and this does not model (``GATEWAY``; in an envelope, any other
``io.modelcontextprotocol/`` key) goes to the gateway, which may refuse it (``icons: 5``).
Not the SDK's models themselves: importing them here put the first answer ~0.7 s later
(median 125 -> 800 ms, 2 cores, servers starting beside it)."""
_RESERVED = "io.modelcontextprotocol/"
LISTEN = "subscriptions/listen"
LIST_CHANGES = ("toolsListChanged", "promptsListChanged", "resourcesListChanged")
"""What a listen stream acknowledged here may ask for, in the order the gateway's acknowledgment
names them (``SubscriptionFilter``); a stream that watches resources is the gateway's to answer."""


def _fits(value: Any, shape: Any) -> bool:
    """Whether ``value`` is an instance of ``shape`` (see ``ENVELOPE``)."""
    if shape is ANY:
        return True
    if isinstance(shape, type):
        return type(value) is shape
    if isinstance(shape, tuple):
        return type(value) in shape
    if not isinstance(value, dict):
        return False
    if isinstance(shape, _Each):
        return all(_fits(item, shape.of) for item in value.values())
    return all(
        key not in shape or (shape[key] is not GATEWAY and _fits(item, shape[key])) for key, item in value.items()
    )


def _named(info: dict[str, Any]) -> bool:
    return "name" in info and "version" in info


def _handshake_version(params: Any) -> str | None:
    """The version an ``initialize`` asks for, if its params are a ``HANDSHAKE``."""
    if not _fits(params, HANDSHAKE) or not {"protocolVersion", "capabilities", "clientInfo"} <= set(params):
        return None
    return str(params["protocolVersion"]) if _named(params["clientInfo"]) else None


def _modern_version(params: Any) -> str | None:
    """The protocol version of a 2026-07-28 request whose params are an ``ENVELOPE`` and nothing else."""
    if not isinstance(params, dict) or set(params) != {"_meta"} or not _fits(params["_meta"], ENVELOPE):
        return None
    meta = params["_meta"]
    if PROTOCOL_VERSION not in meta or CLIENT_CAPABILITIES not in meta:
        return None
    if any(key.startswith(_RESERVED) and key not in ENVELOPE for key in meta):
        return None
    if CLIENT_INFO in meta and not _named(meta[CLIENT_INFO]):  # (optional at 2026-07-28)
        return None
    return str(meta[PROTOCOL_VERSION])


def _list_params(params: Any) -> bool:
    """Whether a handshake-era list request's params are the whole list's: none, or a ``_meta``
    (Codex sends its progress token) and nothing else (a cursor: the gateway's lists are one page).
    A ``_meta`` with a reserved key is the gateway's: the 2026-07-28 envelope's version key on a
    handshake connection is refused there (the SDK's ``_has_modern_envelope``), not listed."""
    if params is None:
        return True
    if not isinstance(params, dict) or set(params) - {"_meta"} or not _fits(params, {"_meta": META}):
        return False
    return not any(key.startswith(_RESERVED) for key in params.get("_meta", {}))


class Prelude:
    """The stdio end before the gateway is up: the record's answers, and the early servers."""

    def __init__(self, record: Record | None, children: dict[str, Spawned]) -> None:
        self.record = record
        self.children = children
        """Stdio servers started before the gateway, by id (adopted by their ``Downstream``)."""
        self.listed = False
        """Whether a ``tools/list`` was answered from the record."""
        self._kept: list[bytes] = []
        self._kept_bytes = 0
        self._buffer = bytearray()
        self._out = bytearray()
        self._private: set[str] = set()
        self._acknowledged: set[str | int] = set()
        self._answered = 0
        self._era: str | None = None
        """None until the first request; "handshake" or "modern" while answering; "gateway" once
        a request was left to the gateway's session (then every later one is, in order)."""
        self._version = ""
        self._reading = True
        self._thread: threading.Thread | None = None
        self._wake_r, self._wake_w = -1, -1

    @classmethod
    def begin(cls, config: Config) -> Prelude:
        """Start every stdio server now; answer the client from the record when there is one."""
        children: dict[str, Spawned] = {}
        for server in config.servers:
            if server.enabled and server.transport == "stdio" and server.command and server.unset_reason is None:
                try:
                    children[server.id] = spawn(server.command, server.args, server.env, server.cwd)
                except OSError:
                    continue  # its Downstream tries again and reports why (command not found, ...)
        prelude = cls(None, children)
        _stop_children_on_signals(children)
        record = None
        if config.gateway.warm_start:
            usable, lock = read_lock_bytes(config)
            if usable:
                record = load_record(config.gateway.state_dir, record_key(launch_identity(config, lock)))
        prelude.record = record
        wanted = os.environ.get(PRELUDE_ENV, "1").strip().lower() not in ("0", "false", "no", "off")
        if record is not None and wanted and _pipe(0) and _pipe(1):
            prelude._start()
        return prelude

    # --- the thread -------------------------------------------------------------------

    def _start(self) -> None:
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(1, False)  # an answer the client does not read must never block this thread
        self._thread = threading.Thread(target=self._run, name="prefixgate-prelude", daemon=True)
        self._thread.start()

    def stop(self) -> Handoff:
        """Stop answering and hand over: what was read and not answered, and what is unwritten."""
        if self._thread is not None:
            os.write(self._wake_w, b"x")
            self._thread.join()
            os.close(self._wake_r)
            os.close(self._wake_w)
            os.set_blocking(1, True)
            self._thread = None
        if self._answered:
            log.info(
                "warm start: answered %s from the record before the gateway was up", plural(self._answered, "request")
            )
        unread = b"".join(self._kept) + bytes(self._buffer)
        handoff = Handoff(unread, bytes(self._out), frozenset(self._private), frozenset(self._acknowledged))
        self._kept, self._buffer, self._out = [], bytearray(), bytearray()
        return handoff

    def _run(self) -> None:
        try:
            self._serve()
        except Exception as exc:  # noqa: BLE001 - whatever went wrong, the gateway reads the rest
            self._reading = False
            log.warning("warm start: stopped answering early: %s", exc)

    def _serve(self) -> None:
        while True:
            reading = self._reading and len(self._out) < OUT_LIMIT
            readable = [self._wake_r, 0] if reading else [self._wake_r]
            ready, writable, _ = select.select(readable, [1] if self._out else [], [])
            if self._wake_r in ready:
                return
            if writable:
                self._write()
                self._lines()  # the lines read before the answers reached OUT_LIMIT, now there is room
            if 0 in ready:
                chunk = os.read(0, 1 << 16)
                if not chunk:
                    self._reading = False  # EOF: the gateway sees it too, after the kept lines
                    continue
                self._buffer += chunk
                self._lines()

    def _write(self) -> None:
        try:
            written = os.write(1, self._out)
        except BlockingIOError:
            return
        except OSError:
            self._out.clear()  # the client closed its end: nothing more reaches it
            return
        del self._out[:written]

    def _lines(self) -> None:
        while len(self._out) < OUT_LIMIT and (end := self._buffer.find(b"\n")) >= 0:
            line = bytes(self._buffer[: end + 1])
            del self._buffer[: end + 1]
            try:
                self._line(line)
            except Exception:
                self._keep(line)  # not answered here: the gateway answers it (and reads the rest)
                raise
        if len(self._buffer) > LINE_LIMIT or self._kept_bytes > KEPT_LIMIT:
            self._reading = False  # the rest is the gateway's to read, as it arrives
        if self._out:
            self._write()

    def _keep(self, line: bytes) -> None:
        self._kept.append(line)
        self._kept_bytes += len(line)

    def _line(self, line: bytes) -> None:
        if self._era == "gateway" or len(line) > LINE_LIMIT:
            self._keep(line)
            return
        try:  # text first: json takes a byte-order mark in bytes, the gateway's parser does not
            message = json.loads(line.decode("utf-8"))
        except (ValueError, RecursionError):  # not JSON, or nested past this parser's limit: the gateway's
            message = None
        request_id = _plain_id(message.get("id")) if isinstance(message, dict) else None
        if (
            not isinstance(message, dict)
            or message.get("jsonrpc") != "2.0"
            or request_id is None
            or not isinstance(message.get("method"), str)
        ):
            self._keep(line)  # a notification, a response, or something only the gateway answers
            notification = isinstance(message, dict) and "id" not in message and "method" in message
            if self._era is None and not notification:
                self._era = "gateway"  # the gateway's session sees it first: everything after is its too
            return
        if message["method"] == LISTEN and self._acknowledge(message, request_id):
            self._keep(line)  # the gateway serves the stream, under the client's own id
            return
        answer = self._answer(message)
        if answer is None:
            self._keep(line)
            if self._era is None:
                self._era = "gateway"
            return
        self._out += answer.line(request_id)
        self._answered += 1
        if answer.method == "tools/list":
            self.listed = True

    def _answer(self, message: dict[str, Any]) -> Answer | None:
        """The recorded answer to ``message`` (None: the gateway answers it), opening the era."""
        record = self.record
        assert record is not None
        method, params = message["method"], message.get("params")
        if self._era is None and method == "initialize":
            version = _handshake_version(params)
            if version is None:
                return None
            answered = {v for m, v in record.answered() if m == "initialize"}
            negotiated = version if version in answered else LATEST_HANDSHAKE
            answer = record.answer("initialize", negotiated)
            if answer is not None:
                self._era, self._version = "handshake", negotiated
                self._replay(message)
            return answer
        if self._era == "handshake" and method in LISTS:
            if not _list_params(params):
                return None  # a cursor (the gateway's lists are one page) or anything else: the gateway's
            return record.answer(method, self._version)
        if self._era in (None, "modern") and method in ("server/discover", *LISTS):
            version = _modern_version(params)
            answer = record.answer(method, version) if version is not None else None
            if answer is not None and self._era is None:
                self._era = "modern"
                self._replay(message)  # the gateway's session opens in the era the client chose
            return answer
        return None

    def _acknowledge(self, message: dict[str, Any], request_id: bytes) -> bool:
        """Acknowledge a 2026-07-28 listen stream for list changes, as the gateway's session
        acknowledges it (``WatchingListen``: every kind asked for, true), once this end opened
        the 2026-07-28 era (Claude Code's ``server/discover`` probe) and if its envelope is one
        the record answers; one stream (the gateway bounds a principal's)."""
        params = message.get("params")
        if self._era != "modern" or self._acknowledged or not isinstance(params, dict):
            return False
        wanted = params.get("notifications")
        if set(params) != {"_meta", "notifications"} or not isinstance(wanted, dict):
            return False
        if not set(wanted) <= set(LIST_CHANGES) or not all(type(value) is bool for value in wanted.values()):
            return False
        version = _modern_version({"_meta": params["_meta"]})
        assert self.record is not None
        if version is None or self.record.answer("server/discover", version) is None:
            return False
        honored = ",".join(f'"{key}":true' for key in LIST_CHANGES if wanted.get(key))
        self._out += (
            b'{"jsonrpc":"2.0","method":"notifications/subscriptions/acknowledged","params":{"_meta":{"'
            + f"{_RESERVED}subscriptionId".encode()
            + b'":'
            + request_id
            + b'},"notifications":{'
            + honored.encode()
            + b"}}}\n"
        )
        self._acknowledged.add(message["id"])
        return True

    def _replay(self, message: dict[str, Any]) -> None:
        """Keep the era's opening request for the gateway's session, under an id only this end
        knows: its answer there is dropped (the client has this one)."""
        private = "prefixgate-prelude-" + secrets.token_hex(8)
        self._private.add(private)
        self._keep(json.dumps({**message, "id": private}, separators=(",", ":")).encode() + b"\n")


def _pipe(fd: int) -> bool:
    """Whether ``fd`` is a pipe or socket (how clients start a server); else the SDK's own stdio
    transport serves, and nothing is answered early."""
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode)


def _stop_children_on_signals(children: dict[str, Spawned]) -> None:
    """Until the gateway handles the stop signals itself, a stop signal ends every server
    started early (their own process groups: they would outlive the gateway) and exits."""
    if not children:
        return

    def stop(signum: int, frame: Any) -> None:
        for sent in (signal.SIGTERM, signal.SIGKILL):
            for child in children.values():
                try:
                    os.killpg(child.pid, sent)
                except OSError:
                    pass
            time.sleep(0.1)
        os._exit(128 + signum)

    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        if signum != signal.SIGHUP or signal.getsignal(signum) != signal.SIG_IGN:  # (nohup's stays ignored)
            signal.signal(signum, stop)
