"""OAuth 2.1 toward a remote server: the mcp SDK's client provider, plugged into the HTTP client.

The SDK's ``OAuthClientProvider`` does the protocol (protected-resource and
authorization-server metadata discovery, pre-registration / client ID metadata document /
dynamic registration, PKCE S256, ``resource``, scope selection and step-up, ``iss``
checks, refresh); ``ClientCredentialsOAuthProvider`` does the headless grant. This module
adds only what a gateway needs around them:

- tokens come from a store the engine hands in (``gateway.state.oauthtokens``), which keeps the
  absolute expiry, so a restarted gateway refreshes before sending an expired token;
- the provider's idea of expiry is moved a little earlier (half the lifetime, at most a
  minute), so a token is refreshed before it can expire on its way to the server;
- a gateway never starts an interactive flow: where the SDK would open a browser, the
  serve-side redirect handler records why a login is needed (with the exact
  ``prefixgate login`` command, and the scope asked for on a step-up) and stops the
  connection; the server is reported ``failed`` with that reason. Only ``prefixgate
  login`` passes a real redirect and callback handler (:class:`Interactive`);
- a pre-registered ``client_id``/``client_secret`` is presented as the stored client, and
  never written to the token file.
"""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import AsyncGenerator, Awaitable, Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Protocol
from urllib.parse import parse_qs, urlparse

import anyio
import httpx2
from mcp.client.auth import OAuthClientProvider, OAuthFlowError, TokenStorage
from mcp.client.auth.extensions.client_credentials import ClientCredentialsOAuthProvider
from mcp.client.auth.utils import build_protected_resource_metadata_discovery_urls, handle_protected_resource_response
from mcp.shared.auth import (
    AuthorizationCodeResult,
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthMetadata,
    OAuthToken,
    ProtectedResourceMetadata,
)
from pydantic import ValidationError

from catalog.text import escape
from gateway.config import ServerConfig, env_number
from gateway.downstream.bounded import decoded, encodings_taken
from gateway.downstream.errors import leaf, short
from gateway.downstream.oauthdiscovery import OriginDiscovery, undiscovered
from gateway.downstream.proxies import EnvironmentRoutes
from gateway.sdk import choose_authorization_server, redirect_on_origin

PLACEHOLDER_REDIRECT = "http://127.0.0.1/callback"
"""The redirect URI a gateway declares: it never receives a redirect (it never starts a flow)."""
MAX_EARLY = 60.0
"""At most this many seconds before its expiry is a token refreshed."""
FOLLOW_WAIT = 2.0
"""Seconds a refused refresh waits for another process's fresh tokens in the file (once per
token file: see ``_Guarded.refused``)."""
OWN_TIMEOUT = env_number("PREFIXGATE_OAUTH_TIMEOUT", 30.0)
"""Seconds a request of serve's own flow may wait for each step (connect, send, each read):
its answer is a few KiB, and every call that needs a token waits behind a refresh (the
connection's own read timeout, 300 s, is meant for event streams)."""
REDIRECTS_FOLLOWED = 5
"""Redirects within its origin a discovery request follows (the SDK's own flow: ``_AUTH_REDIRECT_LIMIT``)."""
OWN_REQUEST = "prefixgate_oauth_own"
"""The extension marking a request serve's own flow makes (a refresh, discovery): one that
cannot reach its server is answered 503 by ``CappedAuthAnswers``, which says why in it."""


class LoginNeeded(Exception):
    """The server needs ``prefixgate login`` (again); ``str()`` is the reason with the command."""


class RefreshRefused(LoginNeeded):
    """The stored tokens were refused and so was their refresh: only a new login helps."""


class _ExpectedStop(logging.Filter):
    """Drops the SDK's tracebacks for a flow the gateway stopped on purpose (a login is
    needed): the server's status says why, once, with the command to run. So too for a
    flow error met by a serving connection's call (``_Guarded``), which logs one line."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if exc is None:
            return True
        exc = leaf(exc)
        return not isinstance(exc, LoginNeeded) and not (isinstance(exc, OAuthFlowError) and _MET.get(None) is not None)


log = logging.getLogger("prefixgate.oauth")

for _name in ("mcp.client.auth.oauth2", "mcp.client.streamable_http", "mcp.client.sse"):
    logging.getLogger(_name).addFilter(_ExpectedStop())


class Store(TokenStorage, Protocol):
    """What the provider needs of a token store (``gateway.state.oauthtokens.TokenStore``)."""

    async def load(self) -> object: ...

    async def expires_at(self) -> float | None: ...

    async def set_tokens(
        self, tokens: OAuthToken, discovery: dict[str, Any] | None = None, *, refreshed: bool = False
    ) -> None: ...

    async def get_discovery(self) -> dict[str, Any] | None: ...

    def fingerprint(self) -> object: ...


@dataclass
class Interactive:
    """``prefixgate login``'s side of the flow: where the browser is sent, and the code comes back."""

    redirect_uri: str
    redirect: Callable[[str], Awaitable[None]]
    callback: Callable[[], Awaitable[AuthorizationCodeResult]]
    fresh: bool = True
    """Ignore stored tokens (a login asks again, e.g. for a wider scope)."""


