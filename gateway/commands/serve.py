"""``prefixgate serve``: the gateway over stdio or streamable HTTP until its client leaves or a signal stops it."""

from __future__ import annotations

import argparse
import asyncio
import functools
import logging
import os
import secrets
import signal
import socket
import ssl
import sys
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc
import anyio.to_thread

from catalog.lock import LockError
from gateway import logs
from gateway.commands.observe import flush as flush_telemetry
from gateway.commands.observe import observe
from gateway.commands.reloading import Reloader, watch
from gateway.commands.startup import Exit, discover, running
from gateway.config import Config, env_number, parse_listen
from gateway.downstream.connection import Downstream
from gateway.engine.barrier import required_failures
from gateway.engine.frozen import freeze_the_first_catalog
from gateway.engine.hub import Hub
from gateway.engine.warm import current_key
from gateway.state.history import EpochHistory
from gateway.state.journal import activation_key, session_key
from gateway.state.retention import collect
from gateway.state.session import ClientState
from gateway.state.store import StoreUnavailable
from gateway.upstream.listen import listening_socket
from gateway.upstream.prelude import Prelude
from spill import Artifacts, ArtifactStore, StoreError

if TYPE_CHECKING:
    from gateway.commands.tokenfile import TokenFile
    from gateway.upstream.http import BearerToken
    from gateway.upstream.server import Handlers

log = logging.getLogger("prefixgate")


async def serve(
    config: Config,
    session_id: str | None,
    http: str | None,
    tokens: Sequence[BearerToken],
    prelude: Prelude | None = None,
    tls: ssl.SSLContext | None = None,
    token_file: TokenFile | None = None,
) -> None:
    """Serve until the client leaves (stdio), forever (HTTP), or a signal or a failed barrier exits.

    ``prelude``: the stdio start that answered before this was imported (its early servers
    and what it read are taken over here); ``token_file``: where ``tokens`` came from, read
    again on each reload and when it changes.
    """
    from gateway.fastpath import fast_path
    from gateway.upstream import fast
    from gateway.upstream.server import Handlers

    log.debug("event loop: %s", type(asyncio.get_running_loop()).__module__)
    lane: fast.FastCalls | None = None
    early = prelude.children if prelude is not None else None
    # Over HTTP, a gateway not started for one profile serves every profile, over one set of servers.
    views = [config.view(name) for name in sorted(config.profiles)] if http and config.profile is None else []

    listener = http_listener(http) if http is not None else None
    async with (
        _stop_signals_handled() as hub_signals,
        # Several principals over HTTP: a per-principal server runs a process for each.
        running(config, supervise=True, early=early, profiles=views, instances=http is not None) as hub,
    ):
        hub_signals.start(hub.processes)
        await open_store(hub)
        assert hub.tasks is not None
        metrics = observe(hub, hub.tasks, http=http is not None)
        for each in hub.family:
            each.publisher.history = EpochHistory(config.gateway.state_dir, each.config.profile, config.path)
            await warm_start(each, prelude)
        if http is None:
            owner = activation_key(session_key(session_id), config.profile) if session_id else None
            stdio_state = ClientState(
                hub.store,
                owner,
                await _artifact_store(hub, session_id),
                session=session_key(session_id)[:16] if session_id else None,
            )
            handlers = Handlers(hub, lambda ctx: stdio_state)
            server, options = handlers.server, handlers.options
            if fast_path():
                lane = fast.FastCalls(handlers)  # tools/call answered by the stdio end
        else:
            await _artifact_store(hub, None)  # retention at start
            served = [_http_handlers(each) for each in hub.family]

        async def barrier() -> None:
            try:
                for each in hub.family:  # each hub's config now: a reload may have come first
                    await discover(each.config, each)
            except Exit as exc:
                await _exit_now(hub.processes(), str(exc))
            failures = required_failures(hub.downstreams)
            if failures:
                await _exit_now(hub.processes(), "prefixgate: " + failures[0])
            await freeze_the_first_catalog()

        reloader = Reloader(hub, config.path, token_file) if config.path is not None else None
        mode = config.gateway.reload
        if reloader is not None and http is not None and mode != "off":
            hub_signals.hup = reloader.signalled  # over stdio SIGHUP still stops
        # Watched from the start whenever a reload can ever happen: a SIGHUP's reload can turn "signal" into "watch".
        watched = mode == "watch" or (mode == "signal" and http is not None)

        async with anyio.create_task_group() as tg:
            tg.start_soon(barrier)
            if reloader is not None and watched:
                tg.start_soon(watch, reloader.path, reloader.file_changed, config.read)
                if token_file is not None:
                    tg.start_soon(watch, token_file.path, reloader.token_file_changed, token_file.read)
            if http is None:
                from gateway.upstream.stdio import stdio_streams

                if os.isatty(0):
                    log.info("%s", on_a_terminal(config, session_id))
                handoff = None
                if prelude is not None:
                    handoff = prelude.stop()
                    if prelude.listed and prelude.record is not None:
                        hub.publisher.client_saw = prelude.record.fingerprint  # what the client holds
                async with stdio_streams(
                    config.gateway.max_message_bytes, lane, handoff, config.gateway.drain_timeout, hub_signals
                ) as (read, write):
                    await server.run(read, write, options)
            else:
                from gateway.upstream.http import serve_http

                drain_timeout = functools.partial(_drain_timeout, hub)
                await serve_http(served, http, tokens, metrics, hub_signals, drain_timeout, tls, listener, token_file)
            tg.cancel_scope.cancel()


