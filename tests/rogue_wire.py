"""A deliberately misbehaving MCP server: raw JSON lines on stdin/stdout, nothing validated.

It speaks just enough of the 2025-11-25 handshake to be listed, then misbehaves on the
wire when its tools are called: lone surrogates (``"\\ud800"``, what a JavaScript server
writes when it cuts an emoji in half) in results, log notifications, resource names and
prompt descriptions; results over any sane size, with the id first (Python) or last
(TypeScript); floods of log notifications (``n`` of ``size`` bytes) and of stderr without a
newline; a schema nested far too deeply; and, after ``stop_reading``, a server that never
reads its input again. ``add_tool`` lists one more tool from then on and sends
``tools/list_changed``. ``ask_flood`` sends ``n`` ``roots/list`` requests before it answers;
``answers`` tells how many answers to them came back, and how many were errors.
``ping_flood`` sends ``n`` pings (ids padded to ``size`` bytes), answers, and reads no more.
``bad_notices`` answers, then sends notifications that do not validate (a log level no
level is, progress that is no number, an update naming no URI) outside any call.
Options: ``--deep-schema N`` (list a tool nested N levels); ``--http`` (serve the same
over plain JSON-response HTTP on loopback, print the URL); ``--modern`` (speak 2026-07-28:
``server/discover``, the handshake refused with -32022).
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

LONE = "\ud800"
OUT = sys.stdout.buffer


def send(message: dict[str, Any]) -> None:
    # ensure_ascii writes a lone surrogate as the escape \ud800: valid JSON, invalid Unicode.
    OUT.write(json.dumps(message, ensure_ascii=True).encode("ascii") + b"\n")
    OUT.flush()


def text(value: str, is_error: bool = False) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": value}], "isError": is_error}


def deep_tool(depth: int) -> str:
    """A tool whose schema nests ``depth`` levels, as JSON text (json.dumps would recurse)."""
    node = '{"type":"string"}'
    for _ in range(depth):
        node = '{"type":"object","properties":{"a":' + node + "}}"
    return '{"name":"deep","description":"nested far too deeply","inputSchema":' + node + "}"


TOOLS = [
    {
        "name": name,
        "description": f"rogue {name}",
        "inputSchema": {
            "type": "object",
            "properties": {"n": {"type": "integer"}, "size": {"type": "integer"}, "text": {"type": "string"}},
        },
    }
    for name in (
        "surrogate_text",
        "log_surrogate",
        "echo",
        "big",
        "big_ts",
        "flood_logs",
        "flood_progress",
        "flood_stderr",
        "stderr_lines",
        "stderr_forge",
        "stdout_lines",
        "request_id",
        "rpc_error",
        "bad_result",
        "not_json",
        "later_fields",
        "malformed",
        "huge_number",
        "deep_result",
        "stop_reading",
        "add_tool",
        "ask_flood",
        "answers",
        "ping_flood",
        "bad_notices",
        "ok",
    )
]
MODERN = "--modern" in sys.argv
ANSWERS = {"result": 0, "error": 0}
"""The answers to its own requests (``ask_flood``) received so far, by kind."""


def stay_up() -> None:
    """Stay up, reading nothing, until the gateway that started it is gone: a test that kills
    the gateway with SIGKILL (which stops nothing behind it) leaves no orphan sleeping on."""
    parent = os.getppid()
    while os.getppid() == parent:
        time.sleep(1)
    sys.exit(0)


def call(request_id: Any, name: str, args: dict[str, Any], token: Any = None) -> None:
    n = int(args.get("n", 0))
    if name == "surrogate_text":
        send({"jsonrpc": "2.0", "id": request_id, "result": text(f"half an emoji: {LONE}!")})
    elif name == "log_surrogate":
        send(
            {
                "jsonrpc": "2.0",
                "method": "notifications/message",
                "params": {"level": "warning", "logger": f"l{LONE}", "data": f"log {LONE}"},
            }
        )
        send({"jsonrpc": "2.0", "id": request_id, "result": text("logged")})
    elif name == "echo":
        send({"jsonrpc": "2.0", "id": request_id, "result": text("echo: " + str(args.get("text", "")))})
    elif name == "big":  # id first, as Python servers write it
        head = json.dumps({"jsonrpc": "2.0", "id": request_id})[:-1].encode()
        OUT.write(head + b',"result":{"content":[{"type":"text","text":"' + b"x" * n + b'"}]}}\n')
        OUT.flush()
    elif name == "big_ts":  # id last, as the TypeScript SDK writes it
        OUT.write(
            b'{"result":{"content":[{"type":"text","text":"'
            + b"y" * n
            + b'"}]},"jsonrpc":"2.0","id":'
            + json.dumps(request_id).encode()
            + b"}\n"
        )
        OUT.flush()
    elif name == "flood_logs":
        line = (
            json.dumps(
                {
                    "jsonrpc": "2.0",
                    "method": "notifications/message",
                    "params": {"level": "info", "data": "z" * int(args.get("size", 1000))},
                }
            ).encode()
            + b"\n"
        )
        for _ in range(n):
            OUT.write(line)
        OUT.flush()
        sys.stderr.write(f"flooded: sent {n} log notifications\n")  # (what a test can wait for)
        sys.stderr.flush()
        send({"jsonrpc": "2.0", "id": request_id, "result": text(f"sent {n} log notifications")})
    elif name == "flood_progress":
        for i in range(n):
            notice = {"progressToken": token, "progress": i, "total": n, "message": "p" * 1000}
            OUT.write(
                json.dumps({"jsonrpc": "2.0", "method": "notifications/progress", "params": notice}).encode() + b"\n"
            )
        OUT.flush()
        send({"jsonrpc": "2.0", "id": request_id, "result": text(f"sent {n} progress notifications")})
    elif name == "flood_stderr":  # n bytes of stderr without a newline
        chunk = b"e" * 65536
        for _ in range(n // len(chunk)):
            sys.stderr.buffer.write(chunk)
        sys.stderr.buffer.flush()
        send({"jsonrpc": "2.0", "id": request_id, "result": text(f"wrote {n} bytes of stderr")})
    elif name == "stderr_forge":  # terminal escapes and a carriage return that would forge a log line
        sys.stderr.buffer.write(b"\x1b[2K\rprefixgate ERROR forged by a server\x07\n")
        sys.stderr.buffer.flush()
        send({"jsonrpc": "2.0", "id": request_id, "result": text("forged")})
    elif name == "stderr_lines":  # n chatty stderr lines
        for i in range(n):
            sys.stderr.buffer.write(b"chatter %d %s\n" % (i, b"w" * 200))
        sys.stderr.buffer.flush()
        send({"jsonrpc": "2.0", "id": request_id, "result": text(f"wrote {n} stderr lines")})
    elif name == "stdout_lines":  # n lines that are not JSON-RPC on stdout (stray prints), an ESC in each
        for i in range(n):
            OUT.write(b"\x1b[2Kstray print %d\n" % i)
        send({"jsonrpc": "2.0", "id": request_id, "result": text(f"printed {n} lines")})
    elif name == "request_id":  # the id the client chose for this call
        send({"jsonrpc": "2.0", "id": request_id, "result": text(f"id {json.dumps(request_id)}")})
    elif name == "rpc_error":
        error = {"code": -32603, "message": "fetch failed", "data": {"upstream": "down"}}
        send({"jsonrpc": "2.0", "id": request_id, "error": error})
    elif name == "bad_result":  # a result that is not an object
        send({"jsonrpc": "2.0", "id": request_id, "result": [1, 2]})
    elif name == "later_fields":  # a 2025-11-25 result with 2026-07-28 fields, meaningless in its era
        asks = {
            "a": {"method": "elicitation/create", "params": {"message": "pw?", "requestedSchema": {"type": "object"}}}
        }
        result = {**text("hi"), "resultType": "input_required", "inputRequests": asks, "requestState": "s"}
        send({"jsonrpc": "2.0", "id": request_id, "result": result})
    elif name == "malformed":  # an object, but no tool result: args["text"] names which
        malformed = {
            "string": {"content": "just a string"},
            "structured_only": {"structuredContent": {"a": 1}},
            "unknown_block": {"content": [{"type": "widget", "x": 1}]},
        }
        send({"jsonrpc": "2.0", "id": request_id, "result": malformed[str(args.get("text"))]})
    elif name == "huge_number":  # 1e400: valid JSON, too large for a double; an image of n base64 characters
        image = '{"type":"image","data":"' + "A" * n + '","mimeType":"image/png"}'
        result = '{"content":[' + image + '],"structuredContent":{"v":1e400,"w":2.5}}'
        OUT.write(
            b'{"jsonrpc":"2.0","id":' + json.dumps(request_id).encode() + b',"result":' + result.encode() + b"}\n"
        )
        OUT.flush()
    elif name == "deep_result":  # structuredContent nested n levels around `size` bytes, as JSON text
        node = '"' + "d" * int(args.get("size", 0)) + '"'
        result = (
            '{"content":[{"type":"text","text":"deep"}],"structuredContent":{"a":' + "[" * n + node + "]" * n + "}}"
        )
        OUT.write(
            b'{"jsonrpc":"2.0","id":' + json.dumps(request_id).encode() + b',"result":' + result.encode() + b"}\n"
        )
        OUT.flush()
    elif name == "stop_reading":  # answers, then never reads its input again (and stays up)
        send({"jsonrpc": "2.0", "id": request_id, "result": text("no longer reading")})
        stay_up()
    elif name == "add_tool":  # lists one more tool from now on, and says so
        TOOLS.append({"name": f"added_{len(TOOLS)}", "description": "added", "inputSchema": {"type": "object"}})
        send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
        send({"jsonrpc": "2.0", "id": request_id, "result": text(TOOLS[-1]["name"])})
    elif name == "ask_flood":  # n requests of its own during the call, none waited for
        for i in range(n):
            send({"jsonrpc": "2.0", "id": f"ask-{i}", "method": "roots/list"})
        send({"jsonrpc": "2.0", "id": request_id, "result": text(f"asked {n} times")})
    elif name == "ping_flood":  # a server that asks and asks, and takes in nothing any more
        pad = "x" * int(args.get("size", 0))
        for i in range(n):
            OUT.write(json.dumps({"jsonrpc": "2.0", "id": f"ping-{i}-{pad}", "method": "ping"}).encode() + b"\n")
        send({"jsonrpc": "2.0", "id": request_id, "result": text(f"pinged {n} times")})
        stay_up()
    elif name == "bad_notices":
        send({"jsonrpc": "2.0", "id": request_id, "result": text("noticed")})
        for method, notice in (
            ("notifications/message", {"level": "bogus", "data": "d"}),
            ("notifications/progress", {"progressToken": "nobody-gave-it", "progress": "x"}),
            ("notifications/resources/updated", {}),
        ):
            send({"jsonrpc": "2.0", "method": method, "params": notice})
    elif name == "answers":
        send(
            {
                "jsonrpc": "2.0",
                "id": request_id,
                "result": text(f"{ANSWERS['result']} results, {ANSWERS['error']} errors"),
            }
        )
    elif name == "not_json":
        OUT.write(b'{"jsonrpc":"2.0","id":' + json.dumps(request_id).encode() + b',"result":{oops}}\n')
        OUT.flush()
    else:
        send({"jsonrpc": "2.0", "id": request_id, "result": text("ok")})


def answer(msg: dict[str, Any], deep: str = "") -> None:
    """Answer one request on stdout (the stdio server)."""
    method, request_id = msg.get("method"), msg.get("id")
    params = msg.get("params") or {}
    if method == "initialize" and MODERN:
        refusal = {"code": -32022, "message": "2026-07-28 only", "data": {"supported": ["2026-07-28"]}}
        send({"jsonrpc": "2.0", "id": request_id, "error": refusal})
    elif method == "server/discover" and MODERN:
        capabilities = {"tools": {}, "resources": {}, "prompts": {}, "logging": {}}
        result = {"supportedVersions": ["2026-07-28"], "capabilities": capabilities}
        send({"jsonrpc": "2.0", "id": request_id, "result": {**result, "resultType": "complete"}})
    elif method == "initialize":
        result = {
            "protocolVersion": "2025-11-25",
            "capabilities": {"tools": {}, "resources": {}, "prompts": {}, "logging": {}},
            "serverInfo": {"name": "rogue-wire", "version": "0"},
        }
        send({"jsonrpc": "2.0", "id": request_id, "result": result})
    elif method == "tools/list":
        listed = json.dumps({"jsonrpc": "2.0", "id": request_id, "result": {"tools": TOOLS}})
        if deep:
            listed = listed.replace('"tools": [', '"tools": [' + deep + ",", 1)
        OUT.write(listed.encode() + b"\n")
        OUT.flush()
    elif method == "resources/list":
        resource = {"uri": "rogue://r", "name": f"res {LONE}", "description": f"d {LONE}"}
        send({"jsonrpc": "2.0", "id": request_id, "result": {"resources": [resource]}})
    elif method == "resources/templates/list":
        send({"jsonrpc": "2.0", "id": request_id, "result": {"resourceTemplates": []}})
    elif method == "prompts/list":
        prompt = {"name": "p", "description": f"prompt {LONE}"}
        send({"jsonrpc": "2.0", "id": request_id, "result": {"prompts": [prompt]}})
    elif method == "tools/call":
        token = (params.get("_meta") or {}).get("progressToken")
        call(request_id, params.get("name", ""), params.get("arguments") or {}, token)
    elif method == "ping":
        send({"jsonrpc": "2.0", "id": request_id, "result": {}})
    else:
        send({"jsonrpc": "2.0", "id": request_id, "error": {"code": -32601, "message": f"no {method}"}})


def serve_http() -> None:
    """The same answers as JSON HTTP responses (a remote server: streamable HTTP, no SSE)."""
    import io
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            global OUT
            msg = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))))
            if msg.get("id") is None or msg.get("method") is None:
                self.send_response(202)
                self.end_headers()
                return
            with lock:
                OUT = io.BytesIO()
                answer(msg)
                body = OUT.getvalue().splitlines()[-1]
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:  # noqa: N802
            self.send_response(405)
            self.end_headers()

        def do_DELETE(self) -> None:  # noqa: N802
            self.send_response(200)
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    sys.stdout.write(f"http://127.0.0.1:{server.server_address[1]}/mcp\n")
    sys.stdout.flush()
    server.serve_forever()


def main() -> None:
    if "--http" in sys.argv:
        serve_http()
        return
    deep = ""
    if "--deep-schema" in sys.argv:
        deep = deep_tool(int(sys.argv[sys.argv.index("--deep-schema") + 1]))
    for raw in sys.stdin.buffer:
        if not raw.strip():
            continue
        msg = json.loads(raw)
        if msg.get("id") is not None and msg.get("method") is not None:
            answer(msg, deep)  # notifications and responses get no answer
        elif msg.get("method") is None:
            ANSWERS["error" if "error" in msg else "result"] += 1


if __name__ == "__main__":
    main()
