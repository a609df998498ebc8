"""A loopback stand-in for the Anthropic Messages and OpenAI Responses/Chat APIs, for ``bench.agents``.

A real coding agent is pointed at it instead of its provider, so a run needs no account and
sends nothing off the machine. Every request is recorded (time, path, JSON body) and answered
with the smallest reply that ends the agent's turn: one short assistant text and a normal stop.
What the benchmark reads is the ``tools`` array of the first model request.

The same port is also an HTTP proxy of last resort: the agents are started with
``HTTP(S)_PROXY`` pointing here, so a connection they try to any other host arrives as a
``CONNECT host:port`` (or an absolute-URI request), is recorded in :attr:`StandinProvider.foreign`
and refused with 403. Nothing is ever forwarded.

    python -m bench.standin_provider [PORT]    # run alone and print what arrives
"""

from __future__ import annotations

import json
import re
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

TEXT = "hi"
MODEL_PATHS = ("/v1/messages", "/v1/responses", "/v1/chat/completions")


@dataclass
class Request:
    """One request as it arrived: when (``time.perf_counter``), method, path, parsed JSON body."""

    at: float
    method: str
    path: str
    body: Any
    headers: dict[str, str]

    @property
    def is_model_call(self) -> bool:
        """A request that asks the model for a turn (not a token count, a model list, ...)."""
        return self.method == "POST" and self.path.split("?")[0].rstrip("/") in MODEL_PATHS

    @property
    def tool_names(self) -> list[str]:
        """Function names in the request's ``tools`` (Anthropic ``name``, OpenAI ``name`` or ``function.name``)."""
        tools = self.body.get("tools") if isinstance(self.body, dict) else None
        names: list[str] = []
        for tool in tools or []:
            if not isinstance(tool, dict):
                continue
            name = tool.get("name") or (tool.get("function") or {}).get("name")
            if isinstance(name, str):
                names.append(name)
            # Responses API namespaces (a group of functions under one name) hold their own tools.
            for inner in tool.get("tools") or []:
                if isinstance(inner, dict) and isinstance(inner.get("name"), str):
                    names.append(f"{name}.{inner['name']}" if name else inner["name"])
        return names

    @property
    def deferred_names(self) -> list[str]:
        """Tools the request names without declaring them: Claude Code's tool search (on by
        default in 2.1.332) lists each MCP tool by name in a system message, one a line after
        "deferred tools are now available via ToolSearch ...:", and leaves its schema for the
        model to load with ``ToolSearch``; such a tool is not in ``tools``."""
        names: list[str] = []
        for text in _texts(self.body):
            for listed in _DEFERRED.finditer(text):
                names += [line.strip() for line in listed.group(1).splitlines() if line.strip()]
        return names


_DEFERRED = re.compile(r"deferred tools are now available via ToolSearch[^\n]*\n((?:[^\n]+\n?)+)")


def _texts(value: Any) -> Iterator[str]:
    """Every string in a JSON value (the request's messages and system prompt, wherever they hold text)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _texts(item)
    elif isinstance(value, list):
        for item in value:
            yield from _texts(item)


@dataclass
class StandinProvider:
    """The server and what it has seen; :meth:`start` binds 127.0.0.1 on a free port (or ``port``)."""

    port: int = 0
    requests: list[Request] = field(default_factory=list)
    foreign: list[str] = field(default_factory=list)
    _server: ThreadingHTTPServer | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> StandinProvider:
        provider = self

        class Handler(_Handler):
            owner = provider

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, name="standin-provider", daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def reset(self) -> None:
        """Forget what was recorded (between runs of one agent)."""
        with self._lock:
            self.requests.clear()
            self.foreign.clear()

    def record(self, request: Request) -> None:
        with self._lock:
            self.requests.append(request)

    def model_calls(self) -> list[Request]:
        with self._lock:
            return [r for r in self.requests if r.is_model_call]

    def wait_for_model_call(self, timeout: float) -> Request | None:
        """The first model request, waiting up to ``timeout`` seconds for it."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            calls = self.model_calls()
            if calls:
                return calls[0]
            time.sleep(0.02)
        return None


