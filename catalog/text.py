"""Printing untrusted text: names, reasons and errors that come from downstream servers.

Every line the gateway prints (logs, ``catalog``, ``doctor``) may carry a name a server
chose; a newline in it would forge a log line, an ESC drive the terminal, a lone
surrogate make the UTF-8 writer raise. These helpers make such text one printable line.
"""

from __future__ import annotations

import json

__all__ = ["escape", "json_text", "plural", "printable", "quote"]


def plural(count: int, noun: str) -> str:
    """``count`` and ``noun``, the noun plural unless the count is one ("1 tool", "0 tools"):
    every noun the gateway counts in a line (tool, server, change, request...) takes an s."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


def escape(text: str) -> str:
    """``text`` with every non-printable character (newline, ESC, a lone surrogate...) as
    ``\\uXXXX``: a name from a server can then neither forge a log line, nor drive the
    terminal, nor make printing fail. Printable text is returned unchanged."""
    if text.isprintable() and text.isascii():
        return text
    out = []
    for ch in text:
        if ch.isprintable() and not 0xD800 <= ord(ch) <= 0xDFFF:
            out.append(ch)
        elif ord(ch) <= 0xFFFF:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(f"\\U{ord(ch):08x}")
    return "".join(out)


def quote(text: str) -> str:
    """Single-quote a name for a one-line report, escaping what would break the line."""
    return "'" + escape(text) + "'"


def printable(text: str) -> str:
    """A multi-line text (a report) with each line escaped: the last line of defence for
    text assembled from many sources before it is written."""
    return "\n".join(escape(line) for line in text.split("\n"))


def json_text(value: object, indent: int | None = 2) -> str:
    """JSON text for stdout: printable non-ASCII stays readable; a character that is not
    printable (a lone surrogate, which UTF-8 cannot encode; a C1 control such as U+009B, a
    terminal's CSI; a bidi override, which reorders what the terminal shows) becomes its
    ``\\uXXXX`` escape (a pair of them beyond the BMP), so the value parses back exactly.
    JSON itself escapes C0 controls inside strings; a newline outside them is layout."""
    text = json.dumps(value, ensure_ascii=False, indent=indent)
    return "\n".join(line if line.isprintable() else _json_escaped(line) for line in text.split("\n"))


def _json_escaped(line: str) -> str:
    # (``json.dumps`` with ``ensure_ascii`` writes a character as JSON escapes it: a pair beyond the BMP)
    return "".join(ch if ch.isprintable() else json.dumps(ch)[1:-1] for ch in line)
