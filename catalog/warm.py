"""The warm-start record: what a verified catalog published, kept to answer the next start at once.

An agent gives a server about a second to list its tools (Codex CLI starts its session
without a slower one), while the discovery barrier waits for the slowest server. The
catalog a gateway publishes is almost always the one it published last time, so after
every verified build the gateway keeps, under a key of everything that determines the
catalog (``gateway.launch``), the exact answers it gave (``initialize``,
``server/discover`` and the lists, per protocol version) and what each server
contributed. The next start with the same key answers from it before any server is up,
and the barrier, run in the background, either confirms the bytes or starts a new epoch.

Pure: bytes in, values out. The file (or Redis value) is untrusted input: every field
is checked, every blob is bounded and verified by its SHA-256 before use, and anything
doubtful raises :class:`RecordError` with a reason, so a damaged record is ignored, never
published. The layout is a magic line, one JSON header line, then the blobs it indexes
(content-addressed, so a tools array shared by several protocol versions is kept once).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from catalog.model import JSON
from catalog.pieces import encode_in_pieces, nested_within

MAGIC = b"prefixgate warm-start record 1\n"
MAX_RECORD_BYTES = 64 << 20
"""A record larger than this is neither written nor read (a 5,000-tool catalog is ~15 MB)."""
MAX_HEADER_BYTES = 1 << 20
MAX_MISSED = 3
"""Starts in a row a server may fail to become ready before the record stops carrying its tools."""
LISTS = ("tools/list", "prompts/list", "resources/list", "resources/templates/list")
"""The lists a warm start answers: a client may count a server as connected only once all of
them are answered (Claude Code waits for tools, prompts and resources)."""
METHODS = ("initialize", "server/discover", *LISTS)
"""The requests a warm start answers from the record."""
TOOLS_SHELL = b'{"tools":[]'
"""How a ``tools/list`` answer's result begins before its tools are spliced in."""
MAX_NESTING = 500
"""How deep an item of a server's lists may nest once the record cannot be encoded with them
all (``_contributions``): deeper ones are then left out. ``json`` writes and reads one level
per C recursion, against the interpreter's limit (1,000 by default, less the frames of
whoever calls it), while the gateway takes a server's message nested up to
``gateway.jsontext.MAX_DEPTH``; this depth the reader takes wherever it runs. The catalog
quarantines such a tool long before ("nested too deeply": its checks recurse), so the
record's catalog, which the reader rebuilds and checks against the fingerprint, is the same
without it."""
_HEX64 = frozenset("0123456789abcdef")


class RecordError(ValueError):
    """A record that is not exactly what :func:`encode_record` writes; ``str()`` says what is wrong."""


