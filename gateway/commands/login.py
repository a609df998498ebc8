"""``prefixgate login SERVER`` and ``prefixgate logout SERVER``: the browser flow, done once by a person.

``login`` listens on a loopback redirect URI (``http://127.0.0.1:PORT/callback``: the
port of ``redirect_port``, else the one the stored registration names, else any free
one), connects to the server exactly as ``serve`` does but with a real redirect handler:
the SDK's provider discovers the authorization server, registers (or uses the configured
client), and hands over the authorization URL, which is opened with ``webbrowser`` (so
``$BROWSER`` is honoured) and printed to stderr for copy-paste. The code that comes back
on the redirect is checked (``state``, ``iss``) and exchanged by the SDK, the tokens go to
the token file, and the connection is used once (the server must list its tools) before
``login`` says it worked. ``serve`` never does any of this: it reports the command.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import sys
import webbrowser
from urllib.parse import parse_qs, urlencode, urlparse, urlunparse

import anyio
import httpx2
from anyio.abc import SocketStream
from mcp.client.auth import OAuthFlowError
from mcp.shared.auth import AuthorizationCodeResult

from catalog.text import escape
from gateway.config import Config, ServerConfig
from gateway.downstream.connection import Downstream
from gateway.downstream.errors import short
from gateway.downstream.oauth import (
    OWN_TIMEOUT,
    CappedAuthAnswers,
    Interactive,
    LoginNeeded,
    OAuthSetup,
    provider,
    publishes_resource_metadata,
)
from gateway.downstream.supervisor import Supervisor
from gateway.engine.oauth import oauth_setup, token_file
from gateway.state.oauthtokens import MAX_SCOPE_CHARS, TokenFileError, TokenFileRefused, TokenStore

MAX_REQUEST_BYTES = 16 << 10
"""The most of one redirect request the listener reads (a browser's GET with a code and state)."""
PAGE = b"<!doctype html><title>prefixgate</title><p>prefixgate: %s. You can close this tab.</p>"


class LoginFailed(Exception):
    """``str()`` is the one line printed after ``prefixgate: login SERVER:``."""


def _server(config: Config, server_id: str) -> ServerConfig:
    for server in config.servers:
        if server.id == server_id:
            if not server.enabled:
                raise LoginFailed(f"servers.{server_id} is disabled (enabled = false)")
            if server.url is None or server.auth is None:
                raise LoginFailed(f'servers.{server_id} has no auth = "oauth" (a remote server with url)')
            return server
    raise LoginFailed(f"no server {server_id!r} in the config")


def _with_scopes(url: str, extra: list[str]) -> str:
    """The authorization URL asking for ``extra`` scopes too (configured ones, --scope)."""
    parts = urlparse(url)
    query = parse_qs(parts.query, keep_blank_values=True)
    scopes = " ".join(query.get("scope", [])).split()
    scopes += [s for s in extra if s not in scopes]
    asked = " ".join(scopes)
    if len(asked) > MAX_SCOPE_CHARS:  # what a server's WWW-Authenticate named, or the config: bounded
        raise LoginFailed(f"the scopes to ask for are {len(asked)} characters long (at most {MAX_SCOPE_CHARS})")
    if not extra:
        return url
    query["scope"] = [asked]
    return urlunparse(parts._replace(query=urlencode(query, doseq=True)))


class Callback:
    """The loopback redirect listener: answers one valid ``GET /callback`` and hands its parameters over."""

    def __init__(self) -> None:
        self.result: AuthorizationCodeResult | None = None
        self.error: str | None = None
        self.done = anyio.Event()

    def expect(self) -> None:
        """A new authorization request goes out: wait for its own redirect. (The SDK starts
        another when the server refuses the first tokens at once, e.g. expired in transit:
        that flow's code must not be answered with the first one's.)"""
        self.result, self.error, self.done = None, None, anyio.Event()

    async def handle(self, stream: SocketStream) -> None:
        async with stream:
            data = b""
            with anyio.move_on_after(10):
                while b"\r\n\r\n" not in data and len(data) < MAX_REQUEST_BYTES:
                    try:
                        chunk = await stream.receive(4096)
                    except (anyio.EndOfStream, anyio.BrokenResourceError):
                        break
                    data += chunk
            line = data.split(b"\r\n", 1)[0].decode("latin-1")
            parts = line.split(" ")
            target = urlparse(parts[1]) if len(parts) == 3 and parts[0] == "GET" else None
            if target is None or target.path != "/callback" or self.done.is_set():
                await self._reply(stream, 404, b"not the redirect this login waits for")
                return
            query = {k: v[0] for k, v in parse_qs(target.query).items()}
            if "code" in query:
                self.result = AuthorizationCodeResult(
                    code=query["code"], state=query.get("state"), iss=query.get("iss")
                )
                await self._reply(stream, 200, b"login complete")
            else:
                # Anyone on this machine can reach the listener first: what it says is quoted
                # escaped and short, never written to the terminal raw.
                error = escape(query.get("error", "no code")[:100])
                detail = query.get("error_description")
                self.error = f"the authorization server refused: {error}" + (
                    f" ({escape(detail[:300])})" if detail else ""
                )
                await self._reply(stream, 400, b"login refused")
            self.done.set()

    async def _reply(self, stream: SocketStream, status: int, message: bytes) -> None:
        body = PAGE % message
        head = f"HTTP/1.1 {status} {'OK' if status == 200 else 'Error'}\r\ncontent-type: text/html\r\n"
        head += f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
        try:
            await stream.send(head.encode() + body)
        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass


async def _listener(port: int) -> anyio.abc.SocketListener:
    listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=port, reuse_port=False)
    return listener  # type: ignore[return-value]


