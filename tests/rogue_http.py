"""A streamable-HTTP server that misbehaves at the HTTP level (tests/test_http_calls.py).

Just enough of the 2025-11-25 handshake to be listed; then each tool answers its call in a
way a real server might: an event stream with a log before the reply, cut before it (with
an event id to resume from, or without), an event that is not JSON, a reply with someone
else's id, a lone surrogate, a body that is not JSON, an error status with and without a
JSON-RPC error in it, 202 for a request, a redirect off the origin, an unexpected content
type, a gzip-compressed JSON body (one that decodes to 4 MiB: ``gzip_bomb``); with
``--ping-flood``, 20,000 pings on a call's stream whose answers it never takes; and at
``/sse-elsewhere`` an SSE server's stream naming an endpoint on another origin; at ``/sse`` an
SSE server whose one tool, ``ping_flood``, sends 20,000 pings on its stream and never takes the
POST of an answer (at ``/sse-forgetful``, one that answers ``logging/setLevel`` 404, as if it no
longer knew the session). Standard
library only: it starts in a few milliseconds. Prints its URL first.
"""

from __future__ import annotations

import gzip
import itertools
import json
import queue
import socket
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

SESSION = "rogue-session"
FIXED = "x"
"""The id of a message that fails to parse: the SDK's error quotes the message, so one with the
call's id (``"pg-3"`` on one path, ``3`` on the other) would read differently on each path."""
TOOLS = [
    "echo",
    "sse_log_then_reply",
    "sse_other_id",
    "sse_not_json",
    "sse_surrogate",
    "sse_cut",
    "sse_resume",
    "sse_resume_fails",
    "json_surrogate",
    "json_not_json",
    "json_bad_result",
    "status_500",
    "status_500_rpc_error",
    "status_404",
    "accepted",
    "redirect_away",
    "redirect_same",
    "json_until_close",
    "json_then_close",
    "text_plain",
    "peer",
    "close_idle",
    "gzip_json",
    "gzip_bomb",
]
ELSEWHERE = "/sse-elsewhere"
"""The path of an SSE stream whose ``endpoint`` event names another origin."""
SSE = "/sse"
"""The path of an SSE (2024-11-05) server's stream; its messages are posted to ``/messages``."""
FORGETFUL = "/sse-forgetful"
"""The same server, but a ``logging/setLevel`` posted is answered 404 (the session unknown)."""
_sse_out: queue.Queue[bytes] = queue.Queue()
"""What the SSE server sends next on its stream (the newest stream's: each has its own)."""
_resumable: dict[str, bytes] = {}
"""Event id -> the event a ``GET`` with that ``Last-Event-ID`` is sent."""
_lock = threading.Lock()
_keys = itertools.count(1)


def reply(request_id: Any, text: str) -> dict[str, Any]:
    """A result with the id last, so an error quoting the start of the message never shows it."""
    return {"jsonrpc": "2.0", "result": {"content": [{"type": "text", "text": text}]}, "id": request_id}


