"""The ``prefixgate`` command line: the parser and the dispatch to each command.

Commands: ``serve``, ``catalog`` (and ``catalog diff``), ``doctor``, ``import``,
``login`` / ``logout``, ``artifacts`` and ``demo-server``; each lives in its own module beside this one.

Exit status: 0 on success, 2 for a bad config or usage (before anything starts), 1 when
a ``required`` server failed or the gateway could not run.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TextIO, cast

from gateway import __version__, logs
from gateway.commands.arguments import doctor_arguments, login_arguments
from gateway.commands.base import Exit, has_config, load, unwritable
from gateway.commands.eventloop import standard_fds_open
from gateway.config import PROFILE_ENV, ConfigError, EnvironmentProfile, default_config
from gateway.downstream import selfloop


@contextlib.contextmanager
def importing() -> Iterator[None]:
    """The heavy imports (the mcp SDK, whose pydantic models build thousands of validators)
    with the cyclic collector off, and what they made frozen out of its reach after: those
    objects live as long as the process, and collecting through them costs start-up time
    and every later full collection."""
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        gc.enable()


def _exit_in(exc: BaseException) -> Exit | None:
    """The Exit inside (possibly nested) task-group exception groups."""
    if isinstance(exc, Exit):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            if (found := _exit_in(inner)) is not None:
                return found
    return None


def common(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("--config", metavar="PATH", help="config file (default: $PREFIXGATE_CONFIG, ./prefixgate.toml, "
                    "$XDG_CONFIG_HOME/prefixgate/config.toml)")
    sp.add_argument("--log-level", choices=logs.LEVELS, default="info", help="stderr log level (default info)")


def profile_argument(sp: argparse.ArgumentParser, what: str, *, inherited: bool = False) -> None:
    """``--profile NAME``; ``inherited``: a catalog action's, which keeps the value ``catalog
    --profile NAME`` (or the environment) set when not given after the action (argparse lets a
    subparser's default overwrite its parent's value)."""
    sp.add_argument(
        "--profile",
        metavar="NAME",
        default=argparse.SUPPRESS if inherited else _environment_profile(),
        help=f"{what} as profile NAME ([profiles.NAME]) sees it (default: ${PROFILE_ENV}, else the "
        "top-level [client] and [policy])",
    )


def _environment_profile() -> EnvironmentProfile | None:
    name = os.environ.get(PROFILE_ENV)
    return EnvironmentProfile(name) if name else None


def _at_least_one(text: str) -> int:
    """A count of one or more (argparse names the option and exits 2 otherwise)."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return value


SERVE_HELP = "serve the gateway over stdio (default) or streamable HTTP (--http)"
SERVE_DESCRIPTION = (
    "Serve the gateway: over stdio for the client that started it (the default), or over streamable HTTP with "
    "--http. A changed config file is taken without a restart ([gateway] reload: watch, the default; signal: "
    "SIGHUP, over HTTP only; off); over stdio SIGHUP stops the gateway."
)


def serve_arguments(serve: argparse.ArgumentParser) -> None:
    common(serve)
    serve.add_argument(
        "--http",
        metavar="HOST:PORT",
        help="serve streamable HTTP at http://HOST:PORT/mcp instead of stdio (port 0: any free port; "
        "the URL is printed on stdout); a non-loopback HOST requires a bearer token",
    )
    serve.add_argument(
        "--token-file",
        metavar="PATH",
        help="file of bearer tokens HTTP clients must send, one per line, each its own principal "
        "(activation and artifacts), optionally followed by profiles=NAME,... (the profiles it may use); "
        "default: $PREFIXGATE_TOKEN",
    )
    serve.add_argument(
        "--tls-cert",
        metavar="PATH",
        help="with --http: serve HTTPS with this certificate chain (PEM); needs --tls-key",
    )
    serve.add_argument("--tls-key", metavar="PATH", help="with --http: the private key (PEM) of --tls-cert")
    serve.add_argument(
        "--session",
        metavar="ID",
        help="persist tool activation for this session id across restarts (default: $PREFIXGATE_SESSION)",
    )
    profile_argument(serve, "serve the catalog")


