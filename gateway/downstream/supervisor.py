"""Keeping one server connected: the start, its timeout, restarts with backoff, liveness.

Under ``serve`` a server is supervised: one that misses its start-up timeout keeps
connecting and joins when ready, but a restart not ready within that (or twice its longest
start) is taken for hung, stopped and retried; one that exits or drops is restarted with exponential
backoff (``backoff.py``: 1 s doubling to 60 s, reset after 5 minutes healthy). A remote
server has no exit to see: it is checked every ``LIVENESS_INTERVAL`` (15 s), and an SSE server's
connection ends with its event stream (``sseclient.py``), which is seen at once. A server whose
config references an unset ``${VAR}`` fails at once and is never retried. However a
connection ends, the end becomes the server's status and error, never an exception.
"""

from __future__ import annotations

import functools
from contextlib import AsyncExitStack

import anyio
import anyio.lowlevel
from mcp.shared.exceptions import MCPError
from mcp_types.jsonrpc import CONNECTION_CLOSED

from catalog.text import escape
from gateway.config import env_number
from gateway.downstream import backoff
from gateway.downstream.connection import Downstream
from gateway.downstream.errors import DownstreamUnavailable, leaf, short
from gateway.downstream.inbox import Inbox
from gateway.downstream.link import Link
from gateway.downstream.oauth import LoginNeeded
from gateway.downstream.spawn import start_failure
from gateway.downstream.sseclient import Ended
from gateway.downstream.stdio import CommandNotFound
from gateway.fastpath import fast_path

LIVENESS_INTERVAL = env_number("PREFIXGATE_LIVENESS_INTERVAL", 15.0)
"""Seconds between liveness checks of a remote server (the environment variable exists for tests)."""
LISTEN_WAIT = 10.0
"""Seconds a modern server's start waits for its listen stream before listing without it."""


