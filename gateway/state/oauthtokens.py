"""OAuth tokens of remote servers: one private JSON file per server under ``state_dir/oauth``.

The file holds what ``prefixgate login`` obtained (access and refresh token, their expiry
and granted scope) and the client registration it made (dynamic registration or a client
ID metadata document), so ``serve`` and ``catalog`` can use and refresh them without a
browser. Tokens are secrets kept like artifacts: the directory is opened through the same
verified opener (a real directory, ours, 0700), a file is read only if it is a regular
file we own that nobody else can write (opened ``O_NOFOLLOW | O_NONBLOCK``: a planted
symlink or FIFO is refused, never followed), and written atomically (a temporary file in
the directory, fsync, rename, fsync of the directory), so a reader in another process
sees the old tokens or the new ones, never half.

The file name is a hash of the server id *and* its URL: a server whose URL changes never
presents tokens issued for another resource. :class:`TokenStore` implements the mcp SDK's
``TokenStorage`` protocol for one server; the file work is synchronous and small, run in a
worker thread. (The Redis store may take this over later: the seam is this one class.)
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from pathlib import Path
from typing import Any, TypeVar

import anyio
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken
from pydantic import BaseModel, ValidationError

from gateway.state.journal import (
    JournalError,
    check_private_file,
    open_private_dir,
    remove_temporaries,
    replace_private,
    why_not_opened,
)

log = logging.getLogger("prefixgate.oauth")
VERSION = 1
MAX_FILE_BYTES = 1 << 20
"""A token file larger than this is not ours: refused, not read."""
_OPEN_FLAGS = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_Model = TypeVar("_Model", bound=BaseModel)


class TokenFileError(OSError):
    """A token file or its directory failed verification; ``str()`` says which and why."""


class TokenFileRefused(TokenFileError):
    """The token file itself was refused (its content, kind, owner or mode), not its directory:
    what a new ``login`` replaces; ``str()`` says which and why."""


class TokensRemoved(TokenFileError):
    """The token file this store read is gone (``logout``): a refresh that was on its way is
    not written back; ``str()`` says so."""


def file_key(server_id: str, url: str) -> str:
    """The file's name: the server id and URL it was issued for, hashed (neither is shown)."""
    return hashlib.sha256(f"{server_id}\0{url}".encode("utf-8", "surrogatepass")).hexdigest()