class _Parser(argparse.ArgumentParser):
    """argparse's parser, but ``--help`` and ``--version`` that stdout cannot take (``> /dev/full``,
    a pipe whose reader left) end as any command's output does (``unwritable``: one line,
    status 1): argparse dropped the error and exited 0, as if they had been printed."""

    def _print_message(self, message: str, file: Any = None) -> None:
        if not message or file is not sys.stdout:
            super()._print_message(message, file)  # (stderr: usage and errors, as argparse has them)
            return
        try:
            file.write(message)
            file.flush()
        except OSError as exc:
            failed = unwritable(exc)
            if str(failed):
                sys.stderr.write(f"{failed}\n")
            raise SystemExit(failed.code) from None


def serve_parser() -> argparse.ArgumentParser:
    """``prefixgate serve`` alone: parsed without importing the other commands (a stdio start
    answers as soon as it can, gateway/upstream/prelude.py)."""
    p = _Parser(prog="prefixgate serve", description=SERVE_DESCRIPTION)
    serve_arguments(p)
    return p


def parser() -> argparse.ArgumentParser:
    """Every command's options; built from light modules only (``arguments``), so that
    ``--version``, ``--help``, ``import``, ``artifacts`` and a config error never wait for the
    mcp SDK."""
    from gateway.commands import artifacts, diff, importer

    p = _Parser(
        prog="prefixgate",
        description="One MCP server entry for many downstream MCP servers, with one deterministic catalog.",
        epilog="The commands that read a config (all but import and demo-server) take --config PATH (default: "
        "$PREFIXGATE_CONFIG, ./prefixgate.toml, $XDG_CONFIG_HOME/prefixgate/config.toml) and --log-level LEVEL "
        f"(stderr log level: {', '.join(logs.LEVELS)}; default info, doctor's warning). 'prefixgate COMMAND --help' "
        "says more.",
    )
    p.add_argument("--version", action="version", version=f"prefixgate {__version__}")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)
    serve_arguments(sub.add_parser("serve", help=SERVE_HELP, description=SERVE_DESCRIPTION))
    cat = sub.add_parser(
        "catalog",
        help="discover every server and print the catalog",
        description="Run the same discovery and build as serve, print the catalog, and exit. It reads the "
        "config file as it is now: what a running gateway publishes after its next reload.",
    )
    common(cat)
    cat.add_argument("--json", action="store_true", help="print one JSON object")
    profile_argument(cat, "print the catalog")
    cat_sub = cat.add_subparsers(dest="catalog_action", metavar="[diff | lock | approve | history]")
    diff_parser = cat_sub.add_parser(
        "diff",
        help="compare two 'catalog --json' outputs: why did my prompt cache miss?",
        description="Compare two 'prefixgate catalog --json' outputs. Exit 0 when the published "
        "tools/list bytes are identical, 1 when they differ, 2 when a file is unusable.",
    )
    diff.add_arguments(diff_parser)
    diff_parser.add_argument("--lock", action="store_true", help="instead: list the live changes pending against the "
                             "catalog lock (exit 1 when any is)")
    lock_parser = cat_sub.add_parser(
        "lock",
        help="write the catalog lock (prefixgate.lock) from the live catalog",
        description="Write the catalog lock beside the config (or at [gateway] lock): each tool's server, "
        "original and published name and declaration with its SHA-256, and the published list's fingerprint. "
        "Refuses to overwrite a lock that live changes are pending against (use catalog approve).",
    )
    approve_parser = cat_sub.add_parser(
        "approve",
        help="accept pending changes into the catalog lock",
        description="Show each pending change (the JSON path of each difference) and record it in the lock "
        "of every profile it is pending in; a serving gateway publishes it as one new epoch. A NAME is a "
        "tool's published name in any profile, or with --profile in that one only (two servers' tools can "
        "share a name there).",
    )
    approve_parser.add_argument("names", nargs="*", metavar="NAME", help="published names of the pending changes")
    approve_parser.add_argument("--all", action="store_true", help="approve every pending change")
    approve_parser.add_argument("--yes", action="store_true", help="do not ask (required when stdin is not a terminal)")
    profile_argument(approve_parser, "name the changes", inherited=True)
    history_parser = cat_sub.add_parser(
        "history",
        help="every epoch the serving gateway published: when, its fingerprint, why, what changed",
        description="Print the epoch history a serving gateway keeps under <state_dir>/history (per "
        "profile, bounded): for each published epoch its time (UTC), fingerprint, the one before, the "
        "reason, and the tools added, removed and changed with the JSON paths that differ. Every new "
        "epoch is a prompt-cache miss for the agents.",
    )
    history_parser.add_argument(
        "--json", action="store_true", default=argparse.SUPPRESS, help="print the records as one JSON array"
    )
    history_parser.add_argument(
        "--limit", type=_at_least_one, default=20, metavar="N", help="the last N epochs (default 20)"
    )
    profile_argument(history_parser, "print the history", inherited=True)
    for sp in (diff_parser, lock_parser, approve_parser, history_parser):
        sp.add_argument("--config", metavar="PATH", default=argparse.SUPPRESS, help="config file")
        sp.add_argument("--log-level", choices=logs.LEVELS, default=argparse.SUPPRESS, help="stderr log level")
    imp = sub.add_parser(
        "import",
        help="turn the MCP servers another client has configured into a prefixgate config",
        description="Read Claude Desktop, Claude Code, Cursor, VS Code, Codex or Gemini CLI MCP server "
        "configurations and print a complete prefixgate config.",
    )
    importer.add_arguments(imp)
    doc = sub.add_parser(
        "doctor",
        help="check the config, every server, the catalog's stability and the directories",
        description="Check, in one run: the config parses; each server starts; renamed, quarantined and "
        "excluded tools, and for Claude Code and Claude Desktop whether every tool name fits once they show "
        "it as mcp__<entry>__<name> (Gemini CLI: mcp_<entry>_<name>); the declaration decision with its "
        "numbers; state and artifact directory ownership and modes; whether the published catalog is "
        "byte-stable across two discoveries. Ends with the snippet to register prefixgate in the chosen "
        "client. It reads the config file as it is now: what a running gateway publishes after its next "
        "reload. Exit 0 when all is well, 1 otherwise.",
    )
    doc.add_argument("--config", metavar="PATH", help="config file (same discovery as the other commands)")
    doc.add_argument("--log-level", choices=logs.LEVELS, default="warning", help="stderr log level (default warning)")
    doctor_arguments(doc)
    profile_argument(doc, "check the catalog")
    login_parser = sub.add_parser(
        "login",
        help="log in to a remote server with auth = \"oauth\" (browser flow; stores its tokens)",
        description="Run the OAuth browser flow for one remote server: open the authorization URL with the "
        "system browser ($BROWSER is honoured; the URL is also printed to stderr), receive the code on a "
        "loopback redirect (http://127.0.0.1:PORT/callback), and store the tokens under <state_dir>/oauth "
        "for serve and catalog, which refresh them. Exit 0 logged in, 1 otherwise.",
    )
    common(login_parser)
    logout_parser = sub.add_parser(
        "logout",
        help="forget a remote server's stored OAuth tokens",
        description="Remove the server's token file (tokens and client registration) from <state_dir>/oauth.",
    )
    common(logout_parser)
    login_arguments(login_parser, logout_parser)
    arts = sub.add_parser(
        "artifacts",
        help="list, read or clean up spilled tool outputs",
        description="The full outputs of results that were bounded (spilled), kept under <state_dir>/artifacts "
        "or in the Redis store that [gateway] store names.",
    )
    artifacts.add_arguments(arts, common)
    sub.add_parser(
        "demo-server",
        help="run the bundled demo MCP server (stdio, or HTTP/SSE with --transport)",
        add_help=False,
    )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    standard_fds_open()
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["demo-server"]:
        with importing():
            from gateway.commands import demo

        return demo.main(argv[1:])
    if argv[:1] == ["serve"]:
        args = serve_parser().parse_args(argv[1:])
        logs.setup(args.log_level)
        return _exiting(lambda: _serve(args))
    p = parser()
    args = p.parse_args(argv)
    logs.setup(getattr(args, "log_level", "info"))
    _unicode_stdout()

    if args.command == "import":
        from gateway.commands import importer

        return _exiting(lambda: importer.run(args))
    if args.command == "doctor":
        with importing():
            from gateway.commands import doctor

        return _exiting(lambda: doctor.run(args.config, args))
    if args.command == "catalog" and args.catalog_action in ("lock", "diff") and _given_profile(args):
        # (as ``catalog lock --profile NAME`` is refused: it was taken and every profile locked)
        p.error(f"catalog {args.catalog_action}: --profile does not apply: it covers every profile")
    if args.command == "catalog" and args.catalog_action == "diff" and not args.lock:
        if args.old is None or args.new is None:
            p.error("catalog diff: give OLD and NEW, or --lock")
        from gateway.commands import diff

        return _exiting(lambda: diff.run(args))
    return _exiting(lambda: _with_config(args))