def record_key(identity: Mapping[str, Any]) -> str:
    """SHA-256 hex of the launch identity's canonical JSON: the record's name and its first check."""
    text = json.dumps(identity, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Contribution:
    """What one server offered when the record was written (the raw lists, as it listed them)."""

    tools: tuple[JSON, ...] = ()
    resources: tuple[JSON, ...] = ()
    templates: tuple[JSON, ...] = ()
    prompts: tuple[JSON, ...] = ()
    capabilities: Mapping[str, JSON] = field(default_factory=dict)
    missed: int = 0
    """Starts in a row, up to the one that wrote this record, in which the server did not become ready."""

    def as_json(self, nesting: int | None = None) -> dict[str, JSON]:
        """As recorded; ``nesting``: leave out each listed item nested deeper than that."""

        def kept(items: tuple[JSON, ...]) -> list[JSON]:
            return list(items) if nesting is None else [item for item in items if nested_within(item, nesting)]

        return {
            "tools": kept(self.tools),
            "resources": kept(self.resources),
            "templates": kept(self.templates),
            "prompts": kept(self.prompts),
            "capabilities": dict(self.capabilities),
            "missed": self.missed,
        }


def carried(previous: Contribution) -> Contribution | None:
    """A server that did not become ready this start: its recorded tools are kept for the
    next start, unless it has now missed :data:`MAX_MISSED` starts in a row (then the next
    start publishes without it, and it rejoins as a new epoch when it comes back)."""
    missed = previous.missed + 1
    return None if missed >= MAX_MISSED else replace(previous, missed=missed)


@dataclass(frozen=True)
class Answer:
    """One answer as the gateway's own pipeline wrote it: the JSON ``result`` for a request of
    ``method`` at protocol ``version``. A ``tools/list`` result is its shell (``{"tools":[]``
    first) and the tools array to splice in, so versions that share a tools array share a blob."""

    method: str
    version: str
    result: bytes
    tools: bytes | None = None

    def line(self, request_id: bytes) -> bytes:
        """The whole JSON-RPC response line for a request whose id is ``request_id`` (JSON)."""
        result = self.result
        if self.tools is not None:
            result = b'{"tools":' + self.tools + result[len(TOOLS_SHELL) :]
        return b'{"jsonrpc":"2.0","id":' + request_id + b',"result":' + result + b"}\n"


def encode_record(
    key: str, fingerprint: str, servers: Mapping[str, Contribution], answers: Iterable[Answer]
) -> bytes:
    """The record's bytes. ``fingerprint`` is the published list's, which the reader checks
    its rebuilt catalog against; ``answers`` may be empty (the reader then rebuilds only)."""
    blobs: dict[str, bytes] = {}

    def blob(data: bytes) -> str:
        digest = hashlib.sha256(data).hexdigest()
        blobs.setdefault(digest, data)
        return digest

    contributions = _contributions(servers)
    listed = []
    for answer in answers:
        if answer.tools is not None and not answer.result.startswith(TOOLS_SHELL):
            raise RecordError(f"{answer.method} {answer.version}: a tools answer must begin with {TOOLS_SHELL!r}")
        entry = {"method": answer.method, "version": answer.version, "result": blob(answer.result)}
        if answer.tools is not None:
            entry["tools"] = blob(answer.tools)
        listed.append(entry)
    header: dict[str, JSON] = {"key": key, "fingerprint": fingerprint, "servers": blob(contributions)}
    header["answers"] = listed
    table, offset = {}, 0
    for digest, data in blobs.items():
        table[digest] = [offset, len(data)]
        offset += len(data)
    header["blobs"] = table
    head = json.dumps(header, separators=(",", ":"), sort_keys=True).encode("ascii") + b"\n"
    return b"".join((MAGIC, head, *blobs.values()))


def _contributions(servers: Mapping[str, Contribution]) -> bytes:
    """The servers blob: each server's lists as it listed them, but an item nested deeper
    than ``MAX_NESTING``, left out once encoding them all hits the recursion limit (a walk of
    every item would cost a 5,000-tool record half as much again as encoding it)."""
    # One server's tools at a time: built beside the event loop (gateway/engine/warm.py), one
    # json.dumps of a 5,000-tool record held the loop ~0.1 s all the same (catalog/pieces.py).
    try:
        return encode_in_pieces({sid: servers[sid].as_json() for sid in sorted(servers)}, _compact)
    except RecursionError:
        return encode_in_pieces({sid: servers[sid].as_json(MAX_NESTING) for sid in sorted(servers)}, _compact)


def _compact(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


class Record:
    """A decoded record: its header checked at once, each blob checked (bounds, SHA-256) when first used."""

    def __init__(self, data: bytes) -> None:
        if len(data) > MAX_RECORD_BYTES:
            raise RecordError(f"{len(data)} bytes, over the {MAX_RECORD_BYTES}-byte limit")
        if not data.startswith(MAGIC):
            raise RecordError("not a prefixgate warm-start record (or another version of one)")
        end = data.find(b"\n", len(MAGIC), len(MAGIC) + MAX_HEADER_BYTES)
        if end < 0:
            raise RecordError("no header line")
        try:
            header = json.loads(data[len(MAGIC) : end])
        except (ValueError, RecursionError) as exc:  # (a shared store's record may be anyone's bytes)
            raise RecordError(f"header is not JSON ({_first_line(exc)})") from None
        self.data = data
        self.where = ""
        """Where the reader found it (its own label: the file store, or a shared store)."""
        self._data = memoryview(data)[end + 1 :]
        self._checked: dict[str, bytes] = {}
        self._parsed: dict[str, Contribution] | None = None
        if not isinstance(header, dict):
            raise RecordError("header is not an object")
        self.key = _digest(header.get("key"), "key")
        self.fingerprint = _digest(header.get("fingerprint"), "fingerprint")
        table = header.get("blobs")
        if not isinstance(table, dict):
            raise RecordError("blobs is not an object")
        self._blobs: dict[str, tuple[int, int]] = {}
        for digest, span in table.items():
            _digest(digest, "a blob name")
            if (
                not isinstance(span, list)
                or len(span) != 2
                or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in span)
                or span[0] + span[1] > len(self._data)
            ):
                raise RecordError(f"blob {digest[:12]} lies outside the record")
            self._blobs[digest] = (span[0], span[1])
        self._servers = self._name(header.get("servers"), "servers")
        answers = header.get("answers")
        if not isinstance(answers, list):
            raise RecordError("answers is not a list")
        self._answers: dict[tuple[str, str], tuple[str, str | None]] = {}
        for entry in answers:
            if not isinstance(entry, dict):
                raise RecordError("an answer is not an object")
            method, version = entry.get("method"), entry.get("version")
            if method not in METHODS or not isinstance(version, str):
                raise RecordError(f"unknown answer {method!r} {version!r}")
            tools = entry.get("tools")
            self._answers[(method, version)] = (
                self._name(entry.get("result"), "an answer"),
                None if tools is None else self._name(tools, "a tools answer"),
            )

    def _name(self, value: object, what: str) -> str:
        digest = _digest(value, what)
        if digest not in self._blobs:
            raise RecordError(f"{what} names a blob the record does not hold")
        return digest

    def blob(self, digest: str) -> bytes:
        """A blob's bytes, verified against its name (RecordError if they do not match)."""
        data = self._checked.get(digest)
        if data is None:
            offset, length = self._blobs[digest]
            data = bytes(self._data[offset : offset + length])
            if hashlib.sha256(data).hexdigest() != digest:
                raise RecordError(f"blob {digest[:12]} is damaged (its SHA-256 does not match)")
            self._checked[digest] = data
        return data

    def answered(self) -> list[tuple[str, str]]:
        """Every (method, version) the record has an answer for."""
        return sorted(self._answers)

    def answer(self, method: str, version: str) -> Answer | None:
        """The recorded answer, or None when the record has none for that method and version."""
        names = self._answers.get((method, version))
        if names is None:
            return None
        result, tools = names
        return Answer(method, version, self.blob(result), None if tools is None else self.blob(tools))

    def servers(self) -> dict[str, Contribution]:
        """Each server's contribution (RecordError if the blob is damaged or malformed), parsed once."""
        if self._parsed is not None:
            return dict(self._parsed)
        try:
            data = json.loads(self.blob(self._servers))
        except (ValueError, RecursionError) as exc:
            raise RecordError(f"servers blob is not JSON ({_first_line(exc)})") from None
        if not isinstance(data, dict):
            raise RecordError("servers blob is not an object")
        self._parsed = {str(sid): _contribution(sid, value) for sid, value in data.items()}
        return dict(self._parsed)


def _digest(value: object, what: str) -> str:
    if not isinstance(value, str) or len(value) != 64 or not set(value) <= _HEX64:
        raise RecordError(f"{what} is not a SHA-256 hex digest")
    return value


def _contribution(sid: str, value: object) -> Contribution:
    if not isinstance(value, dict):
        raise RecordError(f"server {sid!r} is not an object")
    lists = {}
    for key in ("tools", "resources", "templates", "prompts"):
        items = value.get(key)
        if not isinstance(items, list) or not all(isinstance(item, dict) for item in items):
            raise RecordError(f"server {sid!r}: {key} is not a list of objects")
        lists[key] = tuple(items)
    capabilities, missed = value.get("capabilities"), value.get("missed")
    if not isinstance(capabilities, dict):
        raise RecordError(f"server {sid!r}: capabilities is not an object")
    if not isinstance(missed, int) or isinstance(missed, bool) or not 0 <= missed < MAX_MISSED:
        raise RecordError(f"server {sid!r}: missed is not a count below {MAX_MISSED}")
    return Contribution(capabilities=capabilities, missed=missed, **lists)


def _first_line(exc: BaseException) -> str:
    """A parse error's message, one bounded line (a RecursionError's names the nesting)."""
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return text if len(text) <= 200 else text[:199] + "…"
