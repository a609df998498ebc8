"""The options of the commands whose modules are heavy to import (``doctor``, ``login``).

The parser is built for every command line, ``--version`` and ``--help`` included; with
these here it needs none of the command modules that bring the mcp SDK (about 0.6 s of
CPU), which only the command that runs then imports (gateway/commands/cli.py).
"""

from __future__ import annotations

import argparse
import math

CLIENTS = ("claude-code", "claude-desktop", "cursor", "vscode", "codex", "gemini")
"""The clients ``doctor`` checks names for and prints a registration snippet for."""
LOGIN_TIMEOUT = 300.0
"""Seconds ``login`` waits for the browser to come back, unless ``--timeout`` says otherwise."""


def _seconds(text: str) -> float:
    """A positive, finite number of seconds (``nan``, ``inf`` or ``-1`` stopped ``login`` on a
    traceback from deep in its wait, after it had started the flow)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"expected a number of seconds greater than 0, got {text!r}")
    return value


def doctor_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``prefixgate doctor`` besides the common --config/--log-level."""
    parser.add_argument(
        "--client",
        choices=CLIENTS,
        default="claude-code",
        help="the client to check tool names for (Claude Code and Claude Desktop wrap them as "
        "mcp__<entry>__<tool>, Gemini CLI as mcp_<entry>_<tool>) and print the registration snippet for "
        "(default claude-code)",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the text report")


def login_arguments(login: argparse.ArgumentParser, logout: argparse.ArgumentParser) -> None:
    """The options of ``prefixgate login`` and ``prefixgate logout``."""
    login.add_argument("server", metavar="SERVER", help="the id of a [servers.SERVER] table with auth = \"oauth\"")
    login.add_argument(
        "--timeout",
        type=_seconds,
        default=LOGIN_TIMEOUT,
        metavar="S",
        help=f"seconds to wait for the browser to come back (default {LOGIN_TIMEOUT:g})",
    )
    login.add_argument(
        "--scope",
        action="append",
        default=[],
        metavar="SCOPES",
        help="ask for these scopes too (space-separated; repeatable), e.g. the wider grant a step-up named",
    )
    login.add_argument("--no-browser", action="store_true", help="only print the URL; do not open a browser")
    logout.add_argument("server", metavar="SERVER", help="the id of a [servers.SERVER] table with auth")