def _given_profile(args: argparse.Namespace) -> bool:
    """``--profile NAME`` given on the command line (``$PREFIXGATE_PROFILE`` is no choice made for this command)."""
    profile = getattr(args, "profile", None)
    return isinstance(profile, str) and not isinstance(profile, EnvironmentProfile)


def _unicode_stdout() -> None:
    """Let the commands print any text, whatever encoding stdout was given: a description with
    an emoji stopped ``catalog``, ``doctor`` and their ``--json`` on a traceback when stdout
    was not UTF-8 (a Windows pipe's code page, ``PYTHONIOENCODING=ascii``). Piped or redirected,
    the output is UTF-8 (what ``--json`` must be, and what ``import`` writes); on a terminal
    that cannot show a character, it is printed as a backslash escape. A path the locale could
    not decode (any non-ASCII name under ``LC_ALL=C PYTHONUTF8=0``: Python holds it with lone
    surrogates) stopped ``catalog history`` on a traceback as it named its file;
    piped, it is written as its own bytes (as ``ls`` writes it), on a terminal escaped."""
    stream = sys.stdout
    if not hasattr(stream, "reconfigure"):
        return
    if stream.isatty():
        stream.reconfigure(errors="backslashreplace")
    else:
        stream.reconfigure(encoding="utf-8", errors="surrogateescape")
    sys.stdout = cast(TextIO, _Output(stream))


