"""A dual-era server written the classic way, on the SDK's high-level ``MCPServer``.

For tests/test_transparency.py ("nothing works worse through prefixgate than directly"):
a server as most are written today. It serves both protocol eras (the SDK's dual-era loop),
but asks for input only over the back-channel during a call — ``ctx.elicit`` (form),
``ctx.elicit_url`` (URL mode), ``ctx.session.create_message`` (sampling),
``ctx.session.list_roots()`` (on the session's own channel, as that call has no request
id to go with) — never with ``input_required``. So a 2026-07-28 client talking
to it directly gets an error from those tools (2026-07-28 has no back-channel), while the
gateway, which reaches it with the handshake, can relay them to either era.

Tools: ``echo(text)``, ``elicit(after_a_sleep)``, ``confide(secret)`` (an elicitation naming the secret),
``give_up(seconds)`` (an elicitation it cancels after ``seconds``), ``keep_asking(times, seconds, done_file)``
(that ``times`` over, then writes ``done_file`` and asks for a name),
``header_names()`` (the call's HTTP request header names), ``elicit_url()`` (then the completion
notice), ``url_required()`` (``-32042``, the completion notice on the session after it),
``url_pending(ids)`` (``-32042`` naming each id) and ``complete_url(elicitation_id)`` (its
completion notice, when the test says), ``sample()``, ``roots()``,
``roots_changed()`` (how many ``notifications/roots/list_changed`` it heard),
``progress(steps)``, ``ask_then_progress(steps)`` (an elicitation, then progress),
``log()`` (one info line on the call's stream), ``block(seconds)`` (a
blocking ``time.sleep`` in an async tool: its event loop, so its input, stops meanwhile), ``sleep(seconds, tag)``
(progress 0 once it runs, then cancellable), ``ask_then_sleep(seconds, tag)`` (an elicitation, then that
``sleep``) and ``cancelled(tag)`` (whether the ``sleep`` with that tag was cancelled:
what the tests check a cancellation reached the server with). A prompt, ``greeting``, and a
resource template, ``classic://asked/{topic}``, ask the user for their name the same way
before they answer (elicitation during ``prompts/get`` and ``resources/read``); a prompt
``pause(seconds)`` takes that long to answer, with progress, and names its ``_meta`` keys.

Usage: ``python -m tests.classic_server`` (stdio) or ``python -m tests.classic_server --http``
(streamable HTTP on 127.0.0.1, a free port; prints its URL on stdout, then serves);
``--banner`` (stdio): a line that is not JSON-RPC on stdout first, as some servers print;
``--roots-at-start``: lists the client's roots once initialized, outside any call, as
server-filesystem does (``startup_roots_listed()`` says what came back); ``roots_later(n)``
asks ``n`` times, outside any call, once it has returned (``roots_later_results()``).
``--http --sse``: the SSE transport (2024-11-05) at ``/sse`` instead, where a message that
calls ``echo`` with the text ``refuse me`` is answered 503 with an HTML page (a proxy's),
with ``forget me`` 404 (and every later message of its session), with ``forget me once``
404 the first time only;
``--port N``: that port rather than a free one (a server restarted where it was).
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
from mcp.server.mcpserver import Context, MCPServer
from mcp.shared.exceptions import MCPDeprecationWarning, UrlElicitationRequiredError
from pydantic import BaseModel

# Logging, sampling and roots are deprecated as of 2026-07-28 (SEP-2577): still what classic servers use.
warnings.filterwarnings("ignore", category=MCPDeprecationWarning)

server = MCPServer("classic", version="1.0", log_level="WARNING")
cancelled_sleeps: set[str] = set()
sleeping = {"now": 0, "peak": 0}
"""``sleep`` calls running now, and the most that ever ran at once."""
background: set[asyncio.Task[None]] = set()
"""Tasks that outlive their call (``url_required``'s completion notice), held until done."""


def _keep(work: Any) -> None:
    """Run ``work`` in a task of its own, held in ``background`` until done."""
    task = asyncio.get_running_loop().create_task(work)
    background.add(task)
    task.add_done_callback(background.discard)


class Name(BaseModel):
    name: str


@server.tool()
def echo(text: str) -> str:
    """Echo text back."""
    return f"classic:{text}"


@server.tool()
async def elicit(ctx: Context, after_a_sleep: bool = False) -> str:
    """Ask the user for their name (form elicitation over the back-channel); ``after_a_sleep``:
    once a ``sleep`` runs (so the question comes while a newer call is in flight)."""
    while after_a_sleep and not sleeping["now"]:
        await anyio.sleep(0.01)
    answer = await ctx.elicit("What is your name?", Name)
    content = answer.data.model_dump() if answer.action == "accept" else None
    return f"{answer.action}:{content}"


@server.tool()
async def give_up(seconds: float, ctx: Context) -> str:
    """Ask the user for their name, and give up after ``seconds`` (the request is cancelled)."""
    with anyio.move_on_after(seconds):
        answer = await ctx.elicit("Still there?", Name)
        return f"answered:{answer.action}"
    return "gave up"


@server.tool()
async def keep_asking(times: int, seconds: float, done_file: str, ctx: Context) -> str:
    """Ask whether the user is still there ``times`` times, giving up on each after ``seconds``
    (its request cancelled); then write ``done_file`` and ask the user for their name."""
    for _ in range(times):
        with anyio.move_on_after(seconds):
            await ctx.elicit("Still there?", Name)
            return "answered"
    with open(done_file, "w", encoding="utf-8") as done:
        done.write("gave up")
    answer = await ctx.elicit("What is your name?", Name)
    return f"gave up {times}, then {answer.action}"


@server.tool()
async def confide(secret: str, ctx: Context) -> str:
    """Ask the user about their secret (form elicitation over the back-channel, naming it)."""
    answer = await ctx.elicit(f"Is {secret} yours?", Name)
    content = answer.data.model_dump() if answer.action == "accept" else None
    return f"{secret}:{answer.action}:{content}"


@server.tool()
def header_names(ctx: Context) -> str:
    """The names of this call's HTTP request headers (none over stdio)."""
    request = ctx.request_context.request
    return ",".join(sorted(request.headers.keys())) if request is not None else ""


@server.tool()
def refuse_authorization(ctx: Context) -> str:
    """Refuse the call with a JSON-RPC error quoting this call's Authorization header, as a
    server rejecting a token may (none over stdio)."""
    from mcp.shared.exceptions import MCPError

    request = ctx.request_context.request
    quoted = request.headers.get("authorization", "") if request is not None else ""
    raise MCPError(code=-32000, message=f"token rejected: {quoted}", data={"presented": quoted})


@server.tool()
async def elicit_url(ctx: Context) -> str:
    """Send the user to a URL (URL-mode elicitation over the back-channel)."""
    answer = await ctx.elicit_url("Open the link to sign in.", "https://example.com/login", "login-1")
    await ctx.session.send_elicit_complete("login-1", related_request_id=ctx.request_id)  # the sign-in is done
    return f"url:{answer.action}"


@server.tool()
async def url_required(ctx: Context) -> str:
    """Fail with ``-32042``: a URL-mode elicitation to complete first; its completion notice
    follows on the session a moment later (the spec's main URL-mode flow)."""
    session = ctx.session

    async def complete() -> None:
        await anyio.sleep(0.2)
        await session.send_elicit_complete("login-2")

    _keep(complete())
    link = types.ElicitRequestURLParams(
        message="Sign in first.", url="https://example.com/login", elicitation_id="login-2"
    )
    raise UrlElicitationRequiredError([link])


@server.tool()
def url_pending(ids: list[str]) -> str:
    """Fail with ``-32042`` listing a URL-mode elicitation for each of ``ids``; each completes
    only when ``complete_url`` says so."""
    links = [
        types.ElicitRequestURLParams(message="Sign in.", url="https://example.com/login", elicitation_id=i) for i in ids
    ]
    raise UrlElicitationRequiredError(links)


@server.tool()
async def complete_url(elicitation_id: str, ctx: Context) -> str:
    """Send the completion notice of ``elicitation_id`` on the session (no call's stream)."""
    await ctx.session.send_elicit_complete(elicitation_id)
    return "completed"


@server.tool()
async def sample(ctx: Context) -> str:
    """Ask the client's model to say hi (sampling over the back-channel)."""
    message = types.SamplingMessage(role="user", content=types.TextContent(type="text", text="Say hi"))
    reply = await ctx.session.create_message([message], max_tokens=20, related_request_id=ctx.request_id)
    said = reply.content.text if isinstance(reply.content, types.TextContent) else str(reply.content)
    return f"{reply.model}:{said}"


@server.tool()
async def sample_tools(ctx: Context) -> str:
    """Sampling with a tool the client's model may use (SEP-1577): the SDK refuses to send it
    unless the client declared ``sampling.tools``."""
    message = types.SamplingMessage(role="user", content=types.TextContent(type="text", text="Weather in Paris?"))
    lookup = types.Tool(name="lookup", input_schema={"type": "object", "properties": {"city": {"type": "string"}}})
    reply = await ctx.session.create_message(
        [message],
        max_tokens=20,
        tools=[lookup],
        tool_choice=types.ToolChoice(mode="auto"),
        related_request_id=ctx.request_id,
    )
    blocks = reply.content if isinstance(reply.content, list) else [reply.content]
    used = [f"{b.name}({b.input})" for b in blocks if isinstance(b, types.ToolUseContent)]
    return f"{reply.model}:{reply.stop_reason}:{','.join(used)}"


@server.tool()
async def roots(ctx: Context) -> str:
    """List the client's roots (roots/list, on the session's own channel)."""
    listed = await ctx.session.list_roots()
    return ",".join(str(root.uri) for root in listed.roots)


roots_changes = [0]
"""How many ``notifications/roots/list_changed`` the server heard."""


async def _roots_changed(ctx: Any, params: Any) -> None:
    roots_changes[0] += 1


server._lowlevel_server.add_notification_handler(
    "notifications/roots/list_changed", types.NotificationParams, _roots_changed
)


startup_roots: list[str] = []
"""With ``--roots-at-start``: what ``roots/list``, asked once initialized, answered (or why not)."""


async def _list_roots_into(into: list[str], session: Any, delay: float = 0) -> None:
    """Ask for the client's roots (after ``delay`` s) and note what came back, or why not."""
    await anyio.sleep(delay)
    try:
        listed = await session.list_roots()
        into.append(",".join(str(root.uri) for root in listed.roots))
    except Exception as exc:  # noqa: BLE001 - reported by the tools that read ``into``
        into.append(f"failed: {exc}")


async def _initialized(ctx: Any, params: Any) -> None:
    """As server-filesystem does: list the client's roots as soon as the session is initialized
    (in a task of its own, so the server goes on serving meanwhile)."""
    _keep(_list_roots_into(startup_roots, ctx.session))


if "--roots-at-start" in sys.argv[1:]:
    server._lowlevel_server.add_notification_handler(
        "notifications/initialized", types.NotificationParams, _initialized
    )


later_roots: list[str] = []
"""What each ``roots_later`` request came back as."""


@server.tool()
async def roots_later(n: int, ctx: Context) -> str:
    """Ask for the roots ``n`` times, 0.5 s after this call has returned: outside any call."""
    for _ in range(n):
        _keep(_list_roots_into(later_roots, ctx.session, 0.5))
    return f"asking {n} times"


@server.tool()
def roots_later_results() -> str:
    """How the ``roots_later`` requests ended so far, in order of their ending."""
    return "; ".join(later_roots)


@server.tool()
def startup_roots_listed() -> str:
    """What the roots asked for at start came back as (``--roots-at-start``)."""
    return startup_roots[-1] if startup_roots else "not yet"


@server.tool()
def roots_changed() -> str:
    """How many times the client said its roots changed."""
    return f"roots changed: {roots_changes[0]}"


@server.tool()
async def progress(steps: int, ctx: Context) -> str:
    """Report progress once per step."""
    for step in range(1, steps + 1):
        await ctx.report_progress(step, steps, f"step {step}")
        await anyio.sleep(0.01)
    return f"progressed {steps}"


@server.tool()
async def ask_then_progress(steps: int, ctx: Context) -> str:
    """Ask the user for their name, then report progress once per step."""
    answer = await ctx.elicit("What is your name?", Name)
    for step in range(1, steps + 1):
        await ctx.report_progress(step, steps, f"step {step}")
        await anyio.sleep(0.01)
    return f"{answer.action}:progressed {steps}"


@server.tool()
async def log(ctx: Context) -> str:
    """Send one info log message during the call."""
    await ctx.info("classic log line", logger_name="classic")
    return "logged"


@server.tool()
async def block(seconds: float) -> str:
    """Block the server's event loop (a common mistake in async tools): nothing is read meanwhile."""
    time.sleep(seconds)
    return f"blocked {seconds:g}"


@server.tool()
async def sleep(seconds: float, ctx: Context, tag: str = "") -> str:
    """Sleep (progress 0 once it runs); a cancelled sleep is remembered under its tag."""
    await ctx.report_progress(0, seconds, "sleeping")
    sleeping["now"] += 1
    sleeping["peak"] = max(sleeping["peak"], sleeping["now"])
    try:
        await anyio.sleep(seconds)
    except anyio.get_cancelled_exc_class():
        cancelled_sleeps.add(tag)
        raise
    finally:
        sleeping["now"] -= 1
    return f"slept {seconds:g}"


@server.tool()
async def ask_then_sleep(seconds: float, ctx: Context, tag: str = "") -> str:
    """Ask the user for their name, then ``sleep`` (a cancelled one remembered under its tag)."""
    answer = await ctx.elicit("What is your name?", Name)
    return f"{answer.action}:{await sleep(seconds, ctx, tag)}"


@server.tool()
def sleeps() -> str:
    """How many ``sleep`` calls run now, and the most that ever ran at once."""
    return f"now {sleeping['now']} peak {sleeping['peak']}"


@server.tool()
def cancelled(tag: str) -> str:
    """Whether the sleep with this tag was cancelled."""
    return f"cancelled:{tag in cancelled_sleeps}"


@server.prompt()
async def greeting(ctx: Context) -> str:
    """A greeting for the user, whose name it asks first (over the back-channel)."""
    answer = await ctx.elicit("What is your name?", Name)
    return f"Greet {answer.data.name}." if answer.action == "accept" else "Greet the user."


@server.prompt()
async def pause(seconds: str, ctx: Context) -> str:
    """A prompt that takes ``seconds`` to write, reporting progress every 0.5 s (to a caller
    that asked for it), and names the keys of its request's ``_meta``."""
    total, done = float(seconds), 0.0
    while done < total:
        step = min(0.5, total - done)
        await anyio.sleep(step)
        done += step
        await ctx.report_progress(done, total)
    return "Paused; _meta: " + ",".join(sorted(ctx.request_context.meta or {}))


@server.resource("classic://asked/{topic}")
async def asked(topic: str, ctx: Context) -> str:
    """A note on a topic, written for the user, whose name it asks first (over the back-channel)."""
    answer = await ctx.elicit("What is your name?", Name)
    return f"{topic} for {answer.data.name}" if answer.action == "accept" else topic


def behind_a_sticky_balancer(app: Any) -> Any:
    """``--sticky``: as behind a load balancer whose sessions live on one backend: a response to
    a request without its cookie sets it, and a request in a session (``Mcp-Session-Id``)
    without it reaches "another backend", which knows no such session (404)."""

    async def sticky(scope: Any, receive: Any, send: Any) -> None:
        headers = dict(scope.get("headers") or [])
        has_cookie = b"backend=7" in headers.get(b"cookie", b"")
        if scope["type"] == "http" and not has_cookie and b"mcp-session-id" in headers:
            error = b'{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Session not found"}}'
            await send(
                {"type": "http.response.start", "status": 404, "headers": [(b"content-type", b"application/json")]}
            )
            await send({"type": "http.response.body", "body": error})
            return

        async def with_cookie(message: Any) -> None:
            if message["type"] == "http.response.start" and not has_cookie:
                message = {**message, "headers": [*message["headers"], (b"set-cookie", b"backend=7; Path=/")]}
            await send(message)

        await app(scope, receive, with_cookie)

    return sticky


EXPIRED: set[str] = set()
"""``--expiring``: the session ids ``expire_session`` ended."""


@server.tool()
def expire_session(ctx: Context) -> str:
    """End this call's session on the server's side (``--expiring``): its next request gets 404."""
    request = ctx.request_context.request
    if request is not None and (session := request.headers.get("mcp-session-id")):
        EXPIRED.add(session)
    return "expired"


LATE_REFUSAL = re.compile(rb"late-refusal:([^\"\\]+)")
"""``--expiring``: a POST in an ended session whose body says ``late-refusal:PATH``."""


def expiring_sessions(app: Any) -> Any:
    """``--expiring``: a request in a session ``expire_session`` ended gets 404, as from a server
    that restarted or timed the session out (a call saying ``late-refusal:PATH`` writes PATH when
    it arrives and gets its 404 a second later)."""

    async def expiring(scope: Any, receive: Any, send: Any) -> None:
        session = dict(scope.get("headers") or []).get(b"mcp-session-id", b"").decode()
        if scope["type"] == "http" and session in EXPIRED:
            if scope["method"] == "POST" and (late := LATE_REFUSAL.search(await read_body(receive))):
                # A call that says "late-refusal:PATH": PATH written once it is here, its 404 a second later.
                Path(late.group(1).decode()).write_text("posted")
                await anyio.sleep(1)
            error = b'{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Session not found"}}'
            start = {"type": "http.response.start", "status": 404, "headers": [(b"content-type", b"application/json")]}
            await send(start)
            await send({"type": "http.response.body", "body": error})
            return
        await app(scope, receive, send)

    return expiring


async def read_body(receive: Any) -> bytes:
    """A request's whole body, read from its ASGI ``receive``."""
    chunks, more = [], True
    while more:
        message = await receive()
        chunks.append(message.get("body", b""))
        more = message.get("more_body", False)
    return b"".join(chunks)


def replaying(body: bytes, receive: Any) -> Any:
    """A ``receive`` that gives the app ``body`` (already read), then what the client sends."""
    replayed = False

    async def replay() -> Any:
        nonlocal replayed
        if replayed:
            return await receive()
        replayed = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay


STALLED: set[str] = set()
"""``--stalling``: the session ids ``stall_session`` stalled."""


@server.tool()
def stall_session(ctx: Context) -> str:
    """Stall this call's session (``--stalling``): its pings fail from now on, and its DELETE
    is never answered, as from a server behind a network that stopped passing its answers."""
    request = ctx.request_context.request
    if request is not None and (session := request.headers.get("mcp-session-id")):
        STALLED.add(session)
    return "stalled"


def stalling_sessions(app: Any) -> Any:
    """``--stalling``: in a session ``stall_session`` stalled, a ping is answered with an error
    and a DELETE never (the gateway's liveness check then ends the connection and deletes it)."""

    async def stalling(scope: Any, receive: Any, send: Any) -> None:
        session = dict(scope.get("headers") or []).get(b"mcp-session-id", b"").decode()
        if scope["type"] != "http" or session not in STALLED:
            await app(scope, receive, send)
            return
        if scope["method"] == "DELETE":  # never answered; over once its client hangs up (or
            # uvicorn's shutdown waited 15 s for it, and every test using it with it)
            while (await receive())["type"] != "http.disconnect":
                pass
            return
        if scope["method"] != "POST":
            await app(scope, receive, send)
            return
        raw = await read_body(receive)
        body = json.loads(raw)
        if isinstance(body, dict) and body.get("method") == "ping":
            error = {"jsonrpc": "2.0", "id": body.get("id"), "error": {"code": -32603, "message": "stalled"}}
            start = {"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]}
            await send(start)
            await send({"type": "http.response.body", "body": json.dumps(error).encode()})
            return
        await app(scope, replaying(raw, receive), send)

    return stalling


def basic_auth_only(app: Any, credentials: str) -> Any:
    """``--basic USER:PASS``: every HTTP request needs those credentials (401 otherwise)."""
    import base64

    expected = b"Basic " + base64.b64encode(credentials.encode())

    async def guarded(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and dict(scope["headers"]).get(b"authorization") != expected:
            challenge = [(b"www-authenticate", b'Basic realm="mcp"')]
            await send({"type": "http.response.start", "status": 401, "headers": challenge})
            await send({"type": "http.response.body", "body": b"credentials needed"})
            return
        await app(scope, receive, send)

    return guarded


FORGOTTEN: set[bytes] = set()
"""``--sse``: the query strings (session ids) of the connections ``forget me`` ended."""

FORGOT_ONCE: list[bytes] = []
"""``--sse``: the session whose ``forget me once`` was answered 404 (the first only)."""


def refusing_posts(app: Any) -> Any:
    """``--sse``: a message calling ``echo`` with ``refuse me`` is answered 503 (a proxy's HTML
    error page, as in a burst of them), and never reaches the server; with ``forget me`` it is
    answered 404, and so is every later message of its session (its event stream stays open,
    as behind a balancer that sent the messages to a backend that does not know the session);
    with ``forget me once`` the same, the first time only: on the next session it is echoed."""

    async def refusing(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await app(scope, receive, send)
            return
        body = await read_body(receive)
        if b'"forget me"' in body or (b'"forget me once"' in body and not FORGOT_ONCE):
            FORGOTTEN.add(scope.get("query_string", b""))
            FORGOT_ONCE.append(scope.get("query_string", b""))
        if scope.get("query_string", b"") in FORGOTTEN:
            await send({"type": "http.response.start", "status": 404, "headers": [(b"content-type", b"text/plain")]})
            await send({"type": "http.response.body", "body": b"Could not find session"})
            return
        if b'"refuse me"' in body:
            start = {"type": "http.response.start", "status": 503, "headers": [(b"content-type", b"text/html")]}
            await send(start)
            await send({"type": "http.response.body", "body": b"<html><body>503 Service Unavailable</body></html>"})
            return
        await app(scope, replaying(body, receive), send)

    return refusing


async def serve_http() -> None:
    import uvicorn

    from gateway.upstream.listen import listening_socket

    argv = sys.argv[1:]
    sock = listening_socket("127.0.0.1", int(argv[argv.index("--port") + 1]) if "--port" in argv else 0)
    path = "/sse" if "--sse" in argv else "/mcp"
    app = refusing_posts(server.sse_app()) if "--sse" in argv else server.streamable_http_app(streamable_http_path=path)
    if "--sticky" in sys.argv[1:]:
        app = behind_a_sticky_balancer(app)
    if "--expiring" in sys.argv[1:]:
        app = expiring_sessions(app)
    if "--stalling" in sys.argv[1:]:
        app = stalling_sessions(app)
    if "--basic" in sys.argv[1:]:
        app = basic_auth_only(app, sys.argv[sys.argv.index("--basic") + 1])
    sys.stdout.write(f"http://127.0.0.1:{sock.getsockname()[1]}{path}\n")
    sys.stdout.flush()
    await uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on")).serve(sockets=[sock])


BANNER = "Starting the classic server ..."
"""What ``--banner`` prints on stdout before serving over stdio (a common mistake: not JSON-RPC)."""


def main() -> None:
    if "--http" in sys.argv[1:]:
        anyio.run(serve_http)
    else:
        if "--banner" in sys.argv[1:]:
            print(BANNER, flush=True)
        anyio.run(server.run_stdio_async)


if __name__ == "__main__":
    main()
