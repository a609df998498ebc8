"""Secret heuristics: which literal values in an imported server look like credentials.

A literal secret is kept (the import must work as before) but reported with the
``${VAR}`` reference to move it to; the value itself is never printed.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from gateway.commands.importer.names import VAR_NAME, env_var_name

_SECRET_NAME = re.compile(r"(?i)token|secret|passw(or)?d|passphrase|key|credential|auth|cookie|(^|[^a-z])pat($|[^a-z])")
_TOKEN_PREFIX = re.compile(
    r"^(gh[pousr]_|github_pat_|glpat-|sk-|sk_live_|rk_live_|xox[abposr]-|AKIA[0-9A-Z]{12}|AIza|eyJ[A-Za-z0-9_-]{8,}\.|"
    r"npm_|hf_|pypi-|shpat_|sbp_|lin_api_|dop_v1_|SG\.)"
)
_UUID = re.compile(r"(?i)^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
_SCHEME = re.compile(r"^(Bearer|Basic|Token|token|Bot|Digest)\s+")


def _entropy(text: str) -> float:
    counts: dict[str, int] = {}
    for ch in text:
        counts[ch] = counts.get(ch, 0) + 1
    return -sum(c / len(text) * math.log2(c / len(text)) for c in counts.values())


def looks_like_token(value: str) -> bool:
    """A literal that looks like a credential whatever its key is called."""
    if _TOKEN_PREFIX.match(value):
        return len(value) >= 12
    if len(value) < 20 or any(c.isspace() for c in value) or _UUID.fullmatch(value):
        return False
    if not re.fullmatch(r"[A-Za-z0-9_\-+=.]+", value):
        return False
    if not (re.search(r"[A-Za-z]", value) and re.search(r"[0-9]", value)):
        return False
    return _entropy(value) >= 3.5


def _is_literal_secret(name: str, value: str) -> bool:
    if not value or "${" in value.replace("$${", ""):
        return False
    if looks_like_token(value) or looks_like_token(_SCHEME.sub("", value)):
        return True
    if not _SECRET_NAME.search(name):
        return False
    plain = value.strip()
    if plain.lower() in ("true", "false", "yes", "no", "on", "off", "none", "null"):
        return False
    return not (plain.startswith(("/", "~", "./", "../")) or re.fullmatch(r"\d{1,6}", plain))


def _id_var(server_id: str) -> str:
    return env_var_name(server_id)


def find_secrets(server_id: str, fields: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """(field, variable, what to write) for every literal secret in a server's fields.

    "What to write" is a quoted TOML value (``"${GITHUB_TOKEN}"``) or, for a value that
    only partly changes (a URL), a description. The secret itself never appears.
    """
    found: list[tuple[str, str, str]] = []
    for key, value in fields.get("env", {}).items():
        if _is_literal_secret(key, value):
            var = key if VAR_NAME.fullmatch(key) else env_var_name(key)
            found.append((f"env.{key}", var, '"${' + var + '}"'))
    for key, value in fields.get("headers", {}).items():
        if _is_literal_secret(key, value):
            if key.lower() in ("authorization", "proxy-authorization"):
                var = f"{_id_var(server_id)}_TOKEN"
            else:
                var = f"{_id_var(server_id)}_{env_var_name(re.sub(r'(?i)^x-', '', key))}"
            scheme = _SCHEME.match(value)
            found.append((f"headers.{key}", var, '"' + (scheme.group(0) if scheme else "") + "${" + var + '}"'))
    args = fields.get("args", [])
    for i, arg in enumerate(args):
        flag = re.match(r"^(--?[A-Za-z][A-Za-z0-9_-]*)=(.*)$", arg, re.DOTALL)
        previous = args[i - 1] if i else ""
        userinfo = re.match(r"^([a-z][a-z0-9+.-]*://[^/:@\s]*:)([^@/\s]+)(@.*)$", arg, re.DOTALL | re.IGNORECASE)
        if flag and _is_literal_secret(flag.group(1).lstrip("-"), flag.group(2)):
            var = f"{_id_var(server_id)}_{env_var_name(flag.group(1))}"
            found.append((f"args[{i}]", var, f'"{flag.group(1)}=${{{var}}}"'))
        elif (
            re.match(r"^--?[A-Za-z]", previous)
            and "=" not in previous
            and _is_literal_secret(previous.lstrip("-"), arg)
            and not arg.startswith("-")
        ):
            var = f"{_id_var(server_id)}_{env_var_name(previous)}"
            found.append((f"args[{i}]", var, '"${' + var + '}"'))
        elif userinfo and "${" not in userinfo.group(2):
            var = f"{_id_var(server_id)}_PASSWORD"
            found.append((f"args[{i}]", var, "the URL with :${" + var + "}@ in place of the password"))
        elif not arg.startswith("-") and "${" not in arg and looks_like_token(arg):
            var = f"{_id_var(server_id)}_ARG{i}"
            found.append((f"args[{i}]", var, '"${' + var + '}"'))
    url = fields.get("url")
    if isinstance(url, str):
        userinfo = re.match(r"^(https?://[^/:@\s]*:)([^@/\s]+)(@)", url, re.IGNORECASE)
        if userinfo and "${" not in userinfo.group(2):
            var = f"{_id_var(server_id)}_PASSWORD"
            found.append(("url", var, "the URL with :${" + var + "}@ in place of the password"))
        path = re.sub(r"^[A-Za-z][A-Za-z0-9+.-]*://[^/]*", "", url).split("?", 1)[0].split("#", 1)[0]
        if any("${" not in part and looks_like_token(part) for part in path.split("/")):
            # A key as a path segment: https://mcp.zapier.com/api/mcp/s/<key>/mcp.
            var = f"{_id_var(server_id)}_URL_KEY"
            found.append(("url", var, f"the URL with ${{{var}}} in place of the key in its path"))
        query = url.split("?", 1)[1] if "?" in url else ""
        for part in query.split("&"):
            if "=" not in part:
                continue
            name, value = part.split("=", 1)
            if value and _is_literal_secret(name, value) and _SECRET_NAME.search(name):
                var = f"{_id_var(server_id)}_{env_var_name(name)}"
                found.append(("url", var, f"the URL with {name}=${{{var}}}"))
    return found
