"""What every command shares and can import at once: the exit it leaves with, and the config.

Kept apart from ``startup`` (which brings the whole engine) because ``serve`` reads the
config and starts answering before anything heavy is imported (``gateway.upstream.prelude``).
"""

from __future__ import annotations

from gateway.config import Config, ConfigError, find_config, load_config


class Exit(Exception):
    """Leave the command with ``code``; ``main`` prints the message."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def load(path: str | None, profile: str | None = None) -> Config:
    """The config as ``profile`` sees it (None: the default profile), or Exit(2) with the one
    line naming what is wrong."""
    try:
        return load_config(find_config(path)).view(profile)
    except ConfigError as exc:
        raise Exit(2, f"prefixgate: config error: {exc}") from None


def has_config() -> bool:
    """Whether a config file is named or found where ``--config`` would look by default."""
    try:
        find_config(None)
    except ConfigError:
        return False
    return True