def _http_handlers(hub: Hub) -> Handlers:
    """A profile's handlers over HTTP: each request's state is its principal's, in that profile."""
    from gateway.upstream.http import principal_of_scope
    from gateway.upstream.server import Handlers

    return Handlers(
        hub, lambda ctx: hub.clients.principal_state(principal_of_scope(getattr(ctx.request, "scope", None)))
    )


def on_a_terminal(config: Config, session_id: str | None) -> str:
    """What ``serve`` says once when a person, not an agent, started it on a terminal: the
    Inspector's command for this same serve, after ``--`` (the Inspector takes ``--config``
    wherever it appears, docs/registering.md)."""
    import shlex

    from gateway.commands.doctor import launcher

    words = [*launcher(), "serve", "--config", os.path.abspath(config.path or "prefixgate.toml")]
    if config.profile is not None:
        words += ["--profile", config.profile]
    if session_id:
        words += ["--session", session_id]
    return (
        "this is a stdio MCP server: an agent starts it and speaks JSON-RPC on its stdin and stdout "
        "(prefixgate doctor prints the command that registers it); to try it by hand: "
        f"npx @modelcontextprotocol/inspector -- {shlex.join(words)}"
    )


async def warm_start(hub: Hub, prelude: Prelude | None) -> None:
    """Publish the last verified catalog of this config at once, if there is one (the barrier
    then runs behind it); the catalog lock is read first (its bytes are part of the record's key)."""
    try:
        hub.lock.load()
    except LockError as exc:
        raise Exit(2, f"prefixgate: catalog lock: {exc}") from None
    record = prelude.record if prelude is not None else None
    if record is None and (key := current_key(hub.config)) is not None:
        record = await hub.records.find(key, files=prelude is None)  # the prelude has read the file
    if record is None or not await hub.publisher.warm_start(record):
        await hub.publisher.locked_start()


async def open_store(hub: Hub) -> None:
    """Reach the configured state store before serving, and take its integrity key.

    A configured Redis store is required: unreachable at start is exit 2, naming the URL
    (its password masked).
    """
    store = hub.store
    try:
        await store.open()
        hub.round_trips.use_key(await store.integrity_key(), shared=store.shared)
    except StoreUnavailable as exc:
        raise Exit(2, f"prefixgate: gateway.store: {exc}") from None
    log.info("state store: %s %s", store.kind, store.where)
    if store.shared:
        assert hub.tasks is not None
        hub.tasks.start_soon(keep_the_key, hub, store.shared_key)


KEY_CHECK = env_number("PREFIXGATE_KEY_CHECK", 5.0)
"""Seconds between looks at the integrity key a shared store holds."""


async def keep_the_key(hub: Hub, shared_key: Callable[[], Coroutine[Any, Any, bytes]]) -> None:
    """Take the integrity key the shared store holds whenever it changes: replicas that
    disagree (Redis restarted without persistence, then one replica started) refuse each
    other's round-trip states until they hold the same key again (a few seconds)."""
    while True:
        await anyio.sleep(KEY_CHECK)
        try:
            key = await shared_key()
        except StoreUnavailable:
            continue  # (down: said by every request that needs it)
        if hub.round_trips.use_key_if_new(key):
            log.warning(
                "the shared store holds another integrity key than this replica's (Redis restarted without "
                "persistence?): this replica takes it; input round trips it began before cannot be resumed"
            )


async def _artifact_store(hub: Hub, session_id: str | None) -> Artifacts | None:
    """The session's artifacts (one owner per process without a session id), after retention.

    A store that cannot be used is logged, not fatal: results are still bounded, with a
    non-retention warning instead of an artifact id.
    """
    config = hub.config
    if not config.spill.enabled:
        return None
    key = session_key(session_id) if session_id else secrets.token_hex(16)
    store = hub.store.artifacts(key)
    if isinstance(store, ArtifactStore):
        try:
            await anyio.to_thread.run_sync(store.ensure)
        except StoreError as exc:
            log.error("artifact store unusable, outputs over the ceiling will not be retained: %s", exc)
    await anyio.to_thread.run_sync(collect, store, config.spill)
    return store