@dataclass
class OAuthSetup:
    """What the engine hands a remote downstream with ``auth``: its store and how to say "log in"."""

    store_for: Callable[[ServerConfig], Store]
    login_command: Callable[[str], str]
    interactive: Interactive | None = None
    problems: Problems = field(default_factory=lambda: Problems())
    """Why a server's requests need a login (set where the SDK would open a browser)."""
    refusals: tuple[type[Exception], ...] = ()
    """The store's errors for tokens it will not keep (their text never quotes them): a call
    whose refresh meets one fails with that text, the connection stays."""
    removed: tuple[type[Exception], ...] = ()
    """The store's error for refreshed tokens it did not write, the file having been removed
    (a logout) while the refresh was on its way: they are not used either."""
    unreadable: tuple[type[Exception], ...] = ()
    """The store's error for a token file refused for itself (not JSON, a symlink, writable by
    others; not its directory): its reason names the login that replaces it."""


class Problems:
    """Server id -> the latest "log in" reason, numbered, so a caller can tell whether its
    own request met one (``mark`` before, ``since`` after) from an older one."""

    def __init__(self) -> None:
        self._latest: dict[str, tuple[int, str]] = {}
        self._count = 0

    def note(self, server_id: str, reason: str) -> None:
        self._count += 1
        self._latest[server_id] = (self._count, reason)

    def get(self, server_id: str) -> str | None:
        found = self._latest.get(server_id)
        return found[1] if found else None

    def mark(self) -> int:
        return self._count

    def since(self, server_id: str, mark: int) -> str | None:
        found = self._latest.get(server_id)
        return found[1] if found and found[0] > mark else None

    def clear(self, server_id: str) -> None:
        self._latest.pop(server_id, None)


class _Unauthenticated(httpx2.Auth):
    """No login stored: requests go out as they would without ``auth`` (a server that asks
    for no login just works, as in the clients ``import`` reads, which log in only on
    demand); a 401 fails the connection with the ``prefixgate login`` command. Nothing is
    discovered or registered: that is ``login``'s work, not the gateway's."""

    def __init__(self, config: ServerConfig, setup: OAuthSetup, store: Store) -> None:
        self.server_id = config.id
        self.config = config
        self.setup = setup
        self.store = store
        self.seen = store.fingerprint()
        self.inner: httpx2.Auth | None = None
        """The provider of a login made since (in another process), once its file is seen: a
        server that lists its tools without a token stays connected, and would have refused
        every call for as long as the connection lasted."""

    async def async_auth_flow(self, request: httpx2.Request) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        if self.inner is None and self.store.fingerprint() != self.seen:
            self.seen = self.store.fingerprint()
            try:
                found = await provider(self.config, self.setup)
            except OSError as exc:  # (a file refused: as without it, until a login writes it whole)
                log.warning("[%s] %s", self.server_id, exc)
            else:
                self.inner = None if isinstance(found, _Unauthenticated) else found
        if self.inner is not None:
            flow = self.inner.async_auth_flow(request)
            try:
                outgoing = await flow.__anext__()
                while True:
                    outgoing = await flow.asend((yield outgoing))
            except StopAsyncIteration:
                return
            finally:
                await flow.aclose()
        response = yield request
        if response.status_code == 401:
            self.setup.problems.note(self.server_id, f"not logged in: run {self.setup.login_command(self.server_id)}")


