"""What every command shares and can import at once: the exit it leaves with, and the config.

Kept apart from ``startup`` (which brings the whole engine) because ``serve`` reads the
config and starts answering before anything heavy is imported (``gateway.upstream.prelude``).
"""

from __future__ import annotations

import contextlib
import errno
import os

from gateway.config import Config, ConfigError, find_config, load_config
from gateway.downstream import selfloop


class Exit(Exception):
    """Leave the command with ``code``; ``main`` prints the message."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def unwritable(exc: OSError) -> Exit:
    """A failed write of the output (``> /dev/full``, a full disk; a pipe whose reader left, as
    ``| head``): the command's end, one line (none for the pipe), not a traceback."""
    with contextlib.suppress(OSError):  # what is still buffered goes nowhere: flushed at exit, it would fail again
        os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
    if exc.errno == errno.EPIPE:
        return Exit(1, "")
    return Exit(1, f"prefixgate: cannot write the output: {exc.strerror or exc}")


def load(path: str | None, profile: str | None = None) -> Config:
    """The config as ``profile`` sees it (None: the default profile), or Exit(2) with the one
    line naming what is wrong."""
    try:
        found = find_config(path)
        config = load_config(found).view(profile)
    except ConfigError as exc:
        raise Exit(2, f"prefixgate: config error: {exc}") from None
    selfloop.enter(found)
    return config


def has_config() -> bool:
    """Whether a config file is named or found where ``--config`` would look by default."""
    try:
        find_config(None)
    except ConfigError:
        return False
    return True