def _drain_timeout(hub: Hub) -> float:
    """``[gateway] drain_timeout`` when a stop signal comes: as the latest reload left it."""
    return hub.config.gateway.drain_timeout


STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
"""Each stops the gateway the same way; the exit status is 128 + the signal number."""


class _Signals:
    """The stop signals' handler (``_stop_on_signals``), started once the servers exist."""

    def __init__(self, tasks: anyio.abc.TaskGroup) -> None:
        self.tasks = tasks
        self.hup: Callable[[], Coroutine[Any, Any, None]] | None = None
        """What SIGHUP does instead of stopping (``serve --http``: a config reload)."""
        self.drain: Callable[[], Coroutine[Any, Any, None]] | None = None
        """What a stop signal does before the stop (``serve --http``: the requests in flight finish)."""
        self.settle: Callable[[], Coroutine[Any, Any, None]] | None = None
        """What the stop waits for once every server has stopped: the answers of the calls it
        cut (the drain's, over HTTP), each an ``isError``, written."""
        self.processes: Callable[[], Sequence[Downstream]] = list
        """What a stop stops (``start``)."""

    def start(self, processes: Callable[[], Sequence[Downstream]]) -> None:
        """``processes``: what a stop stops, read when it comes (servers and instances change)."""
        self.processes = processes
        self.tasks.start_soon(_stop_on_signals, processes, self)

    async def stop_servers(self) -> None:
        """Stop every server as a stop signal does, without exiting: the end of stdin's input
        once drain_timeout has passed, so that each call still in flight is answered with its
        server's exit (an ``isError``), as at a signal, not with the session's own end."""
        await _servers_stopped(self.processes())


@asynccontextmanager
async def _stop_signals_handled() -> AsyncIterator[_Signals]:
    """The stop signals handled (by :func:`_stop_on_signals`, once given the servers) until
    every server has stopped, not only while serving: a client's SIGTERM a second after EOF
    can land in the stop on a loaded machine, where the default action killed the gateway
    (exit -15) and could leave a server that ignores EOF and SIGTERM running."""
    try:
        async with anyio.create_task_group() as tg:
            yield _Signals(tg)
            tg.cancel_scope.cancel()
    finally:
        # Every server has stopped; what is left is the interpreter's own exit, where the
        # default action would end the gateway with -15 instead of 128 + the signal number.
        for signum in STOP_SIGNALS:
            signal.signal(signum, _exit_on_signal)


def _exit_on_signal(signum: int, frame: object) -> None:
    os._exit(128 + signum)


async def _stop_on_signals(processes: Callable[[], Sequence[Downstream]], signals_: _Signals) -> None:
    """SIGTERM, SIGHUP and SIGINT stop every server (none is left running) and exit; SIGHUP
    reloads the config instead when ``serve --http`` reloads (``signals_.hup``).

    Without this a SIGTERM or SIGHUP killed the gateway at once and left the servers
    that ignore EOF on stdin running; clients send SIGTERM a second after closing stdin.
    """
    draining = False
    # SIGHUP ignored where prefixgate started (under nohup) is not a stop: a closed terminal
    # stopped the gateway where a server run directly goes on. It still reloads ``serve --http``.
    ignored = {signal.SIGHUP} if signal.getsignal(signal.SIGHUP) == signal.SIG_IGN else set()
    try:
        with anyio.open_signal_receiver(*STOP_SIGNALS) as signals:
            async for signum in signals:
                if signum == signal.SIGHUP and signals_.hup is not None:
                    signals_.tasks.start_soon(signals_.hup)  # a SIGTERM meanwhile still stops at once
                    continue
                if signum in ignored:
                    log.info("%s ignored, as it was where prefixgate started", signal.Signals(signum).name)
                    continue
                name = signal.Signals(signum).name
                if signals_.drain is not None and not draining:  # the first one over HTTP; the next stops
                    draining = True
                    log.info("%s received: finishing the requests in flight, then stopping every server", name)
                    signals_.tasks.start_soon(_drain_then_exit, processes, signals_, name, 128 + signum)
                    continue
                log.info("%s received: stopping every server", name)
                # Over HTTP this is the second signal, which stops at once: no settling either.
                settle = None if draining else signals_.settle
                await _exit_now(processes(), f"prefixgate: stopped by {name}", 128 + signum, settle)
    finally:
        # Leaving the receiver restores the default action; until the stop's own handlers
        # are set (after every server has stopped), a signal still exits with 128 + its number.
        for signum in STOP_SIGNALS:
            signal.signal(signum, signal.SIG_IGN if signum in ignored else _exit_on_signal)