async def _open_browser(url: str) -> None:
    """In a thread, not awaited by the flow: a ``$BROWSER`` command may run until the redirect is served."""
    await anyio.to_thread.run_sync(webbrowser.open, url, abandon_on_cancel=True)


async def _registered_port(config: Config, server: ServerConfig) -> int:
    """The loopback port the stored registration names (its redirect URI must match exactly)."""
    try:
        client = await TokenStore(token_file(config, server)).get_client_info()
    except TokenFileError:
        return 0
    for uri in (client.redirect_uris or []) if client else []:
        parsed = urlparse(str(uri))
        if parsed.hostname == "127.0.0.1" and parsed.port:
            return parsed.port
    return 0


async def _fit_registration(config: Config, server: ServerConfig, redirect_uri: str) -> None:
    """A stored registration for another redirect URI (its port was taken) is dropped: the
    authorization server matches redirect URIs exactly, so the SDK registers anew."""
    if server.client_id is not None:
        return  # pre-registered: the configured client is used as it is (set redirect_port)
    store = TokenStore(token_file(config, server))
    try:
        client = await store.get_client_info()
    except TokenFileError:
        return  # the connection reports it
    if client is not None and redirect_uri not in [str(u) for u in client.redirect_uris or []]:
        await store.forget_client()


async def _replace_refused(config: Config, server: ServerConfig) -> None:
    """A token file refused for itself (not JSON, a symlink, writable by others) is removed
    first, said in one line: this login replaces it (its connection would refuse it too).
    One that cannot be removed, or a refused directory, fails the login with why."""
    file = token_file(config, server)
    try:
        await TokenStore(file).load()
    except TokenFileRefused as exc:
        try:
            file.remove()
        except TokenFileError as why:
            raise LoginFailed(str(why)) from None
        sys.stderr.write(f"prefixgate: login {server.id}: {exc}; removed, this login replaces it\n")
    except TokenFileError as exc:
        raise LoginFailed(str(exc)) from None


async def _login_asked_for(server: ServerConfig, setup: OAuthSetup) -> None:
    """The flow, started as a 401 would start it, for a server that served the connection
    without a token (it lists its tools to anyone, and refuses a call without one) but
    publishes protected-resource metadata (RFC 9728): it does want a login. Nothing else is
    sent to the server; a server that publishes none is left as it is."""
    assert server.url is not None
    if not await publishes_resource_metadata(server.url):
        return
    async with httpx2.AsyncClient(transport=CappedAuthAnswers(server.url), timeout=OWN_TIMEOUT) as http:
        auth = await provider(server, setup)  # (interactive: the SDK's provider, this login's handlers)
        call = httpx2.Request("POST", server.url)
        flow = auth.async_auth_flow(call)
        try:
            sent = await flow.__anext__()
            answer = httpx2.Response(401, request=sent)  # (not sent: what the server answers a call without a token)
            while (sent := await flow.asend(answer)) is not call:
                answer = await http.send(sent)
        finally:
            await flow.aclose()