class _Guarded(httpx2.Auth):
    """The SDK provider, minus one thing: where it would need a person (our serve-side
    redirect handler raises LoginNeeded), the request is answered with the server's own
    refusal instead of an exception. The SDK's transport dies on an exception from its HTTP
    client (every later request on the connection would fail), while a refusal fails only
    that request: a step-up on one tool costs that tool's call, not the server."""

    requires_response_body = True

    def __init__(self, inner: OAuthClientProvider, bound: _Bound, setup: OAuthSetup, server_id: str) -> None:
        self.inner = inner
        self.bound = bound
        self.setup = setup
        self.server_id = server_id
        self.seen = bound.store.fingerprint()
        self.refusals: tuple[type[Exception], ...] = (AnswerTooLarge, *setup.refusals)
        self.refused: tuple[object, str] | None = None
        """The token file's fingerprint when its refresh token was refused and no other process
        wrote the file within ``FOLLOW_WAIT``, and the reason that call failed with. Until the
        file changes (a new login), a call that would refresh fails at once with that reason:
        the refused refresh token is not sent again, and no call waits ``FOLLOW_WAIT`` again."""

    async def _follow_the_file(self) -> None:
        """Another process changed the token file (``login`` with a wider scope, ``logout``):
        take its tokens (or their absence) before the next request, without a reconnect."""
        now = self.bound.store.fingerprint()
        if now == self.seen:
            return
        self.seen = now
        tokens = await self.bound.store.get_tokens()  # (read again, or kept when the file is refused)
        context = self.inner.context
        if tokens is None:
            context.clear_tokens()
            return
        context.current_tokens = tokens
        client = await self.bound.store.get_client_info()
        headless = isinstance(self.inner, ClientCredentialsOAuthProvider)
        if client is not None and self.bound.fixed is None and not headless:
            context.client_info = client
        await _keep_early(self.inner, self.bound)

    async def async_auth_flow(self, request: httpx2.Request) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        await self._follow_the_file()
        if undiscovered(self.inner, self.inner.context.current_tokens or await self.bound.get_tokens()):
            # Tokens from a file that does not say where they came from: the SDK would refresh
            # at the MCP server's origin. Discovered first, as its own flow does after a 401.
            steps = self._discover()
            ask = await anext(steps, None)
            while isinstance(ask, httpx2.Request):
                try:
                    ask = await steps.asend((yield ask))
                except StopAsyncIteration:
                    ask = None
            if ask is not None:
                yield request  # (without a token: refused, and that refusal is the answer)
                return
        met = _Met()
        _MET.set(met)  # (this request's task: another's flow, in another task, keeps its own)
        early: httpx2.Response | None = None
        sent_with: str | None = None
        held = self.inner.context.current_tokens
        if held is not None and self.inner.context.is_token_valid():
            # A token held valid goes out without the SDK's flow: that flow holds its lock
            # until the answer's head arrives, which from a server answering JSON is the end
            # of the call, so every other request to the server (any principal's) would wait
            # behind a slow one. Only a refusal takes the flow (and its lock: one refresh).
            sent_with = request.headers["Authorization"] = f"Bearer {held.access_token}"  # (as the SDK's flow)
            early = yield request
            if early.status_code not in (401, 403):
                return
        if self.refused is not None and (early is None or early.status_code == 401):
            if self.refused[0] == self.bound.store.fingerprint():
                self.setup.problems.note(self.server_id, self.refused[1])
                if early is None:
                    yield request  # (without a token: refused, and that refusal is the answer)
                return  # (else the refusal of the token held is the answer)
            self.refused = None  # a new login (or a logout): its tokens are tried as any
        flow = self.inner.async_auth_flow(request)
        followed = False
        try:
            outgoing = await flow.__anext__()
            refreshed = outgoing is not request  # the flow refreshed before sending
            while True:
                too_large: str | None = None
                if early is not None and outgoing is request and request.headers.get("authorization") == sent_with:
                    response = early  # the refusal of this very request with this very token: not sent again
                else:
                    own: dict[str, str] = {}
                    if outgoing is not request:
                        outgoing.extensions[OWN_REQUEST] = own
                    response = yield outgoing
                    if "unreached" in own:
                        met.unreached = own["unreached"]
                    too_large = own.get("too large")
                early = None
                refresh = _is_refresh(outgoing)
                if refresh:
                    met.refresh_status = response.status_code
                    follow = response.next_request  # (the SDK's flow follows one only within the origin)
                    met.redirected = _where(follow.url) if follow is not None else None
                if response.status_code == 401 and outgoing is request and not refreshed and self._may_refresh():
                    # A token we held valid was refused: the server's clock runs ahead, or it
                    # dropped the token (a restart, a revocation). The refresh token may still
                    # be good; the SDK would go straight to a new login. Refresh once, resend.
                    refreshed = True
                    await flow.aclose()
                    self.inner.context.token_expiry_time = 1.0  # long past: the next flow refreshes first
                    if undiscovered(self.inner, self.inner.context.current_tokens):
                        steps = self._discover()
                        ask = await anext(steps, None)
                        while isinstance(ask, httpx2.Request):
                            try:
                                ask = await steps.asend((yield ask))
                            except StopAsyncIteration:
                                ask = None
                        if ask is not None:
                            yield request  # as sent: refused again, and that refusal is the answer
                            return
                    flow = self.inner.async_auth_flow(request)
                    outgoing = await flow.__anext__()
                    continue
                try:
                    if too_large is not None:
                        raise AnswerTooLarge(too_large)  # (refused by its declared length, unread)
                    outgoing = await flow.asend(response)
                    if refresh and response.status_code == 200 and self.inner.context.current_tokens is None:
                        # (the SDK clears its tokens when a refresh's answer holds none it can take)
                        met.no_tokens_in = response.headers.get("content-type") or "no content type"
                except LoginNeeded as exc:
                    if not followed and self._refresh_refused():
                        if await self._written_meanwhile():
                            # Another process (a second gateway on the same state) refreshed
                            # first, and the authorization server, rotating refresh tokens,
                            # refused ours: its tokens are in the file now. Once, with those.
                            followed = refreshed = True
                            await flow.aclose()
                            await self._follow_the_file()
                            flow = self.inner.async_auth_flow(request)
                            outgoing = await flow.__anext__()
                            continue
                        if isinstance(exc, RefreshRefused):
                            self.refused = (self.bound.store.fingerprint(), str(exc))
                    yield request  # as sent: refused again, and that refusal is the answer
                    return
                except OAuthFlowError as exc:
                    # The flow met what it cannot go on from (the resource's metadata answering
                    # 5xx, a registration refused, an issuer not the expected one). Raised, it
                    # would end the connection and every call on it; this call fails with why.
                    reason = f"its authorization flow failed ({short(exc)}); the next call tries again"
                    log.warning("[%s] %s", self.server_id, reason)
                    self.setup.problems.note(self.server_id, reason)
                    yield request  # as sent: refused again, and that refusal is the answer
                    return
                except self.refusals as exc:
                    # An answer of the authorization server refused (tokens that cannot be sent,
                    # an answer over the cap), named without quoting it. Raised, it would end the
                    # connection and every call on it; this call fails with why instead.
                    self.setup.problems.note(self.server_id, f"its authorization server's answer was refused: {exc}")
                    await self._back_to_the_store()
                    yield request  # (without a token: refused, and that refusal is the answer)
                    return
        except StopAsyncIteration:
            return
        finally:
            await flow.aclose()

    async def _discover(self) -> AsyncGenerator[httpx2.Request | str, httpx2.Response]:
        """The requests of an ``OriginDiscovery`` (each answer sent back in), then, if it failed,
        why (noted as the server's problem): the caller's request is refused then, not refreshed."""
        discovery = OriginDiscovery(self.inner)
        try:
            while (ask := discovery.ask()) is not None:
                own: dict[str, str] = {}
                ask.extensions[OWN_REQUEST] = own
                answer = yield ask
                for _ in range(REDIRECTS_FOLLOWED):  # (within the origin only, as the SDK's own flow)
                    if (follow := redirect_on_origin(answer)) is None:
                        break
                    own = follow.extensions[OWN_REQUEST] = {}
                    answer = yield follow
                await discovery.take(answer, own.get("unreached") or own.get("too large"))
        except (OAuthFlowError, LoginNeeded, AnswerTooLarge) as exc:
            reason = f"its authorization flow failed ({short(exc)}); the next call tries again"
            if not isinstance(exc, LoginNeeded):  # (that one is noted where it is raised)
                log.warning("[%s] %s", self.server_id, reason)
                self.setup.problems.note(self.server_id, reason)
            yield reason

    async def _back_to_the_store(self) -> None:
        """The SDK holds refused tokens in memory once it has parsed them (it stores them after):
        take the stored ones again, with their expiry, so the refused ones are never sent."""
        self.inner.context.clear_tokens()
        self.inner.context.current_tokens = await self.bound.store.get_tokens()
        await _keep_early(self.inner, self.bound)

    def _refresh_refused(self) -> bool:
        """This flow's refresh was refused (4xx, not 429): the case another process's refresh
        explains. (No refresh tried, a step-up, an outage: nothing to wait for.)"""
        status = _met().refresh_status
        return status is not None and 400 <= status < 500 and status != 429

    async def _written_meanwhile(self) -> bool:
        """Whether another process has written the token file since this one read it: at once,
        or within a moment (the process whose refresh was taken writes it right after)."""
        with anyio.move_on_after(FOLLOW_WAIT):
            while self.bound.store.fingerprint() == self.seen:
                await anyio.sleep(0.05)
            return True
        return False

    def _may_refresh(self) -> bool:
        """A refresh token to try: the interactive grant's (the headless grant has none; it
        asks again by itself)."""
        return not isinstance(self.inner, ClientCredentialsOAuthProvider) and self.inner.context.can_refresh_token()


