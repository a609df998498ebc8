"""``prefixgate catalog diff OLD NEW``: why did my prompt cache miss?

Compares two ``prefixgate catalog --json`` outputs (``-`` reads one from stdin) and
prints what changed, the published ``tools/list`` bytes first.

Exit status: 0 the published bytes are identical (every profile's too), 1 they differ (or
cannot be shown identical), 2 a file is unreadable or not a ``catalog --json`` report (one line on
stderr naming the file and the problem).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from catalog.diff import diff, render


class ReportError(Exception):
    """A file that cannot be compared: the message names the file and the problem."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "old", metavar="OLD", nargs="?", help="the earlier 'prefixgate catalog --json' output (- for stdin)"
    )
    parser.add_argument(
        "new", metavar="NEW", nargs="?", help="the later 'prefixgate catalog --json' output (- for stdin)"
    )
    # (SUPPRESS: "catalog --json diff A B" keeps the --json given before the action)
    parser.add_argument(
        "--json", action="store_true", default=argparse.SUPPRESS, help="print the difference as one JSON object"
    )


def load_report(path: str) -> dict[str, Any]:
    """Read and check one ``catalog --json`` report; ReportError names what is wrong."""
    try:
        if path == "-":
            data = sys.stdin.buffer.read()
        else:
            with open(path, "rb") as f:
                data = f.read()
    except OSError as exc:
        raise ReportError(f"{path}: cannot read: {exc.strerror or exc}") from None
    if not data.strip():
        raise ReportError(f"{path}: not a catalog --json report: the file is empty")
    try:
        # bytes: json detects UTF-8 (with or without a BOM), UTF-16 and UTF-32, so a
        # report redirected by a shell that writes UTF-16 still loads.
        report = json.loads(data)
    except json.JSONDecodeError as exc:
        raise ReportError(f"{path}: not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})") from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise ReportError(f"{path}: not valid JSON: {exc}") from None
    except RecursionError:
        raise ReportError(f"{path}: not valid JSON: nested too deeply") from None
    if not isinstance(report, dict):
        raise ReportError(f"{path}: not a catalog --json report: a JSON {_kind(report)}, expected an object")
    if not isinstance(report.get("declarations"), list) and not isinstance(report.get("fingerprint"), str):
        raise ReportError(
            f"{path}: not a catalog --json report: it has neither a 'declarations' list nor a 'fingerprint'"
        )
    return report


def _kind(value: Any) -> str:
    if isinstance(value, list):
        return "array"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "boolean"
    if value is None:
        return "null"
    return "number"


def run(args: argparse.Namespace) -> int:
    if args.old == args.new == "-":
        sys.stderr.write("prefixgate: catalog diff: OLD and NEW are both - (stdin holds one report): give a file\n")
        return 2
    try:
        old = load_report(args.old)
        new = load_report(args.new)
        result = diff(old, new)
    except ReportError as exc:
        sys.stderr.write(f"prefixgate: catalog diff: {exc}\n")
        return 2
    except RecursionError:
        sys.stderr.write(f"prefixgate: catalog diff: {args.old}, {args.new}: nested too deeply to compare\n")
        return 2
    if getattr(args, "json", False):
        _write(json.dumps(result.to_json(), ensure_ascii=False, indent=2) + "\n")
    else:
        _write(render(result))
    return 0 if result.every_identical else 1


def _write(text: str) -> None:
    try:
        sys.stdout.write(text)
    except UnicodeEncodeError:  # a lone surrogate, or a terminal that cannot show the text
        sys.stdout.write(text.encode("ascii", "backslashreplace").decode("ascii"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="prefixgate catalog diff",
        description="Compare two `prefixgate catalog --json` outputs: what changed, and whether the "
        "published tools/list bytes (and so the prompt cache) are affected.",
    )
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