class TokenFile:
    """The one file of one (server, url): verified read, atomic replace, removal."""

    def __init__(self, state_dir: Path, server_id: str, url: str) -> None:
        self.server_id = server_id
        self.url = url
        self.directory = state_dir / "oauth"
        self.path = self.directory / f"{file_key(server_id, url)}.json"
        self.label = f"token file {str(self.path)!r}"

    def _dir(self, *, create: bool) -> int | None:
        try:
            return open_private_dir(self.directory, create=create)
        except JournalError as exc:
            raise TokenFileError(str(exc).replace("directory", "token directory", 1)) from None

    def _refused(self, exc: OSError) -> TokenFileError:
        return TokenFileRefused(why_not_opened(self.label, exc))

    def read(self) -> dict[str, Any] | None:
        """The stored record, or None when there is none (or it is for another server/url).

        Raises TokenFileError when the directory or file fails verification or the
        content is not a record of ours (TokenFileRefused: the file's own fault): the caller
        then treats the server as logged out and says why.
        """
        dir_fd = self._dir(create=False)
        if dir_fd is None:
            return None
        try:
            fd = os.open(self.path.name, os.O_RDONLY | _OPEN_FLAGS, dir_fd=dir_fd)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise self._refused(exc) from None
        finally:
            os.close(dir_fd)
        try:
            try:
                info = check_private_file(fd, self.label)
            except JournalError as exc:
                raise TokenFileRefused(str(exc)) from None
            if info.st_size > MAX_FILE_BYTES:
                raise TokenFileRefused(f"{self.label} is larger than {MAX_FILE_BYTES} bytes")
            data = os.pread(fd, MAX_FILE_BYTES + 1, 0)
        finally:
            os.close(fd)
        try:
            record = json.loads(data)
        except (ValueError, RecursionError):
            raise TokenFileRefused(f"{self.label} is not valid JSON") from None
        if not isinstance(record, dict) or record.get("version") != VERSION:
            raise TokenFileRefused(f"{self.label} is not a version {VERSION} token record")
        if record.get("server") != self.server_id or record.get("url") != self.url:
            return None
        return record

    def write(self, record: dict[str, Any]) -> None:
        """Replace the file atomically with ``record`` (0600, fsynced, directory fsynced)."""
        body = json.dumps(
            {**record, "version": VERSION, "server": self.server_id, "url": self.url}, sort_keys=True
        ).encode()
        if len(body) > MAX_FILE_BYTES:  # a file every later read would refuse: not written
            raise TokenFileError(f"{self.label}: {len(body)} bytes to store, over {MAX_FILE_BYTES} bytes: not written")
        dir_fd = self._dir(create=True)
        assert dir_fd is not None
        try:
            replace_private(dir_fd, self.path.name, self.label, body)
        except JournalError as exc:
            raise TokenFileError(str(exc)) from None
        finally:
            os.close(dir_fd)

    def remove(self) -> bool:
        """Forget the server's tokens and registration; whether there was a file. A copy a
        killed write left (its temporary file) goes too."""
        dir_fd = self._dir(create=False)
        if dir_fd is None:
            return False
        try:
            remove_temporaries(dir_fd, self.path.name)
            os.unlink(self.path.name, dir_fd=dir_fd)
            os.fsync(dir_fd)
            return True
        except FileNotFoundError:
            return False
        except OSError as exc:  # (a directory in its place, say: one line, not a traceback)
            raise TokenFileError(f"cannot remove {self.label}: {exc.strerror or exc}") from None
        finally:
            os.close(dir_fd)

    def gone(self) -> bool:
        """Whether the file (or its directory) no longer exists: removed, not merely unreadable."""
        try:
            os.stat(self.path, follow_symlinks=False)
        except FileNotFoundError:
            return True
        except OSError:
            return False
        return False

    def fingerprint(self) -> tuple[int, int, int] | None:
        """Changes when another process writes the file (a ``login`` in another terminal)."""
        try:
            info = os.stat(self.path, follow_symlinks=False)
        except OSError:
            return None
        return (info.st_ino, info.st_mtime_ns, info.st_size)


MAX_TOKEN_CHARS = 16 << 10
"""The longest access or refresh token kept (real ones are hundreds of characters, a JWT a few KiB)."""
MAX_SCOPE_CHARS = 4 << 10
"""The longest scope list asked for or kept."""


class TokenRefused(ValueError):
    """Tokens an authorization server issued that cannot be sent (the message never holds them)."""


def unsendable(tokens: OAuthToken) -> str | None:
    """Why these tokens cannot go into an ``Authorization`` header, in words that do not quote
    them; None when they can. A trailing newline from a sloppy authorization server, or a
    CR/LF/NUL from a hostile one, would otherwise be stored, and every request would then
    fail with an HTTP library error that prints the header, token and all."""
    for label, value in (("access token", tokens.access_token), ("token type", tokens.token_type)):
        if not value or any(not (" " < ch < "\x7f") for ch in value):
            return f"the authorization server issued an {label} that is not a valid HTTP header value"
    refresh = tokens.refresh_token
    if refresh is not None and any(not (" " <= ch < "\x7f") for ch in refresh):
        return "the authorization server issued a refresh token with control or non-ASCII characters"
    for label, value in (("access token", tokens.access_token), ("refresh token", refresh or "")):
        if len(value) > MAX_TOKEN_CHARS:
            return f"the authorization server issued an {label} of {len(value)} characters (at most {MAX_TOKEN_CHARS})"
    if tokens.scope is not None and len(tokens.scope) > MAX_SCOPE_CHARS:
        length = len(tokens.scope)
        return f"the authorization server granted a scope list of {length} characters (at most {MAX_SCOPE_CHARS})"
    return None


def usable_tokens(raw: object) -> tuple[OAuthToken | None, str | None]:
    """A record's ``tokens`` as the gateway uses them: ``(tokens, None)``, or ``(None, why)``
    when some are stored but not used (as logged out), or ``(None, None)`` when none are.
    One answer for the store and for ``doctor``, which must not call "logged in" what the
    gateway will not send."""
    if not raw:
        return None, None
    try:
        tokens = OAuthToken.model_validate(raw)
    except ValidationError:
        return None, "the stored tokens are not a valid token record"
    problem = unsendable(tokens)
    return (None, problem) if problem is not None else (tokens, None)