@dataclass
class _Met:
    """What one request's OAuth flow met on its way, for the reason it fails with."""

    refresh_status: int | None = None
    """The HTTP status of its refresh's answer (a refusal is not an outage)."""
    unreached: str | None = None
    """Which server of its own requests could not be reached, and why."""
    redirected: str | None = None
    """Where its refresh's answer redirected to, not followed (another origin, or a POST made a GET)."""
    no_tokens_in: str | None = None
    """The content type of its refresh's 200 answer that held no tokens (a proxy's page, say)."""


_MET: ContextVar[_Met] = ContextVar("prefixgate_oauth_met")
"""Per request (its task): on the connection, a request made meanwhile cleared what another's
flow had met, and that one then asked for a new login during an outage."""


def _met() -> _Met:
    return _MET.get(None) or _Met()


def _is_refresh(request: httpx2.Request) -> bool:
    """Whether the SDK's flow sent this to refresh the tokens (``_refresh_token``'s form): told
    by its content type first, so an MCP request's body (JSON, megabytes maybe) is never read."""
    if request.method != "POST" or request.headers.get("content-type") != "application/x-www-form-urlencoded":
        return False
    try:
        return b"grant_type=refresh_token" in request.content
    except httpx2.RequestNotRead:  # (a streamed body: not the SDK's form)
        return False