class Supervisor:
    """Runs one server's connections, one after another, in the task it is given (``run``)."""

    def __init__(self, downstream: Downstream) -> None:
        self.d = downstream
        self._ready_at: float | None = None
        """When the current connection became ready: how long it stayed healthy decides the backoff."""
        self._at_ready: tuple[Link, int] | None = None
        """The current connection, once ready, and the requests it had answered then: whether it
        served (answered more) before it ended."""
        self._adopted: Link | None = None
        """The current connection once its handshake was answered (calls go to it from then on)."""
        self._unserved_at_once = False
        """A connection that ended by a 404 before it served was followed at once, and none has
        served since: the next such end waits the backoff."""
        self._handshake_refused = False
        """The server refused the handshake once: its reconnects go straight to ``server/discover``."""
        self._longest_start: float | None = None
        """The longest one of its starts took to be ready, in seconds (None: never ready yet)."""

    async def run(self, *, supervise: bool) -> None:
        """Connect and hold the connection; with ``supervise``, restart it when it ends.

        Without ``supervise`` (one-shot discovery) a server that misses its start-up
        timeout is stopped and reported late.
        """
        d = self.d
        if not d.config.enabled:
            return
        if d.config.unset_reason is not None:
            # Nothing changes this without a restart: failed once, never retried.
            d.set_status("failed", d.config.unset_reason)
            d.closed.set()
            return
        policy = backoff.Backoff()
        d.supervised = supervise
        try:
            with anyio.CancelScope() as scope:
                d.scope = scope
                while True:
                    self._ready_at, self._at_ready, self._adopted = None, None, None
                    await self._attempt(supervise)
                    if not supervise or d.stopping:
                        return
                    await anyio.lowlevel.checkpoint_if_cancelled()  # stopping: no retry to announce
                    ended = f"{d.status}: {escape(d.error)}" if d.error else d.status
                    if d.principal is not None and self._ready_at is None:
                        # One principal's process whose start (its first, or a restart's) failed: the
                        # request that waits for it has the error, and the principal's next request
                        # starts another (gateway/engine/instances.py); none is kept for nobody.
                        d.log.warning("[%s] %s; not retried in the background", d.id, ended)
                        return
                    healthy = None if self._ready_at is None else anyio.current_time() - self._ready_at
                    # A server that ended the session it served (HTTP 404; over SSE, to a message)
                    # asks for a new one, at once (the spec's next step, no failure to back off
                    # from); else the backoff.
                    # But one that ended before it served (answered a request once ready) once only
                    # until a connection serves: a server that forgets each new session at the first
                    # message after the handshake (the ``logging/setLevel`` a ready server is sent)
                    # was reconnected at once, without end. Ready or not: calls go to a connection
                    # from its handshake on (a call that met the last one's 404 goes again at once),
                    # so its session can end while it is still listing, and that was backed off.
                    calls, sse = d.transport.http_calls, d.transport.ended
                    forgot = (calls is not None and calls.session_ended) or (sse is not None and sse.forgotten)
                    served = (self._at_ready is not None and self._at_ready[0].answered > self._at_ready[1]) or (
                        self._adopted is not None and self._adopted.answered_clients > 0
                    )
                    session_ended = forgot and (served or not self._unserved_at_once)
                    self._unserved_at_once = (self._unserved_at_once or session_ended) and not served
                    wait = 0.0 if session_ended else policy.delay(healthy)
                    d.retry_at = anyio.current_time() + wait
                    if d.status in ("exited", "ready") or (forgot and self._adopted is not None):
                        # (a session forgotten after its handshake, ready or not, is a connection lost)
                        d.restarted = anyio.Event()  # (before the status: a request then waits on this one)
                        d.status = "restarting"  # it was serving: say so; a start-up failure stays "failed"
                    # One line per end, its reason and its retry (set_status leaves it to this one).
                    d.log.warning("[%s] %s; retrying in %g s", d.id, ended, wait)
                    await d.events.server_down(d)
                    await self._pause(wait)
                    d.restarts += 1
                    d.retry_at = None
        finally:
            d.link = None
            d.transport.discard()
            d.restarted.set()
            d.settled.set()
            d.joined.set()
            d.closed.set()

    async def _attempt(self, supervise: bool) -> None:
        """One connection, from spawn to close; never raises (but for cancellation)."""
        d = self.d
        started = anyio.current_time()
        d.startup_ms = None
        ready = anyio.Event()

        async def watch_startup(scope: anyio.CancelScope) -> None:
            await anyio.sleep(d.config.startup_timeout)
            if ready.is_set():
                return
            d.set_status("late", f"not ready within startup_timeout {d.config.startup_timeout:g} s")
            if not supervise:
                scope.cancel()
            elif (bound := self._restart_bound()) is not None:
                await anyio.sleep(bound - d.config.startup_timeout)
                if not ready.is_set():
                    d.set_status("failed", f"its restart was not ready within {bound:g} s: stopped" + d.stderr_hint())
                    scope.cancel()  # (its process stopped; the retry follows the backoff)

        async with anyio.create_task_group() as tg:
            # Notifications wait in a bounded inbox with one consumer: a flood while the
            # client is slow costs dropped log lines, never unbounded tasks and memory.
            inbox = Inbox(d.id, functools.partial(d.events.server_notification, d))
            tg.start_soon(inbox.run)
            with anyio.CancelScope() as scope:
                tg.start_soon(watch_startup, scope)
                try:
                    async with AsyncExitStack() as stack:
                        link = Link(
                            d.id,
                            d.transport,
                            inbox,
                            lambda method, params, caller: d.events.server_request(d, method, params, caller),
                            d.log,
                            raw_calls=fast_path(),
                        )
                        await link.open(
                            stack,
                            d.config.protocol,
                            http=d.config.transport == "http",
                            handshake_refused=self._handshake_refused,
                        )
                        self._handshake_refused = link.handshake_refused
                        d.adopt(link)
                        self._adopted = link
                        if (ended := d.transport.ended) is not None:
                            tg.start_soon(_ends_the_start, d, ended, ready, scope)
                        if link.modern and link.session is not None:
                            # Listening before listing: a change made between the two (a call
                            # from a warm start's catalog can come that early) is never missed.
                            listening = anyio.Event()
                            tg.start_soon(
                                d.listen_stream.hold, link.session, d.capabilities, listening, lambda: d.link is link
                            )
                            with anyio.move_on_after(LISTEN_WAIT):
                                await listening.wait()
                        await d.refresh(tools=True, resources=True, prompts=True)
                        d.source = "live"
                        d.startup_ms = round((anyio.current_time() - started) * 1000)
                        self._ready_at = anyio.current_time()
                        self._longest_start = max(self._longest_start or 0.0, self._ready_at - started)
                        self._at_ready = (link, link.answered)
                        ready.set()
                        d.set_status("ready", None)
                        try:
                            await d.events.server_ready(d)
                        finally:
                            d.joined.set()
                        await self._wait_closed(link)
                        d.link = None
                        d.set_status("exited", self._exit_reason())
                except CommandNotFound as exc:
                    d.set_status("failed", str(exc))
                except MCPError as exc:
                    d.set_status("failed", await self._startup_error(exc))
                except OSError as exc:
                    # Cancelled while its pipes were being opened (the gateway stops: uvloop has
                    # closed them already), it did not fail: the cancellation goes on.
                    await anyio.lowlevel.checkpoint_if_cancelled()
                    d.set_status("failed", start_failure(exc, d.config.cwd))
                except Exception as exc:  # a broken server must never take the gateway down
                    cause = leaf(exc)
                    if isinstance(cause, MCPError):
                        d.set_status("failed", await self._startup_error(cause))
                    elif isinstance(cause, CommandNotFound | LoginNeeded):
                        d.set_status("failed", str(cause))
                    elif ready.is_set() and d.config.transport != "stdio":
                        # A remote connection that was serving: its HTTP client failed (the
                        # server went away), which is a lost connection, not a failed start.
                        d.set_status("exited", f"connection lost: {short(cause)}")
                    else:
                        d.set_status("failed", short(cause) + d.stderr_hint())
                finally:
                    d.link = None
                    explains = not ready.is_set() or d.config.transport == "sse"
                    if explains and (problem := d.login_problem()) is not None and d.status in ("failed", "exited"):
                        # The SDK's transport reports a failed auth flow only as a closed
                        # connection; the redirect handler said why (and what to run). Over
                        # streamable HTTP a flow failing once the connection serves costs only
                        # its call (``oauth._Guarded``): what a call met then does not explain
                        # the end (a session the server ended after a login with a new client).
                        d.set_status("failed", problem)
            tg.cancel_scope.cancel()

    def _restart_bound(self) -> float | None:
        """How long a restart may take to be ready before it is taken for hung, stopped and
        retried: its ``startup_timeout``, or twice its longest start if that is more. A restart
        whose process hung (never answered ``initialize``, never wrote) stayed "late" for good,
        every call failing, the server never back. None for a server never ready yet: its start
        keeps connecting and joins when ready (a first start may be fetching its package)."""
        if self._longest_start is None:
            return None
        return max(self.d.config.startup_timeout, 2 * self._longest_start)

    async def _wait_closed(self, link: Link) -> None:
        if (child := self.d.transport.child) is not None:
            await child.stdout_closed.wait()
            await child.wait_exit(2.0)
            return
        # Remote: a failing ping says the connection is lost; an SSE connection's end says so at once.
        ended = self.d.transport.ended
        while True:
            with anyio.move_on_after(LIVENESS_INTERVAL):
                if ended is not None:
                    await ended.event.wait()
                    self.d.error = f"connection lost: {ended.reason}"
                    return
                await anyio.sleep_forever()
            try:
                # ping does not exist in 2026-07-28; server/discover is always answered.
                await self.d.request("server/discover" if link.modern else "ping", None, timeout=10)
            except (MCPError, DownstreamUnavailable) as exc:
                self.d.error = f"connection lost: {exc}"
                return
            except Exception as exc:  # noqa: BLE001 - the HTTP client's own (ConnectError...): the same loss
                self.d.error = f"connection lost: {short(leaf(exc))}"
                return

    async def _pause(self, seconds: float) -> None:
        """The wait before a retry; a server with ``auth`` retries as soon as its token file
        changes (a ``prefixgate login`` in another terminal), not after the whole backoff."""
        oauth = self.d.oauth
        if self.d.config.auth is None or oauth is None:
            await anyio.sleep(seconds)
            return
        store = oauth.store_for(self.d.config)
        before = store.fingerprint()
        with anyio.move_on_after(seconds):
            while store.fingerprint() == before:
                await anyio.sleep(min(1.0, seconds))

    async def _startup_error(self, exc: MCPError) -> str:
        if exc.code == CONNECTION_CLOSED and (child := self.d.transport.child) is not None:
            await child.wait_exit(2.0)
            return f"{child.ending()} during start-up ({child.exit_description()})" + self.d.stderr_hint()
        return exc.message + self.d.stderr_hint()

    def _exit_reason(self) -> str:
        if (child := self.d.transport.child) is not None:
            return f"server {child.ending()} ({child.exit_description()})" + self.d.stderr_hint()
        return self.d.error or "connection closed"


async def _ends_the_start(d: Downstream, ended: Ended, ready: anyio.Event, start: anyio.CancelScope) -> None:
    """An SSE connection whose event stream ends, or whose session the server forgets (a 404 to
    a message), before it is ready fails its start at once, as a streamable-HTTP session's 404
    does: a call that met the last connection's 404 goes again from the handshake on, and the
    listing waited out ``startup_timeout`` (30 s) for answers that could no longer come. Its
    handshake was answered, so it is a connection lost, not a failed start: a request waits for
    the restart (``connection._restarting_soon``) rather than failing meanwhile."""
    await ended.event.wait()
    if not ready.is_set():
        d.set_status("exited", f"connection lost: {ended.reason}")
        start.cancel()
