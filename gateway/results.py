"""The tool results the gateway writes itself (not relayed from a server).

Every failure the model can meet on a call becomes an ``isError`` result rather than a
JSON-RPC error, so the model reads why and the gateway keeps serving; the meta tools
answer with plain text. Both shapes are built here, once.
"""

from __future__ import annotations

from typing import Any


def text_result(text: str) -> dict[str, Any]:
    """A successful result holding one text block."""
    return {"content": [{"type": "text", "text": text}]}


def error_result(message: str) -> dict[str, Any]:
    """An ``isError`` tool result: the model sees why, the gateway keeps serving."""
    return {"content": [{"type": "text", "text": message}], "isError": True}