def early_expiry(expires_in: float, now: float) -> float:
    """When to treat a token as expired: before the server does, by half its lifetime (<= 60 s)."""
    return now + expires_in - min(MAX_EARLY, expires_in / 2)


def _scopes(url: str) -> list[str]:
    return " ".join(parse_qs(urlparse(url).query).get("scope", [])).split()


class _Bound:
    """The store as the provider sees it: the pre-registered client presented, expiry kept early."""

    def __init__(
        self,
        store: Store,
        fixed: OAuthClientInformationFull | None,
        fresh: bool,
        serving: bool,
        removed: tuple[type[Exception], ...] = (),
    ) -> None:
        self.store = store
        self.fixed = fixed
        self.fresh = fresh
        self.serving = serving
        """A gateway's connection (not ``login``): tokens it cannot store are used from memory."""
        self.removed = removed
        """``OAuthSetup.removed``."""
        self.provider: OAuthClientProvider | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return None if self.fresh else await self.store.get_tokens()

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.fresh = False
        # A gateway's interactive grant stores only refreshed tokens (it never logs in); the
        # headless grant's are new ones, from the configured secret, which a logout does not undo.
        refreshed = self.serving and not isinstance(self.provider, ClientCredentialsOAuthProvider)
        try:
            await self.store.set_tokens(
                tokens, _discovered(self.provider) if self.provider is not None else None, refreshed=refreshed
            )
        except self.removed as exc:
            # Written back, they undid the logout, and the gateway went on with them.
            log.warning("%s; the refreshed tokens are neither stored nor used", exc)
            if self.provider is not None:
                self.provider.context.clear_tokens()
            return
        except OSError as exc:  # (TokenFileError: the file or its directory refused; a full disk)
            if not self.serving:
                raise  # a login that stores nothing has not worked
            # The authorization server has issued them (a rotating one has retired the refresh
            # token they replace): raised, this ended the connection and every call on it.
            log.warning("%s; the refreshed tokens are used from memory until they can be stored", exc)
        if self.provider is not None and tokens.expires_in is not None:
            # The SDK has just set the exact expiry; take it a little earlier.
            self.provider.context.token_expiry_time = early_expiry(tokens.expires_in, time.time())

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.fixed or await self.store.get_client_info()

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        if self.fixed is None:
            try:
                await self.store.set_client_info(client_info)
            except OSError as exc:  # (TokenFileError: the file or its directory refused; a full disk)
                if not self.serving:
                    raise  # a login that stores nothing has not worked
                # The authorization server has registered it (the SDK holds it already): raised,
                # this ended the connection and every call on it.
                log.warning("%s; the client registration is used from memory until it can be stored", exc)


