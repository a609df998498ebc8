"""Logging to stderr only: in stdio mode stdout is the MCP stream."""

from __future__ import annotations

import logging
import sys

LEVELS = ("debug", "info", "warning", "error")


def setup(level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("prefixgate %(levelname)s %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.WARNING)
    logging.getLogger("prefixgate").setLevel(level.upper())
