"""Keep configured secrets out of recorded errors: defence in depth.

Header and env values (and the values ``${VAR}`` puts into args) are never put into errors
on purpose, but an error can still quote one: a server that echoes the token it rejected
or its own command line, an HTTP library naming a bad header value. Whatever is recorded
for a server (shown by ``catalog``, ``doctor``, the logs and in isError results) first has
that server's configured values replaced by ``***``.
"""

from __future__ import annotations

import json
import re
import urllib.parse
from collections.abc import Iterable, Sequence

from mcp_types import ErrorData

from gateway.config import ServerConfig

MASK = "***"
MIN_SECRET = 4
"""Shorter values are left alone: masking "1" or "on" everywhere would garble errors and
hide nothing worth hiding."""


def _forms(value: str) -> Iterable[str]:
    """The value as it may appear in an error: raw, Python repr, bytes repr, JSON."""
    yield value
    yield repr(value)[1:-1]
    yield repr(value.encode("utf-8", "replace"))[2:-1]
    yield json.dumps(value)[1:-1]


_SCHEMES = frozenset(("basic", "bearer", "digest", "negotiate", "token", "apikey"))
"""Authorization schemes: the word before a credential, left readable."""


def _parts(header: str) -> Iterable[str]:
    """The words of a header value (``Bearer <token>``: the token), each masked on its own: a
    server that rejects a token echoes the token, not the header it came in."""
    for part in re.split(r"[\s,;]+", header):
        if part and part.lower() not in _SCHEMES:
            yield part


def secrets_of(config: ServerConfig) -> list[str]:
    """The server's header values (and each word of them), env values, what ``${VAR}`` put
    into its args, OAuth client secret and its URL's password and query values worth
    masking, longest first."""
    values = {*config.headers.values(), *config.env.values(), *config.arg_values}
    values |= {config.client_secret} if config.client_secret else set()
    values |= {part for header in config.headers.values() for part in _parts(header)}
    if config.url:  # a password or key put in the URL (an HTTP library's errors quote the URL)
        values |= set(url_secrets(config.url)) | _query_values(config.url)
    forms = {form for value in values if len(value) >= MIN_SECRET for form in _forms(value)}
    return sorted((f for f in forms if len(f) >= MIN_SECRET), key=len, reverse=True)


SECRET_KEYS = re.compile(
    r"(token|secret|password|passwd|passphrase|apikey|accesskey|privatekey|auth|authorization|cookie|credentials?)$"
)
"""What the name of a key holding a credential ends with, lower-cased and without separators:
``token``, ``access_token``, ``Authorization``, ``x-api-key``, ``client_secret``; not
``max_tokens`` or ``author``."""


def secret_key(name: str) -> bool:
    """Whether an argument named ``name`` holds a credential (its value is masked when kept)."""
    return SECRET_KEYS.search(re.sub(r"[^a-z0-9]", "", name.lower())) is not None


def mask(text: str, secrets: Iterable[str]) -> str:
    """``text`` with each of ``secrets`` (longest first) replaced by ``***``."""
    for secret in secrets:
        if secret in text:
            text = text.replace(secret, MASK)
    return text


def redact(text: str, config: ServerConfig) -> str:
    return mask(text, secrets_of(config))


def masked_error(error: ErrorData, secrets: Sequence[str]) -> ErrorData:
    """A peer's JSON-RPC error with ``secrets`` masked in its message and data (the same object
    when none is there: the common case costs a scan)."""
    message = mask(error.message, secrets)
    data = error.data
    if data is not None:
        text = json.dumps(data, ensure_ascii=False, default=str)
        if (masked := mask(text, secrets)) != text:
            try:
                data = json.loads(masked)
            except ValueError:  # a secret spanning JSON's own quotes: drop the data, keep the message
                data = None
    if message == error.message and data is error.data:
        return error
    return ErrorData(code=error.code, message=message, data=data)


def _query_values(url: str) -> set[str]:
    """The values of a URL's query (``?api_key=...``), raw and decoded."""
    try:
        query = urllib.parse.urlsplit(url).query
    except ValueError:
        return set()
    pairs = [part.partition("=")[2] for part in query.split("&")]
    return {form for value in pairs if value for form in (value, urllib.parse.unquote_plus(value))}


def url_secrets(url: str) -> list[str]:
    """The password of a ``scheme://user:password@host`` URL in every form an error may show."""
    try:
        password = urllib.parse.urlsplit(url).password
    except ValueError:
        return []
    if not password:
        return []
    values = {password, urllib.parse.unquote(password)}
    forms = {form for value in values for form in _forms(value)}
    return sorted((f for f in forms if f), key=len, reverse=True)


def redact_url(text: str, url: str) -> str:
    """``text`` (the URL itself, or an error quoting it) with the URL's password masked."""
    return mask(text, url_secrets(url))