async def provider(config: ServerConfig, setup: OAuthSetup) -> httpx2.Auth:
    """The ``auth=`` of one connection's HTTP client (a new one per connection: it re-reads
    the token file, so a login made meanwhile in another process is picked up).

    Raises TokenFileError (an OSError) when the stored file is refused.
    """
    assert config.url is not None and config.auth is not None
    store = setup.store_for(config)
    try:
        await store.load()
    except setup.unreadable as exc:
        if setup.interactive is not None:
            raise
        # The server's reason names what replaces the file: a login (which removes it first). The
        # headless grant has no login: a logout removes the file, and its tokens come again.
        fix = f"run {setup.login_command(config.id)} to replace it"
        if config.auth == "client_credentials":
            fix = fix.replace("prefixgate login ", "prefixgate logout ", 1).replace(" to replace it", " to remove it")
        raise type(exc)(f"{exc}: {fix}") from None
    scope = " ".join(config.scopes) or None
    if config.auth == "client_credentials":
        assert config.client_id is not None and config.client_secret is not None
        bound = _Bound(store, None, fresh=False, serving=True, removed=setup.removed)
        with warnings.catch_warnings():
            # Without ``issuer`` the SDK warns that discovery decides where the secret goes;
            # that is the documented choice of a config that names none.
            warnings.simplefilter("ignore")
            headless = ClientCredentialsOAuthProvider(
                config.url,
                bound,
                config.client_id,
                config.client_secret,
                scope=scope,
                issuer=config.issuer,
            )
        if config.issuer is None:  # (with one, the SDK sends the secret only there)
            logout = setup.login_command(config.id).replace("prefixgate login ", "prefixgate logout ", 1)
            fix = f"set its issuer, or run {logout} (which forgets the token)"
            choose_authorization_server(headless, _pinned(headless, config.id, setup, fix))
        await _keep_early(headless, bound)
        return _Guarded(headless, bound, setup, config.id)
    interactive = setup.interactive
    if interactive is None and await store.get_tokens() is None:
        return _Unauthenticated(config, setup, store)
    redirect_uri = interactive.redirect_uri if interactive else PLACEHOLDER_REDIRECT
    fixed = None
    if config.client_id is not None:
        fixed = OAuthClientInformationFull(
            client_id=config.client_id,
            client_secret=config.client_secret,
            redirect_uris=[redirect_uri],  # type: ignore[list-item]
            token_endpoint_auth_method="client_secret_basic" if config.client_secret else "none",
            grant_types=["authorization_code", "refresh_token"],
            scope=scope,
        )
    serving = interactive is None
    bound = _Bound(store, fixed, interactive is not None and interactive.fresh, serving, setup.removed)

    async def no_browser(url: str) -> None:
        granted = await store.get_tokens()
        if granted is None:
            reason = f"not logged in: run {setup.login_command(config.id)}"
            setup.problems.note(config.id, reason)
            raise LoginNeeded(reason)
        wanted = _scopes(url)
        have = (granted.scope or "").split() if granted else []
        extra = [s for s in wanted if s not in have]
        command = setup.login_command(config.id)
        needed: type[LoginNeeded] = LoginNeeded
        if extra:
            reason = (
                f'needs a wider grant (scope {" ".join(extra)}; step-up): run {command} --scope "{" ".join(extra)}"'
            )
        elif (met := _met()).unreached is not None:
            # The authorization server is out of reach (down, or the network): no login would help.
            reason = f"its authorization server could not be reached ({met.unreached}); the next call tries again"
        elif met.redirected is not None:
            # The SDK's flow follows a redirect only within the origin: the refresh token and
            # client secret never go elsewhere. Not a refusal: no new login would help.
            reason = (
                f"its authorization server's token endpoint answered HTTP {met.refresh_status}, a redirect to"
                f" {met.redirected}, not followed; the next call tries again"
            )
        elif met.no_tokens_in is not None:
            # Not a refusal either (the refresh token was not refused): no new login would help.
            reason = (
                "its authorization server's token endpoint answered HTTP 200 without tokens"
                f" ({escape(met.no_tokens_in[:100])}); the next call tries again"
            )
        elif (status := met.refresh_status) is not None and (status >= 500 or status == 429):
            # The token endpoint is down or busy, not refusing: no new login would help.
            reason = f"its authorization server's token endpoint answered HTTP {status}; the next call tries again"
        else:
            reason = f"needs a new login (the stored tokens were refused and could not be refreshed): run {command}"
            needed = RefreshRefused
        setup.problems.note(config.id, reason)
        raise needed(reason)

    async def no_callback() -> AuthorizationCodeResult:  # pragma: no cover - no_browser raised first
        raise LoginNeeded(f"run {setup.login_command(config.id)}")

    metadata = OAuthClientMetadata(
        client_name="prefixgate",
        redirect_uris=[redirect_uri],  # type: ignore[list-item]
        grant_types=["authorization_code", "refresh_token"],
        response_types=["code"],
        scope=scope,
    )
    auth = OAuthClientProvider(
        config.url,
        metadata,
        bound,
        redirect_handler=interactive.redirect if interactive else no_browser,
        callback_handler=interactive.callback if interactive else no_callback,
        client_metadata_url=config.client_metadata_url,
    )
    if serving:
        choose_authorization_server(auth, _pinned(auth, config.id, setup, f"run {setup.login_command(config.id)}"))
    await _keep_early(auth, bound)
    return auth if interactive is not None else _Guarded(auth, bound, setup, config.id)