class _Handler(BaseHTTPRequestHandler):
    """Routes by path; the answers are fixed, only the model name and streaming flag are echoed."""

    owner: StandinProvider
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        """Silent: the recorded requests are the log."""

    # --- proxy side: anything for another host is recorded and refused -----------------

    def do_CONNECT(self) -> None:  # noqa: N802 - http.server's naming
        self.owner.foreign.append(f"CONNECT {self.path}")
        self._send(403, b"stand-in: no outside network", "text/plain")

    def _foreign(self) -> bool:
        """An absolute-URI (proxy) request for a host other than this one: record and refuse."""
        if not self.path.startswith(("http://", "https://")):
            return False
        host = self.path.split("/", 3)[2]
        if host in (f"127.0.0.1:{self.owner.port}", f"localhost:{self.owner.port}"):
            self.path = "/" + self.path.split("/", 3)[3] if self.path.count("/") >= 3 else "/"
            return False
        self.owner.foreign.append(f"{self.command} {self.path}")
        self._send(403, b"stand-in: no outside network", "text/plain")
        return True

    # --- provider side -----------------------------------------------------------------

    def do_GET(self) -> None:  # noqa: N802
        if self._foreign():
            return
        self._note(None)
        path = self.path.split("?")[0].rstrip("/")
        if path.endswith("/models"):
            # Anthropic and OpenAI list shapes at once; Codex's own catalog shape is ``models``.
            self._json({"object": "list", "data": [], "models": [], "has_more": False})
        else:
            self._json({})

    def do_HEAD(self) -> None:  # noqa: N802
        if self._foreign():
            return
        self._note(None)
        self._send(200, b"", "application/json")

    def do_POST(self) -> None:  # noqa: N802
        if self._foreign():
            return
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else self._read_chunked()
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = {"_raw": raw[:2000].decode("utf-8", "replace")}
        self._note(body)
        path = self.path.split("?")[0].rstrip("/")
        model = body.get("model", "standin") if isinstance(body, dict) else "standin"
        stream = bool(body.get("stream")) if isinstance(body, dict) else False
        if path.endswith("/messages/count_tokens"):
            self._json({"input_tokens": 1})
        elif path.endswith("/messages"):
            self._answer(stream, _anthropic_events(model), _anthropic_message(model))
        elif path.endswith("/responses"):
            self._answer(stream, _responses_events(model), _response(model))
        elif path.endswith("/chat/completions"):
            self._answer(stream, _chat_events(model), _chat_completion(model))
        else:
            self._json({})

    def _answer(self, stream: bool, events: Iterator[tuple[str | None, Any]], whole: dict[str, Any]) -> None:
        if stream:
            self._sse(events)
        else:
            self._json(whole)

    def _read_chunked(self) -> bytes:
        if "chunked" not in (self.headers.get("Transfer-Encoding") or ""):
            return b""
        out = b""
        while True:
            size = int(self.rfile.readline().strip() or b"0", 16)
            if size == 0:
                self.rfile.readline()
                return out
            out += self.rfile.read(size)
            self.rfile.readline()

    def _note(self, body: Any) -> None:
        headers = {k.lower(): v for k, v in self.headers.items() if k.lower() not in ("authorization", "x-api-key")}
        self.owner.record(Request(time.perf_counter(), self.command, self.path, body, headers))

    def _send(self, status: int, payload: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def _json(self, value: Any) -> None:
        self._send(200, json.dumps(value).encode(), "application/json")

    def _sse(self, events: Iterator[tuple[str | None, Any]]) -> None:
        """Server-sent events, then close: no chunking, the agent reads until the socket ends."""
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        for name, data in events:
            head = f"event: {name}\n" if name else ""
            payload = data if isinstance(data, str) else json.dumps(data)
            self.wfile.write(f"{head}data: {payload}\n\n".encode())
        self.wfile.flush()
        self.close_connection = True


# --- the fixed answers -------------------------------------------------------------------


def _anthropic_message(model: str) -> dict[str, Any]:
    return {
        "id": "msg_standin",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [{"type": "text", "text": TEXT}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 1, "output_tokens": 1},
    }


def _anthropic_events(model: str) -> Iterator[tuple[str | None, Any]]:
    start = _anthropic_message(model) | {"content": [], "stop_reason": None}
    yield "message_start", {"type": "message_start", "message": start}
    yield (
        "content_block_start",
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
    )
    yield (
        "content_block_delta",
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": TEXT}},
    )
    yield "content_block_stop", {"type": "content_block_stop", "index": 0}
    yield (
        "message_delta",
        {
            "type": "message_delta",
            "delta": {"stop_reason": "end_turn", "stop_sequence": None},
            "usage": {"output_tokens": 1},
        },
    )
    yield "message_stop", {"type": "message_stop"}


def _message_item(status: str) -> dict[str, Any]:
    content = [{"type": "output_text", "text": TEXT, "annotations": []}] if status == "completed" else []
    return {"type": "message", "id": "msg_standin", "role": "assistant", "status": status, "content": content}


def _response(model: str, status: str = "completed") -> dict[str, Any]:
    output = [_message_item("completed")] if status == "completed" else []
    return {
        "id": "resp_standin",
        "object": "response",
        "created_at": int(time.time()),
        "status": status,
        "model": model,
        "output": output,
        "usage": {
            "input_tokens": 1,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 1,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 2,
        },
    }


def _responses_events(model: str) -> Iterator[tuple[str | None, Any]]:
    yield "response.created", {"type": "response.created", "response": _response(model, "in_progress")}
    yield (
        "response.output_item.added",
        {
            "type": "response.output_item.added",
            "output_index": 0,
            "item": _message_item("in_progress"),
        },
    )
    yield (
        "response.output_text.delta",
        {
            "type": "response.output_text.delta",
            "item_id": "msg_standin",
            "output_index": 0,
            "content_index": 0,
            "delta": TEXT,
        },
    )
    yield (
        "response.output_item.done",
        {
            "type": "response.output_item.done",
            "output_index": 0,
            "item": _message_item("completed"),
        },
    )
    yield "response.completed", {"type": "response.completed", "response": _response(model)}


def _chat_completion(model: str) -> dict[str, Any]:
    return {
        "id": "chatcmpl-standin",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": TEXT}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }


def _chat_events(model: str) -> Iterator[tuple[str | None, Any]]:
    base = {"id": "chatcmpl-standin", "object": "chat.completion.chunk", "created": int(time.time()), "model": model}
    yield None, base | {"choices": [{"index": 0, "delta": {"role": "assistant", "content": TEXT}}]}
    yield None, base | {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
    yield None, "[DONE]"


def main() -> None:
    """Serve until interrupted, printing each request's path and tool count."""
    provider = StandinProvider(int(sys.argv[1]) if len(sys.argv) > 1 else 0).start()
    print(f"stand-in provider at {provider.url}", flush=True)
    seen = 0
    try:
        while True:
            time.sleep(0.2)
            for request in provider.requests[seen:]:
                print(f"{request.method} {request.path} tools={len(request.tool_names)}", flush=True)
            seen = len(provider.requests)
    except KeyboardInterrupt:
        provider.stop()


if __name__ == "__main__":
    main()