class _Output:
    """The commands' stdout: a write or flush that fails (``> /dev/full``, a full disk in CI, a
    pipe whose reader left: ``| head``) ends the command with one line (none for the pipe, as
    ``ls | head``), where it stopped on a traceback."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except OSError as exc:
            raise unwritable(exc) from None

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError as exc:
            raise unwritable(exc) from None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _exiting(command: Callable[[], int]) -> int:
    """Run a command; an ``Exit`` (also inside task-group exception groups) becomes its status
    and its one line on stderr, Ctrl-C (SIGINT) exit status 130 with no traceback."""
    try:
        code = command()
        sys.stdout.flush()  # (here, where a failure is the command's end: not at exit, unreported)
        return code
    except (Exit, BaseExceptionGroup) as exc:
        found = _exit_in(exc)
        if found is None:
            raise
        logs.flush()  # the log lines written before it come first: the reason is the last line
        if str(found):
            sys.stderr.write(f"{found}\n")
        return found.code
    except KeyboardInterrupt:
        return 130


def _with_config(args: argparse.Namespace) -> int:
    """The commands that read the config first (a bad one: exit 2, before anything starts, and
    before the mcp SDK is imported: only the command that runs imports what it needs)."""
    if args.command == "artifacts":
        from gateway.commands import artifacts

        if args.config is None and not has_config():
            # Nothing to read: the owner's view of the default state directory.
            try:
                config = default_config()
            except ConfigError as exc:  # (no default: no $XDG_STATE_HOME, no home)
                raise Exit(2, f"prefixgate: config error: {exc}") from None
            sys.stderr.write(f"prefixgate: no config file: the artifacts under {config.gateway.state_dir}\n")
            return artifacts.run(config, args)
        return artifacts.run(load(args.config), args)
    # lock, approve and diff --lock cover every profile at once (gateway/commands/lock.py);
    # approve's --profile only says which profile's names its NAMEs are.
    viewed = args.command == "catalog" and args.catalog_action in (None, "history")
    config = load(args.config, args.profile if viewed else None)
    with importing():
        from gateway.commands import catalog, lock, login
        from gateway.commands.eventloop import run_until_stopped

    if args.command == "catalog" and args.catalog_action == "history":
        return catalog.history(config, args.json, args.limit)
    if args.command == "catalog" and args.catalog_action == "lock":
        return run_until_stopped(lock.lock, config)
    if args.command == "catalog" and args.catalog_action == "approve":
        return run_until_stopped(lock.approve_command, config, args.names, args.all, args.yes, args.profile)
    if args.command == "catalog" and args.catalog_action == "diff":
        return run_until_stopped(lock.diff, config, args.json)
    if args.command == "catalog":
        return run_until_stopped(catalog.run, config, args.json)
    if args.command == "login":
        return run_until_stopped(login.login, config, args)
    if args.command == "logout":
        return login.logout(config, args)
    return 2


def _serve(args: argparse.Namespace) -> int:
    """``serve``: over stdio the servers start, and a warm start answers, before the rest of the
    gateway is imported (gateway/upstream/prelude.py); then the gateway takes over."""
    config = load(args.config, args.profile)
    if config.path is not None and (looped := selfloop.loop(config.path)) is not None:
        raise Exit(2, f"prefixgate: a loop of gateways: {looped}: {selfloop.LOOP_FIX}")
    prelude = None
    given = {"--http": args.http, "--token-file": args.token_file, "--session": args.session}
    for flag, value in {**given, "--tls-cert": args.tls_cert, "--tls-key": args.tls_key}.items():
        if value is not None and not value.strip():  # (`--token-file "$TOKENS"` unset: never "not given")
            raise Exit(2, f"prefixgate: {flag}: an empty value")
    if not args.http and (args.tls_cert or args.tls_key):  # (before the stdio start spawns anything)
        raise Exit(2, "prefixgate: --tls-cert and --tls-key serve HTTPS: they need --http HOST:PORT")
    if not args.http and args.token_file:  # (a stdio client is the process that started it: no token)
        raise Exit(2, "prefixgate: --token-file holds the tokens of HTTP clients: it needs --http HOST:PORT")
    if args.http and args.session:  # (given, not $PREFIXGATE_SESSION: that one is set for every entry alike)
        raise Exit(2, "prefixgate: --session names a stdio client's state: over --http each token is a principal")
    session = args.session or os.environ.get("PREFIXGATE_SESSION") or None
    if not args.http:
        from gateway.upstream.prelude import Prelude

        prelude = Prelude.begin(config)
    with importing():
        import anyio

        from gateway.commands import observe, serve
        from gateway.commands.eventloop import backend_options

        options = backend_options()
    tokens, token_file = serve.http_tokens(args, config) if args.http else ([], None)
    tls = serve.http_tls(args)
    anyio.run(serve.serve, config, session, args.http, tokens, prelude, tls, token_file, backend_options=options)
    observe.flush()  # the audit lines and spans still queued
    # Every server has stopped and every answer is out: leave now. The interpreter's own
    # teardown would hand the stop signals back to their default action first, so a client's
    # SIGTERM a moment after EOF (as clients send it) would end the gateway with -15 there.
    logs.flush()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main())