async def _drain_then_exit(
    processes: Callable[[], Sequence[Downstream]], signals_: _Signals, name: str, code: int
) -> None:
    assert signals_.drain is not None
    await signals_.drain()
    await _exit_now(processes(), f"prefixgate: stopped by {name}", code, signals_.settle)


async def _exit_now(
    downstreams: Sequence[Downstream],
    message: str,
    code: int = 1,
    settle: Callable[[], Coroutine[Any, Any, None]] | None = None,
) -> None:
    """Stop every server (concurrently: each in its own task) and exit with ``code`` at once
    (``settle``: awaited once they have stopped, before the exit).

    Exiting rather than unwinding keeps the stop independent of the transport and of what
    is still running: the client may still be connected, and an HTTP server or a call in
    flight would otherwise have to wind down first.
    """
    await _servers_stopped(downstreams)
    if settle is not None:
        await settle()
    flush_telemetry()
    logs.flush()
    sys.stderr.write(message + "\n")
    sys.stderr.flush()
    os._exit(code)


async def _servers_stopped(downstreams: Sequence[Downstream]) -> None:
    """Stop every server (concurrently: each in its own task) and wait for them, 10 s at most."""
    for downstream in downstreams:
        downstream.stop()
    with anyio.move_on_after(10):
        for downstream in downstreams:
            await downstream.closed.wait()


def http_listener(listen: str) -> socket.socket:
    """``--http``'s socket, bound before any server starts: an address in use (another gateway
    on the port, one restarted before the last has stopped) is exit 2 with one line naming it,
    not a traceback once every server has started."""
    host, port = parse_listen(listen)
    try:
        return listening_socket(host, port)
    except OSError as exc:
        raise Exit(2, f"prefixgate: --http {listen}: cannot listen there: {exc.strerror or exc}") from None


def http_tls(args: argparse.Namespace) -> ssl.SSLContext | None:
    """The TLS context of ``--tls-cert`` and ``--tls-key`` (None without them), loaded before
    anything starts: a missing or unreadable file, or a key that is not the certificate's,
    exits 2 naming the option."""
    cert, key = args.tls_cert, args.tls_key
    if cert is None and key is None:
        return None
    if cert is None or key is None:
        given, missing = ("--tls-key", "--tls-cert") if cert is None else ("--tls-cert", "--tls-key")
        raise Exit(2, f"prefixgate: {given} needs {missing} too")
    from gateway.upstream.http import server_tls

    try:
        return server_tls(cert, key)
    except ssl.SSLError as exc:  # (an OSError too: first)
        reason = exc.reason or str(exc)
    except OSError as exc:
        reason = exc.strerror or str(exc)
    raise Exit(2, f"prefixgate: --tls-cert {cert} / --tls-key {key}: cannot be used: {reason}")


def http_tokens(args: argparse.Namespace, config: Config) -> tuple[list[BearerToken], TokenFile | None]:
    """The HTTP bearer tokens, each its own principal; required off loopback; and the token
    file they came from (read again while serving: ``tokenfile.py``), if they did.

    ``--token-file`` holds one token per line (``tokenfile.read_token_file``);
    ``$PREFIXGATE_TOKEN`` holds one token.
    """
    from gateway.commands.tokenfile import TokenFile, TokenFileError
    from gateway.upstream.http import BearerToken, is_loopback, parse_listen

    try:
        host, _ = parse_listen(args.http)
    except ValueError as exc:
        raise Exit(2, f"prefixgate: --http: {exc}") from None
    tokens: list[BearerToken] = []
    token_file = None
    if args.token_file:
        try:
            token_file = TokenFile.load(Path(args.token_file), config.profiles)
        except TokenFileError as exc:
            raise Exit(2, f"prefixgate: --token-file: {exc}") from None
        tokens = token_file.tokens
    elif os.environ.get("PREFIXGATE_TOKEN"):
        token = os.environ["PREFIXGATE_TOKEN"].strip()
        if not token:
            raise Exit(2, "prefixgate: $PREFIXGATE_TOKEN is only whitespace; set a real token or unset it")
        tokens = [BearerToken(token)]
    if not tokens and not is_loopback(host):
        raise Exit(
            2, f"prefixgate: --http {args.http}: a non-loopback address requires --token-file or $PREFIXGATE_TOKEN"
        )
    return tokens, token_file