class TokenStore:
    """The mcp SDK's ``TokenStorage`` for one server, backed by its :class:`TokenFile`.

    Keeps the absolute expiry beside the tokens (``expires_in`` alone means nothing once
    the process that received it is gone), so a restarted gateway refreshes an expired
    access token before using it instead of sending it and meeting a 401.
    """

    def __init__(self, file: TokenFile) -> None:
        self.file = file
        self._record: dict[str, Any] | None = None
        self._seen: object = None
        self._had_file = False
        """Whether this store has read or written the file: gone since, it was removed (a logout)."""

    async def load(self) -> dict[str, Any]:
        """(Re-)read the file; raises TokenFileError when it is refused."""
        self._seen = self.file.fingerprint()
        found = await anyio.to_thread.run_sync(self.file.read)
        self._had_file = self._had_file or found is not None
        self._record = found or {}
        return self._record

    async def _current(self) -> dict[str, Any]:
        """The record, re-read when another process wrote the file since (a gateway and a
        ``catalog`` refreshing at once: with rotating refresh tokens the one refused takes
        the other's fresh tokens from the file instead of asking for a login)."""
        if self._record is None:
            return await self.load()
        if self.file.fingerprint() != self._seen:
            try:
                return await self.load()
            except TokenFileError as exc:
                # Edited badly or replaced under a running gateway: what was read from it
                # before stays in use (raising here would end the connection, and every call
                # on it); the next tokens stored write the file whole again.
                log.warning("%s; the tokens read from it before stay in use", exc)
        return self._record

    async def _update(self, **changes: Any) -> None:
        record = {**(await self._current()), **changes}
        await anyio.to_thread.run_sync(self.file.write, record)
        self._record = record
        self._seen = self.file.fingerprint()
        self._had_file = True

    async def _stored(self, key: str, model: type[_Model]) -> _Model | None:
        """The record's ``key`` as ``model``; None when absent or not valid (treated as logged out)."""
        raw = (await self._current()).get(key)
        try:
            return model.model_validate(raw) if raw else None
        except ValidationError:
            return None

    async def get_tokens(self) -> OAuthToken | None:
        tokens, problem = usable_tokens((await self._current()).get("tokens"))
        if problem is not None:
            log.warning("stored tokens ignored: %s", problem)  # as if logged out: a login or refresh replaces them
        return tokens

    async def set_tokens(
        self, tokens: OAuthToken, discovery: dict[str, Any] | None = None, *, refreshed: bool = False
    ) -> None:
        """Store ``tokens``, and ``discovery`` (where they came from: ``get_discovery``) when given.

        ``refreshed``: raises TokensRemoved, writing nothing, when the file this store read is
        gone: a ``logout`` while the refresh was on its way, which writing would undo.
        """
        problem = unsendable(tokens)
        if problem is not None:
            raise TokenRefused(f"{problem}; not stored (log in again, or ask the server's operator)")
        if refreshed and self._had_file and self.file.gone():
            self._record, self._seen = {}, None  # (logged out, as the file says)
            raise TokensRemoved(f"{self.file.label} was removed (a logout) while its tokens were being refreshed")
        expires_at = time.time() + tokens.expires_in if tokens.expires_in is not None else None
        changes: dict[str, Any] = {
            "tokens": tokens.model_dump(mode="json", exclude_none=True),
            "expires_at": expires_at,
        }
        if discovery is not None:
            changes["discovery"] = discovery
        await self._update(**changes)

    async def get_discovery(self) -> dict[str, Any] | None:
        """The authorization server the tokens came from, as discovered when they were issued
        (its metadata, and the resource's): a new process refreshes there, not at the MCP
        server's own origin, where the SDK would send the refresh token without it."""
        found = (await self._current()).get("discovery")
        return found if isinstance(found, dict) else None

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return await self._stored("client", OAuthClientInformationFull)

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        await self._update(client=client_info.model_dump(mode="json", exclude_none=True))

    async def forget_client(self) -> None:
        """Drop the stored registration (its redirect URI can no longer be served), keep the rest."""
        record = dict(await self.load())
        if record.pop("client", None) is not None:
            await anyio.to_thread.run_sync(self.file.write, record)
            self._record = record

    async def expires_at(self) -> float | None:
        value = (await self._current()).get("expires_at")
        return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None

    def fingerprint(self) -> object:
        return self.file.fingerprint()
