"""The ids and environment-variable names an import invents, deterministically."""

from __future__ import annotations

import re
import unicodedata

from gateway.config import SERVER_ID

VAR_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
"""What prefixgate expands as ``${VAR}``."""

SHARED_VARIABLES = frozenset(
    ("PATH", "HOME", "USER", "LOGNAME", "SHELL", "TERM", "LANG", "PWD", "TMPDIR", "TZ", "DISPLAY", "EDITOR")
)
"""Variables the environment already holds for everything: an input is never given one of these."""


def input_var_name(input_id: str, taken: dict[str, str]) -> str:
    """The variable a VS Code input becomes: its id upper-cased, ``INPUT_`` before it when
    that is a variable the environment holds for everything (``PATH``), ``_2``, ``_3``, ...
    after it when another input of the file already has it (``api-key``, ``api.key``): one
    input's value never reaches a server as another's. ``taken``: id -> variable so far."""
    found = taken.get(input_id)
    if found is not None:
        return found
    base = env_var_name(input_id)
    if base in SHARED_VARIABLES:
        base = f"INPUT_{base}"
    used = set(taken.values())
    var, n = base, 1
    while var in used:
        n += 1
        var = f"{base}_{n}"
    taken[input_id] = var
    return var


def env_var_name(text: str) -> str:
    name = re.sub(r"[^A-Za-z0-9]+", "_", unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode())
    name = name.strip("_").upper() or "VALUE"
    return name if not name[0].isdigit() else "_" + name


def sanitize_id(name: str) -> str:
    """A valid server id for ``name``: unchanged when already valid, else deterministic."""
    if SERVER_ID.fullmatch(name):
        return name
    text = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode()
    text = re.sub(r"[^A-Za-z0-9_-]+", "-", text)
    text = re.sub(r"-{2,}", "-", text).lstrip("-_").rstrip("-")
    return text or "server"
