"""``serve --http --token-file``: the bearer tokens, read at start and again while serving.

A team adds a member's token or revokes a leaked one without a restart (which would end
every handshake-era session): the file is read again on each reload, a SIGHUP or a changed
config, and when it changes itself (``[gateway] reload = "watch"``, the default, as the
config file is watched). A file that does not parse (a duplicate token, an unknown profile,
nothing left in it) is one log line, and the tokens in use keep serving, as a bad config
keeps the running one. A token taken out is refused (401) from its next request on, and
what it has running stops (gateway/upstream/http.py ``Front.set_tokens``); its principal's
state stays (a token given back finds it). Tokens are never logged: a change is
counted, and named by principal (a hash).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from pathlib import Path

import anyio.to_thread

from gateway.config import Stamp, read_user_file, stamp, text_of
from gateway.upstream.http import DEFAULT_PROFILE, BearerToken, principal_of_token

log = logging.getLogger("prefixgate")


class TokenFileError(Exception):
    """The file cannot be used: ``str()`` is one line naming the file (and line), never a token."""


def read_token_file(path: Path, profiles: Collection[str]) -> list[BearerToken]:
    """One token per line (blank lines and lines starting with ``#`` skipped), optionally
    followed by ``profiles=NAME,...``: the profiles it may use (``default`` for the top-level
    one; without the field, every one). ``profiles``: the config's profile names."""
    try:
        text = text_of(read_user_file(path))  # (a byte order mark is no part of a token)
        lines = [line.strip() for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n")]
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else f"not valid {exc.encoding.upper()} (byte {exc.start})"
        raise TokenFileError(f"cannot read {path}: {reason}") from None
    known = {DEFAULT_PROFILE, *profiles}
    tokens: list[BearerToken] = []
    seen: dict[str, int] = {}
    for number, line in enumerate(lines, 1):
        if not line or line.startswith("#"):
            continue
        where = f"{path} line {number}"
        value, *fields = line.split()
        if value in seen:
            # Which line's profiles= would hold is a guess either way: say so, not the token.
            raise TokenFileError(f"{where}: the same token as line {seen[value]}; give each token one line")
        seen[value] = number
        allowed: frozenset[str] | None = None
        for field in fields:
            key, sep, names = field.partition("=")
            if key != "profiles" or not sep:
                why = "a token cannot contain spaces; after it only profiles=NAME,... may follow"
                raise TokenFileError(f"{where}: {why}")
            if allowed is not None:
                raise TokenFileError(f"{where}: profiles= given twice; list every profile in one, comma-separated")
            allowed = frozenset(n for n in names.split(",") if n)
            unknown = sorted(allowed - known)
            if unknown or not allowed:
                shown = f"unknown profile {unknown[0]!r}" if unknown else "profiles= names no profile"
                raise TokenFileError(f"{where}: {shown} (known: {', '.join(sorted(known))})")
        tokens.append(BearerToken(value, allowed))
    if not tokens:
        raise TokenFileError(f"{path} is empty or only whitespace")
    return tokens


@dataclass
class TokenFile:
    """The token file of a running gateway, and the tokens read from it last."""

    path: Path
    tokens: list[BearerToken]
    read: Stamp | None
    """Its ``stamp`` just before it was read: what the watch compares with."""
    apply: Callable[[Sequence[BearerToken]], None] | None = None
    """Puts new tokens in force (the HTTP front's ``set_tokens``, once it serves)."""

    @classmethod
    def load(cls, path: Path, profiles: Collection[str]) -> TokenFile:
        read = stamp(path)
        return cls(path, read_token_file(path, profiles), read)

    async def reload(self, why: str, profiles: Collection[str]) -> None:
        """Read the file again (``profiles``: the running config's); a change is applied at once."""
        try:
            tokens = await anyio.to_thread.run_sync(read_token_file, self.path, profiles)
        except TokenFileError as exc:
            log.error("token file reload (%s) refused: %s; the tokens in use keep serving", why, exc)
            return
        if tokens == self.tokens:
            log.debug("token file reload (%s): no change", why)
            return
        before = {principal_of_token(t.value) for t in self.tokens}
        after = {principal_of_token(t.value) for t in tokens}
        self.tokens = tokens
        if self.apply is not None:  # (else the front, not built yet, starts with these)
            self.apply(tokens)
        added, removed = sorted(after - before), sorted(before - after)
        log.info(
            "token file reloaded (%s): %d tokens; added %s; removed %s",
            why,
            len(tokens),
            ", ".join(added) or "none",
            ", ".join(removed) or "none",
        )