def _pinned(auth: OAuthClientProvider, server_id: str, setup: OAuthSetup, fix: str) -> Callable[[list[str]], str]:
    """Which of the authorization servers a resource's metadata lists a gateway's flow takes:
    the one its tokens and client came from. It never logs in, so another one (named by a
    hostile or taken-over server) would only have been registered with and then sent the
    refresh token at the next refresh (the headless grant: its client secret at once).
    Nothing known (a record stored before discovery was, a first token): the SDK's choice,
    the first. ``fix`` says what to run when the server has really moved."""

    def choose(advertised: list[str]) -> str:
        context = auth.context
        held = context.auth_server_url or (str(context.oauth_metadata.issuer) if context.oauth_metadata else None)
        held = held or (context.client_info.issuer if context.client_info else None)
        if held is None:
            return advertised[0]
        for candidate in advertised:
            if candidate.rstrip("/") == held.rstrip("/"):  # (a root issuer with or without its slash)
                return candidate
        named = escape(advertised[0][:200])
        reason = (
            f"its protected-resource metadata names another authorization server ({named}) than the one its"
            f" tokens came from ({escape(held)}); nothing was sent there: if the server has moved, {fix}"
        )
        log.warning("[%s] %s", server_id, reason)
        setup.problems.note(server_id, reason)
        raise LoginNeeded(reason)

    return choose


def _discovered(auth: OAuthClientProvider) -> dict[str, Any] | None:
    """Where the provider's tokens come from, to store beside them (``TokenStore.get_discovery``);
    None when this process has not discovered it (it keeps what is stored)."""
    context = auth.context
    if context.oauth_metadata is None:
        return None
    found: dict[str, Any] = {"authorization_server": context.oauth_metadata.model_dump(mode="json", exclude_none=True)}
    if context.auth_server_url is not None:
        found["auth_server_url"] = context.auth_server_url
    if context.protected_resource_metadata is not None:
        found["resource"] = context.protected_resource_metadata.model_dump(mode="json", exclude_none=True)
    return found


async def _restore_discovery(auth: OAuthClientProvider, store: Store) -> None:
    """What the SDK discovers only after a 401, from the store: without it, a new process's
    first refresh goes to the MCP server's own origin (``/token``), refresh token and client
    secret with it, wherever the authorization server is. Anything stored that does not
    validate is left out (the SDK then discovers, as before)."""
    stored = await store.get_discovery()
    if stored is None:
        return
    context = auth.context
    try:
        metadata = OAuthMetadata.model_validate(stored.get("authorization_server"))
        resource = stored.get("resource")
        resource_metadata = ProtectedResourceMetadata.model_validate(resource) if resource is not None else None
    except ValidationError:
        return
    url = stored.get("auth_server_url")
    context.oauth_metadata = metadata
    context.protected_resource_metadata = resource_metadata
    context.auth_server_url = url if isinstance(url, str) else None


async def _keep_early(auth: OAuthClientProvider, bound: _Bound) -> None:
    """What the SDK keeps in memory only, from the store, now and after every token the
    provider stores: the expiry, a little early, and where the tokens came from."""
    bound.provider = auth
    await _restore_discovery(auth, bound.store)
    expires_at = await bound.store.expires_at()
    granted = await bound.store.get_tokens()
    if expires_at is not None and not bound.fresh:
        lifetime = granted.expires_in if granted is not None and granted.expires_in else 0
        auth.context.token_expiry_time = expires_at - min(MAX_EARLY, lifetime / 2)