def event(message: dict[str, Any] | str, event_id: str | None = None) -> bytes:
    data = message if isinstance(message, str) else json.dumps(message, ensure_ascii=True)
    head = f"id: {event_id}\n" if event_id else ""
    return f"{head}event: message\ndata: {data}\n\n".encode()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:  # noqa: N802
        msg = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))))
        method, request_id = msg.get("method"), msg.get("id")
        if self.path.startswith("/messages"):
            if method == "logging/setLevel" and "forgetful" in self.path:
                self.respond(404, "text/plain", b"no such session")
            else:
                self.sse_message(method, request_id)
        elif method is None and str(request_id).startswith("flood-"):  # (``--ping-flood``: never answered)
            self.rfile.read(1)  # held open until the client goes
        elif request_id is None or method is None:
            self.respond(202, "text/plain", b"")
        elif method == "initialize":
            result = {
                "protocolVersion": "2025-11-25",
                "capabilities": {"tools": {}, "logging": {}},
                "serverInfo": {"name": "rogue-http", "version": "0"},
            }
            self.json({"jsonrpc": "2.0", "id": request_id, "result": result}, session=True)
        elif method == "tools/list":
            tools = [{"name": name, "inputSchema": {"type": "object"}} for name in TOOLS]
            self.json({"jsonrpc": "2.0", "id": request_id, "result": {"tools": tools}})
        elif method == "tools/call" and "again" in self.path:  # the redirect_same call, followed here
            self.json(reply(request_id, "followed a redirect on the origin"))
        elif method == "tools/call":
            self.call(request_id, (msg.get("params") or {}).get("name", ""))
        elif method == "ping":
            self.json({"jsonrpc": "2.0", "id": request_id, "result": {}})
        else:
            self.json({"jsonrpc": "2.0", "id": request_id, "error": {"code": -32601, "message": f"no {method}"}})

    def sse_message(self, method: Any, request_id: Any) -> None:
        """A message to the SSE server: accepted (202), and answered on its stream (``_sse_out``)."""
        if method is None and str(request_id).startswith("flood-"):  # (an answer to a ping: never taken)
            self.rfile.read(1)  # held open until the client goes
            return
        self.respond(202, "text/plain", b"")
        if request_id is None or method is None:
            return
        if method == "initialize":
            result: dict[str, Any] = {
                "protocolVersion": "2024-11-05",
                "capabilities": {"tools": {}, "logging": {}},
                "serverInfo": {"name": "rogue-sse", "version": "0"},
            }
            _sse_out.put(event({"jsonrpc": "2.0", "id": request_id, "result": result}))
        elif method == "tools/list":
            tools = [{"name": "ping_flood", "inputSchema": {"type": "object"}}]
            _sse_out.put(event({"jsonrpc": "2.0", "id": request_id, "result": {"tools": tools}}))
        elif method == "tools/call":  # 20,000 pings (ids of 1 KB), whose answers it never takes, then the reply
            pings = b"".join(
                event({"jsonrpc": "2.0", "id": f"flood-{i}-" + "x" * 1000, "method": "ping"}) for i in range(20_000)
            )
            _sse_out.put(pings + event(reply(request_id, "pinged 20000 times")))
        else:
            _sse_out.put(event({"jsonrpc": "2.0", "id": request_id, "result": {}}))

    def call(self, request_id: Any, name: str) -> None:
        log = {"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "error", "data": name}}
        if name == "echo":
            self.json(reply(request_id, "plain json"))
        elif name == "sse_log_then_reply":
            self.sse(event(log) + event(reply(request_id, "after a log")))
        elif name == "sse_other_id":  # on a call's stream every reply is the call's (the SDK's rule)
            self.sse(event(reply("someone-else", "the id was not ours")))
        elif name == "sse_not_json":
            self.sse(event("this is not json"))
        elif name == "sse_surrogate":
            self.sse(event(reply(FIXED, "half an emoji \ud83d")))
        elif name == "sse_cut":  # a log, then the stream ends without the reply and without an id
            self.sse(event(log))
        elif name == "sse_resume":  # a priming event and a retry hint; the reply waits for the resumed GET
            with _lock:
                key = f"e{next(_keys)}"
                _resumable[key] = event(reply(request_id, "resumed after a cut"), key + "-reply")
            self.sse(f"id: {key}\nretry: 10\nevent: message\ndata: \n\n".encode() + event(log))
        elif name == "sse_resume_fails":  # resumable, it says, but every GET resuming it is refused (405)
            key = f"gone{next(_keys)}"
            self.sse(f"id: {key}\nretry: 10\nevent: message\ndata: \n\n".encode() + event(log))
        elif name == "json_surrogate":
            self.respond(200, "application/json", json.dumps(reply(FIXED, "lone \udc00 here")).encode())
        elif name == "json_not_json":
            self.respond(200, "application/json", b"<html>not json</html>")
        elif name == "json_bad_result":
            body = {"jsonrpc": "2.0", "result": ["not", "an", "object"], "id": FIXED}
            self.respond(200, "application/json", json.dumps(body).encode())
        elif name == "status_500":
            self.respond(500, "text/plain", b"internal trouble")
        elif name == "status_500_rpc_error":
            error = {"jsonrpc": "2.0", "id": None, "error": {"code": -32603, "message": "the backend is down"}}
            self.respond(500, "application/json", json.dumps(error).encode())
        elif name == "ping_flood":  # 20,000 pings (ids of 1 KB), whose answers it never takes, then the reply
            pings = b"".join(
                event({"jsonrpc": "2.0", "id": f"flood-{i}-" + "x" * 1000, "method": "ping"}) for i in range(20_000)
            )
            self.sse(pings + event(reply(request_id, "pinged 20000 times")))
        elif name == "status_404":
            self.respond(404, "text/plain", b"no such session")
        elif name == "accepted":
            self.respond(202, "text/plain", b"")
        elif name == "redirect_away":
            self.respond(307, "text/plain", b"", location="http://elsewhere.invalid/mcp")
        elif name == "redirect_same":  # followed (a 307 keeps the POST), as the SDK follows one on the origin
            self.respond(307, "text/plain", b"", location="/mcp?again=1")
        elif name == "json_until_close":  # no Content-Length: the body ends with the connection
            self.respond(
                200, "application/json", json.dumps(reply(request_id, "read to the end")).encode(), sized=False
            )
        elif name == "json_then_close":  # sized, and the connection is not kept
            self.respond(200, "application/json", json.dumps(reply(request_id, "then closed")).encode(), sized=None)
        elif name == "peer":  # the client's port: which connection the call came on
            self.json(reply(request_id, str(self.client_address[1])))
        elif name == "close_idle":  # answered on a kept connection, which the server closes soon after
            self.json(reply(request_id, "closing soon"))
            threading.Timer(0.2, self.connection.shutdown, (socket.SHUT_RDWR,)).start()
        elif name == "gzip_json":  # compressed, asked for or not
            body = gzip.compress(json.dumps(reply(request_id, "decoded")).encode())
            self.respond(200, "application/json", body, encoding="gzip")
        elif name == "gzip_bomb":  # 4 KiB on the wire, 4 MiB once decoded
            head, tail = json.dumps(reply(request_id, "@")).encode().split(b"@")
            self.respond(200, "application/json", gzip.compress(head + b"a" * (4 << 20) + tail), encoding="gzip")
        else:
            self.respond(200, "text/plain", b"plain text, not MCP")

    def do_GET(self) -> None:  # noqa: N802
        if self.path == ELSEWHERE:  # an SSE (2024-11-05) server whose endpoint is on another origin
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.end_headers()
            self.wfile.write(b"event: endpoint\ndata: http://elsewhere.example:8080/messages?session_id=s3cr3t\n\n")
            self.wfile.flush()
            self.rfile.read(1)  # held open until the client goes
            return
        if self.path in (SSE, FORGETFUL):
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.end_headers()
            endpoint = "/messages?forgetful=1" if self.path == FORGETFUL else "/messages"
            global _sse_out
            _sse_out = out = queue.Queue()  # (a stream the client left holds its own, unread)
            try:
                self.wfile.write(f"event: endpoint\ndata: {endpoint}\n\n".encode())
                while True:
                    self.wfile.flush()
                    self.wfile.write(out.get())
            except OSError:  # the client went
                return
        with _lock:
            resumed = _resumable.pop(self.headers.get("last-event-id", ""), None)
        if resumed is None:
            self.respond(405, "text/plain", b"")
        else:
            self.sse(resumed)

    def do_DELETE(self) -> None:  # noqa: N802
        self.respond(200, "text/plain", b"")

    def json(self, message: dict[str, Any], *, session: bool = False) -> None:
        self.respond(200, "application/json", json.dumps(message).encode(), session=session)

    def sse(self, body: bytes) -> None:
        self.respond(200, "text/event-stream", body)

    def respond(
        self,
        status: int,
        content_type: str,
        body: bytes,
        *,
        session: bool = False,
        location: str = "",
        sized: bool | None = True,
        encoding: str = "",
    ) -> None:
        """``sized``: with a Content-Length (True), without one and the connection closed after
        the body (False), with one and the connection closed all the same (None)."""
        self.send_response(status)
        self.send_header("content-type", content_type)
        if sized is not False:
            self.send_header("content-length", str(len(body)))
        if sized is not True:
            self.send_header("connection", "close")
        if session:
            self.send_header("mcp-session-id", SESSION)
        if location:
            self.send_header("location", location)
        if encoding:
            self.send_header("content-encoding", encoding)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def main() -> None:
    if "--ping-flood" in sys.argv[1:]:
        TOOLS.append("ping_flood")
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    sys.stdout.write(f"http://127.0.0.1:{server.server_address[1]}/mcp\n")
    sys.stdout.flush()
    server.serve_forever()


if __name__ == "__main__":
    main()