async def _held_scopes(config: Config, server: ServerConfig) -> str:
    """The scopes of the stored grant ("" when none or unreadable: the login reports that)."""
    try:
        tokens = await TokenStore(token_file(config, server)).get_tokens()
    except TokenFileError:
        return ""
    return tokens.scope or "" if tokens is not None else ""


async def login(config: Config, args: argparse.Namespace) -> int:
    try:
        server = _server(config, args.server)
        if server.auth != "oauth":
            raise LoginFailed(f'servers.{server.id} uses auth = "{server.auth}": its tokens need no browser login')
        return await _login(config, server, args)
    except LoginFailed as exc:
        sys.stderr.write(f"prefixgate: login {args.server}: {exc}\n")
        return 1


async def _login(config: Config, server: ServerConfig, args: argparse.Namespace) -> int:
    await _replace_refused(config, server)
    port = server.redirect_port or await _registered_port(config, server)
    try:
        listener = await _listener(port)
    except OSError as exc:
        if server.redirect_port:
            raise LoginFailed(f"cannot listen on 127.0.0.1:{port} (redirect_port): {exc.strerror or exc}") from None
        listener = await _listener(0)  # the registered port is taken: register anew
    bound = listener.extra(anyio.abc.SocketAttribute.local_port)
    redirect_uri = f"http://127.0.0.1:{bound}/callback"
    callback = Callback()
    failed: str | None = None
    # A new login never narrows the grant: a step-up asks for what is held plus the wider scope.
    held = await _held_scopes(config, server)
    scopes = [s for group in (held, *server.scopes, *args.scope) for s in group.split()]

    async with anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, callback.handle)

        async def redirect(url: str) -> None:
            callback.expect()
            url = _with_scopes(url, scopes)
            sys.stderr.write(f"prefixgate: open this URL to log in to {server.id!r}:\n{url}\n")
            sys.stderr.flush()
            if not args.no_browser:
                tg.start_soon(_open_browser, url)

        async def wait_code() -> AuthorizationCodeResult:
            with anyio.move_on_after(args.timeout):
                await callback.done.wait()
            if callback.result is not None:
                return callback.result
            callback.error = callback.error or f"no authorization response within {args.timeout:g} s"
            raise LoginNeeded(callback.error)

        interactive = Interactive(redirect_uri=redirect_uri, redirect=redirect, callback=wait_code)
        setup = oauth_setup(config, interactive)
        # The connection waits for a person: its start-up may take as long as the login.
        patient = dataclasses.replace(server, startup_timeout=args.timeout + server.startup_timeout)
        downstream = Downstream(patient, oauth=setup)
        await _fit_registration(config, server, redirect_uri)
        tg.start_soon(functools.partial(Supervisor(downstream).run, supervise=False))
        await downstream.settled.wait()
        downstream.stop()
        if downstream.status == "ready" and await TokenStore(token_file(config, server)).get_tokens() is None:
            try:
                await _login_asked_for(patient, setup)
            except LoginNeeded as exc:
                failed = callback.error or str(exc)
            except (OAuthFlowError, ValueError, httpx2.HTTPError) as exc:
                failed = f"its authorization flow failed ({short(exc)})"
        tg.cancel_scope.cancel()
    if failed is not None:
        raise LoginFailed(failed)
    if downstream.status != "ready":
        raise LoginFailed(callback.error or downstream.error or downstream.status)
    tokens = await TokenStore(token_file(config, server)).get_tokens()
    if tokens is None:
        sys.stdout.write(f"prefixgate: {server.id!r} asked for no login (nothing stored); it works as it is\n")
        return 0
    granted = tokens.scope if tokens.scope else "(none named)"
    sys.stdout.write(f"prefixgate: logged in to {server.id!r} (scopes: {granted})\n")
    return 0


def logout(config: Config, args: argparse.Namespace) -> int:
    try:
        server = _server(config, args.server)
        removed = token_file(config, server).remove()
    except (LoginFailed, TokenFileError) as exc:
        sys.stderr.write(f"prefixgate: logout {args.server}: {exc}\n")
        return 1
    if removed:
        sys.stdout.write(f"prefixgate: logged out of {server.id!r}: its stored tokens are removed\n")
    else:
        sys.stdout.write(f"prefixgate: {server.id!r} had no stored tokens\n")
    return 0
