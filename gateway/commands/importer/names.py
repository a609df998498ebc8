"""The ids and environment-variable names an import invents, deterministically."""

from __future__ import annotations

import re
import unicodedata

from gateway.config import SERVER_ID

VAR_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
"""What prefixgate expands as ``${VAR}``."""

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