MAX_AUTH_ANSWER = 1 << 20
"""The largest answer read from anything but the server's own endpoint on an OAuth
connection: protected-resource and authorization-server metadata, token and registration
answers are a few KiB (a 60 MB metadata document would otherwise be read whole, on every 401)."""


class AnswerTooLarge(ValueError):
    """An OAuth-side answer over ``MAX_AUTH_ANSWER``; ``str()`` names where, never what."""


class _Capped(httpx2.AsyncByteStream):
    def __init__(self, inner: httpx2.AsyncByteStream, where: str, cap: int, encodings: list[str]) -> None:
        self.inner, self.where, self.cap = inner, where, cap
        self.encodings = encodings
        """Its ``Content-Encoding``: decoded here, so the cap counts what is read (``bounded.py``)."""

    async def __aiter__(self) -> AsyncGenerator[bytes, None]:
        seen = 0
        async with decoded(self.inner, self.encodings) as chunks:
            async for chunk in chunks:
                seen += len(chunk)
                if seen > self.cap:
                    raise AnswerTooLarge(f"the answer of {self.where} is larger than {self.cap >> 10} KiB; refused")
                yield chunk

    async def aclose(self) -> None:
        await self.inner.aclose()


def _where(url: httpx2.URL) -> str:
    """A URL as named in a reason: scheme, host, port and path, never its query (a credential)."""
    return escape(f"{url.scheme}://{url.host}{'' if url.port is None else f':{url.port}'}{url.path}")


async def publishes_resource_metadata(url: str) -> bool:
    """Whether the MCP server at ``url`` publishes protected-resource metadata (RFC 9728)
    where the SDK's flow looks for it: a server that served a connection without a token (it
    lists its tools to anyone) does want a login for its calls then. Only those GETs are
    sent. Raises ``httpx2.HTTPError`` when they cannot be sent, ``AnswerTooLarge`` (a
    ``ValueError``) for an answer over the cap."""
    async with httpx2.AsyncClient(transport=CappedAuthAnswers(url), timeout=OWN_TIMEOUT) as http:
        for candidate in build_protected_resource_metadata_discovery_urls(None, url):
            if await handle_protected_resource_response(await http.get(candidate)) is not None:
                return True
    return False


class CappedAuthAnswers(httpx2.AsyncBaseTransport):
    """The HTTP transport of an OAuth connection: answers from anywhere but the server's own
    MCP endpoint are read up to ``cap`` bytes and refused beyond it (the MCP endpoint's own
    answers are bounded by ``max_message_bytes``, as without OAuth: bounded.py); a request
    of serve's own flow (``OWN_REQUEST``) that cannot reach its server is answered 503."""

    def __init__(self, endpoint: str, inner: httpx2.AsyncBaseTransport | None = None, cap: int = MAX_AUTH_ANSWER):
        self.endpoint = httpx2.URL(endpoint)
        self.inner = inner or EnvironmentRoutes()
        self.cap = cap

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        url = request.url
        own = request.extensions.get(OWN_REQUEST)
        if isinstance(own, dict):
            request.extensions["timeout"] = httpx2.Timeout(OWN_TIMEOUT).as_dict()
        try:
            response = await self.inner.handle_async_request(request)
        except httpx2.TransportError as exc:
            if not isinstance(own, dict):
                raise
            # Serve's own flow (a refresh, discovery): raised, this would end the connection
            # and every call on it, for the one call that needed the authorization server.
            # Answered as the outage it is; the flow then says so (``_Guarded``).
            where = _where(url)
            if isinstance(exc, httpx2.TimeoutException):
                own["unreached"] = f"{where}: no answer within {OWN_TIMEOUT:g} s"
            else:
                own["unreached"] = f"{where}: {type(exc).__name__}: {' '.join(str(exc).split())[:200] or 'no detail'}"
            return httpx2.Response(503, request=request)
        if (url.scheme, url.host, url.port, url.path) == (
            self.endpoint.scheme, self.endpoint.host, self.endpoint.port, self.endpoint.path
        ):
            return response
        where = _where(url)
        declared = response.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self.cap:
            await response.aclose()
            refused = f"the answer of {where} is {int(declared)} bytes, over {self.cap >> 10} KiB; refused"
            if isinstance(own, dict):  # (serve's own flow: raised here, it would end the connection)
                own["too large"] = refused
                return httpx2.Response(503, request=request)
            raise AnswerTooLarge(refused)
        assert isinstance(response.stream, httpx2.AsyncByteStream)
        response.stream = _Capped(response.stream, where, self.cap, encodings_taken(response))
        return response

    async def aclose(self) -> None:
        await self.inner.aclose()
