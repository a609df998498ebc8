"""A small TOML writer: the config text ``import`` writes and the snippets ``doctor`` prints.

The standard library reads TOML but does not write it; the values written here are
strings, numbers, booleans and arrays of them, escaped so any text round-trips.
"""

from __future__ import annotations

import math
import re
import unicodedata
from typing import Any

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def _hidden(code: int) -> bool:
    """Whether a character is written as ``\\uXXXX``: the control characters (C0, DEL and C1:
    U+009B is a terminal's CSI where the config is printed), the format characters (bidi
    overrides, zero-width ones) and the line and paragraph separators, which TOML allows raw
    in a string but which reorder, hide or break what a terminal or an editor shows."""
    if code < 0x80:
        return code < 0x20 or code == 0x7F
    return unicodedata.category(chr(code)) in _UNSEEN_CATEGORIES


_UNSEEN_CATEGORIES = frozenset(("Cc", "Cf", "Zl", "Zp"))


def _escaped(code: int) -> str:
    """TOML's escape of a character: ``\\uXXXX``, or ``\\UXXXXXXXX`` beyond the BMP (a tag
    character, U+E0001, is a format character too)."""
    return f"\\u{code:04X}" if code <= 0xFFFF else f"\\U{code:08X}"


def toml_string(text: str) -> str:
    """A TOML basic string: \\\\ \\" \\n \\t escaped, the characters ``_hidden`` names as \\uXXXX."""
    out = ['"']
    for ch in text:
        code = ord(ch)
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif _hidden(code):
            out.append(_escaped(code))
        elif 0xD800 <= code <= 0xDFFF:
            raise ValueError("lone surrogate")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def toml_key(key: str) -> str:
    return key if _BARE_KEY.fullmatch(key) else toml_string(key)


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError("not a finite number")
        return repr(value)
    if isinstance(value, str):
        return toml_string(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    raise TypeError(type(value).__name__)


def toml_comment(text: str) -> str:
    """One comment line's text: the characters ``_hidden`` names and surrogates escaped."""
    out = []
    for ch in text:
        code = ord(ch)
        if _hidden(code) or 0xD800 <= code <= 0xDFFF:
            out.append(_escaped(code))
        else:
            out.append(ch)
    return "".join(out)
