"""Per-client translation: one source entry -> the fields of one prefixgate server table."""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from gateway.commands.importer.names import VAR_NAME, env_var_name, input_var_name
from gateway.commands.importer.sources import CLIENT_NAMES, Entry, quoted, type_name
from gateway.config import DEFAULT_MAX_CALL_TIME

_PLACEHOLDER = re.compile(r"\$\{([^}]*)\}")
_GEMINI_PLACEHOLDER = re.compile(r"\$\{([^}]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)")
"""Gemini CLI expands ``$VAR`` as well as ``${VAR}`` in its settings."""

# Transport names used by the clients -> prefixgate's.
_TYPES = {
    "stdio": "stdio",
    "http": "http",
    "streamable-http": "http",
    "streamable_http": "http",
    "streamablehttp": "http",
    "sse": "sse",
}

# Fields the JSON clients know that prefixgate has no equivalent for: (warning?, reason).
_DROPPED_FIELDS: dict[str, tuple[bool, str]] = {
    "envFile": (True, "prefixgate reads no env files; put the variables in env as ${VAR} references"),
    "headersHelper": (
        True,
        "prefixgate runs no header helper; set the headers it produces in headers as ${VAR} references",
    ),
    "dev": (False, "VS Code development mode (watch/debug) has no prefixgate equivalent"),
    "sandboxEnabled": (False, "prefixgate runs servers without VS Code's sandbox"),
    "sandbox": (False, "prefixgate runs servers without VS Code's sandbox"),
    "autoApprove": (False, "tool approval belongs to the client that runs prefixgate"),
    "alwaysAllow": (False, "tool approval belongs to the client that runs prefixgate"),
    "timeout": (False, "use startup_timeout / call_timeout (seconds) instead"),
    "trust": (False, "tool approval belongs to the client that runs prefixgate"),
    "authProviderType": (
        True,
        "prefixgate obtains no Google credentials; send the Authorization header as a ${VAR} reference",
    ),
    "targetAudience": (False, "used with authProviderType"),
    "targetServiceAccount": (False, "used with authProviderType"),
    "description": (False, "descriptive only"),
    "name": (False, "descriptive only"),
    "icon": (False, "descriptive only"),
    "gallery": (False, "descriptive only"),
    "version": (False, "descriptive only"),
}
_CODEX_DROPPED: dict[str, tuple[bool, str]] = {
    "oauth_resource": (False, "the resource is taken from the server's protected-resource metadata"),
    "default_tools_approval_mode": (False, "tool approval belongs to the client that runs prefixgate"),
    "tools": (False, "per-tool approval belongs to the client that runs prefixgate"),
}


class Skip(Exception):
    """The entry cannot be translated; the message is the reason."""


@dataclass
class Translated:
    fields: dict[str, Any]
    """TOML keys of the server table in output order; ``env``/``headers`` are dicts."""
    notes: list[tuple[str, str, str]] = field(default_factory=list)
    """(kind, field, text): kind ``warning`` or ``note``; field relative to the server table."""


def _has_surrogate(text: str) -> bool:
    return any(0xD800 <= ord(c) <= 0xDFFF for c in text)


def escape_literal(text: str) -> str:
    """Literal text for a field prefixgate expands: every ``${`` becomes ``$${``."""
    return text.replace("${", "$${")


def _glob_literal(name: str) -> str:
    """An fnmatch pattern matching exactly ``name``."""
    return re.sub(r"([*?\[])", r"[\1]", name)


class _Translator:
    def __init__(self, entry: Entry) -> None:
        self.entry = entry
        self.fmt = entry.source.fmt
        self.out = Translated(fields={})
        self.project_dir = entry.project_dir

    def note(self, where: str, text: str, kind: str = "note") -> None:
        self.out.notes.append((kind, where, text))

    # strings with placeholders --------------------------------------------------------

    def string(self, value: Any, where: str) -> str:
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise Skip(f"{where}: expected a string, found {type_name(value)}")
        if not isinstance(value, str):
            # The value is not shown: a key or PIN written as a JSON number is still a secret.
            self.note(where, "a number: written as a string")
            value = str(value)
        if _has_surrogate(value):
            raise Skip(f"{where}: contains text that is not valid Unicode (a lone surrogate)")
        pieces: list[tuple[bool, str]] = []
        pos = 0
        for match in (_GEMINI_PLACEHOLDER if self.fmt == "gemini" else _PLACEHOLDER).finditer(value):
            if match.start() > pos:
                pieces.append((False, value[pos : match.start()]))
            inner = match.group(1) if match.group(1) is not None else match.group(2)
            pieces.append(self._placeholder(inner, match.group(0), where))
            pos = match.end()
        if pos < len(value):
            pieces.append((False, value[pos:]))
        merged: list[tuple[bool, str]] = []
        for is_ref, text in pieces:
            if merged and not is_ref and not merged[-1][0]:
                merged[-1] = (False, merged[-1][1] + text)
            else:
                merged.append((is_ref, text))
        out = []
        for i, (is_ref, text) in enumerate(merged):
            if is_ref:
                out.append("${" + text + "}")
                continue
            if i + 1 < len(merged) and text.endswith("$"):
                raise Skip(
                    f"{where}: a '$' right before a variable reference cannot be written in a prefixgate config"
                )
            out.append(escape_literal(text))
        return "".join(out)

    def _placeholder(self, inner: str, whole: str, where: str) -> tuple[bool, str]:
        fmt = self.fmt
        client = CLIENT_NAMES[fmt]
        if fmt == "claude-code":
            if VAR_NAME.fullmatch(inner):
                return True, inner
            m = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*):-(.*)", inner, re.DOTALL)
            if m and "$" not in m[2]:
                return True, inner  # prefixgate expands ${VAR:-default} as Claude Code does
            if m:
                self.note(
                    where,
                    f"${{{m[1]}:-...}} has a default with a '$' in it (a nested reference), which prefixgate "
                    f"cannot express; it became ${{{m[1]}}}, so {m[1]} must be set in the environment",
                    "warning",
                )
                return True, m[1]
        if fmt == "gemini" and VAR_NAME.fullmatch(inner):
            return True, inner
        if fmt in ("cursor", "vscode"):
            if inner.startswith("env:") and VAR_NAME.fullmatch(inner[4:]):
                return True, inner[4:]
            if inner == "userHome":
                return True, "HOME"
            if inner in ("workspaceFolder", "workspaceRoot") and self.project_dir:
                return False, self.project_dir
            if inner == "workspaceFolderBasename" and self.project_dir:
                return False, os.path.basename(self.project_dir)
            if inner in ("pathSeparator", "/"):
                return False, "/"
            if fmt == "vscode" and inner.startswith("input:"):
                return True, self._input(inner[len("input:") :], where)
        if fmt in ("claude-desktop", "codex") and VAR_NAME.fullmatch(inner):
            self.note(
                where,
                f"{whole} is kept as literal text, written $${{{inner}}} ({client} does not expand it); "
                f"write ${{{inner}}} instead to read the environment variable",
            )
        else:
            self.note(where, f"{whole} has no prefixgate equivalent; kept as literal text", "warning")
        return False, whole

    def _input(self, input_id: str, where: str) -> str:
        var = input_var_name(input_id, self.entry.source.input_vars)
        seen = self.entry.source.inputs_noted
        if input_id not in seen:
            seen.add(input_id)
            spec = self.entry.source.inputs.get(input_id)
            if spec is None:
                what = f'VS Code input "{input_id}" (not declared in inputs)'
            else:
                desc = spec.get("description")
                extra = []
                if isinstance(desc, str) and desc:
                    extra.append(quoted(desc))
                if spec.get("password"):
                    extra.append("password")
                what = f'VS Code input "{input_id}"' + (f" ({', '.join(extra)})" if extra else "")
            self.note(
                where,
                f"{what} became ${{{var}}}: VS Code prompted for it, prefixgate reads the environment; "
                f"export {var}=... before starting prefixgate",
            )
        return var

    # field helpers --------------------------------------------------------------------

    def str_list(self, value: Any, where: str) -> list[str]:
        if not isinstance(value, list):
            raise Skip(f"{where}: expected a list, found {type_name(value)}")
        return [self.string(v, f"{where}[{i}]") for i, v in enumerate(value)]

    def str_table(self, value: Any, where: str, *, drop_null: bool = False) -> dict[str, str]:
        if not isinstance(value, dict):
            raise Skip(f"{where}: expected an object, found {type_name(value)}")
        out: dict[str, str] = {}
        for key, v in value.items():
            if _has_surrogate(key):
                raise Skip(f"{where}: a key is not valid Unicode (a lone surrogate)")
            if v is None and drop_null:
                self.note(
                    f"{where}.{key}", "null (unset the variable) has no prefixgate equivalent; dropped", "warning"
                )
                continue
            out[key] = self.string(v, f"{where}.{key}")
        return out

    def nonempty(self, value: Any, where: str) -> str:
        text = self.string(value, where)
        if not text:
            raise Skip(f"{where}: is empty")
        return text

    def check_url(self, url: str, where: str) -> None:
        if re.match(r"(?i)^https?://", url) or url.startswith("${"):
            return
        scheme = re.match(r"[A-Za-z][A-Za-z0-9+.-]*(?=:)", url)
        if scheme is None:  # the URL is not shown: past its host it may carry a token (?key=...)
            raise Skip(f"{where}: has no scheme; prefixgate connects over http:// and https:// (write one)")
        raise Skip(f"{where}: {scheme[0]!r} URLs are not supported (prefixgate connects over http:// and https://)")

    def _relative(self, value: str, *, command: bool) -> bool:
        """Whether ``value`` names a path relative to the directory the server starts in: ``./x``
        or ``..``; a command with a directory in it (``.venv/bin/python``: only a bare name is
        looked up in PATH); in a project's file, an argument naming something in the project
        (``build/index.js``, ``server.py``), which its client resolves from the project directory."""
        if value in (".", "..") or value.startswith(("./", "../", ".\\", "..\\")):
            return True
        if not value or "$" in value or "://" in value or value.startswith(("/", "\\", "~", "-")):
            return False
        if re.match(r"[A-Za-z]:[\\/]", value):  # a Windows absolute path
            return False
        if command:
            return "/" in value or "\\" in value
        first = re.split(r"[\\/]", value)[0]  # build/ of build/index.js: built or not, it is the project's
        return self.project_dir is not None and os.path.exists(os.path.join(self.project_dir, first))

    def relative_cwd(self, fields: dict[str, Any]) -> None:
        """A project-scoped stdio server with relative paths runs in its project directory,
        and a relative ``cwd`` is taken from there (where its client starts it)."""
        if "cwd" in fields:
            cwd = fields["cwd"]
            if self.project_dir and not cwd.startswith(("/", "~", "$")):
                rest = cwd.removeprefix("./").rstrip("/")
                base = escape_literal(self.project_dir.rstrip("/") or "/")
                fields["cwd"] = base if rest in ("", ".") else f"{base.rstrip('/')}/{rest}"
                self.note("cwd", f"{cwd} is relative: taken from the project directory, as the client does")
            return
        command = self._relative(fields["command"], command=True)
        relative = [fields["command"]] if command else []
        relative += [v for v in fields.get("args", []) if self._relative(v, command=False)]
        if not relative:
            return
        if self.project_dir:
            fields["cwd"] = escape_literal(self.project_dir)
            self.note(
                "cwd",
                "set to the project directory: the client starts this server there and it uses relative "
                f"paths ({relative[0]})",
            )
        else:
            self.note(
                "command" if command else "args",
                f"uses a relative path ({relative[0]}) but prefixgate starts it in its own working directory; set cwd",
                "warning",
            )


def _scope_list(value: Any) -> list[str] | None:
    """Scopes as a list of tokens (a list, or one space-separated string); None if neither."""
    if isinstance(value, str):
        value = value.split()
    if isinstance(value, list) and all(isinstance(v, str) and v and not any(c.isspace() for c in v) for v in value):
        return list(value)
    return None


_OAUTH_KEYS = frozenset(
    ("clientId", "client_id", "CLIENT_ID", "clientSecret", "client_secret", "CLIENT_SECRET", "callbackPort",
     "callback_port", "scopes")
)  # fmt: skip
"""The keys of a client's OAuth settings object that carry over (the others are reported)."""


def _oauth(t: _Translator, raw: dict[str, Any], fields: dict[str, Any]) -> set[str]:
    """The OAuth part of a remote entry: every client read here logs in to a remote server
    that asks for it (OAuth 2.1, on a 401), so a remote entry that sends no Authorization
    header of its own becomes ``auth = "oauth"``; each client's explicit OAuth settings
    (Claude Code ``oauth``, Cursor ``auth``, Codex ``oauth``/``scopes``) carry over.
    Returns the source keys it consumed."""
    client = CLIENT_NAMES[t.fmt]
    if any(name.lower() == "authorization" for name in fields.get("headers", {})):
        for key in ("oauth", "auth", "scopes") if t.fmt in ("cursor", "codex", "claude-code") else ():
            if key in raw:
                t.note(key, "not imported: the entry sends its own Authorization header", "warning")
        return {"oauth", "auth", "scopes"} & set(raw)
    fields["auth"] = "oauth"
    handled: set[str] = set()
    settings: Any = None
    if t.fmt == "cursor" and isinstance(raw.get("auth"), dict):
        settings, handled = raw["auth"], {"auth"}
    elif isinstance(raw.get("oauth"), dict):
        settings, handled = raw["oauth"], {"oauth"}
    settings = settings or {}
    client_id = next((settings[k] for k in ("clientId", "client_id", "CLIENT_ID") if k in settings), None)
    if client_id is not None:
        fields["client_id"] = t.nonempty(client_id, "client_id")
    secret = next((settings[k] for k in ("clientSecret", "client_secret", "CLIENT_SECRET") if k in settings), None)
    if secret is not None:
        text = t.nonempty(secret, "client_secret")
        if re.fullmatch(r"\$\{[A-Za-z_][A-Za-z0-9_]*\}", text):
            fields["client_secret"] = text
        else:
            var = env_var_name(f"{t.entry.name}_CLIENT_SECRET")
            fields["client_secret"] = "${" + var + "}"
            t.note(
                "client_secret",
                f"the client secret became ${{{var}}} (prefixgate keeps no secret in its config): "
                f"export {var}=... before starting prefixgate (the value is not copied)",
                "warning",
            )
    elif client_id is not None and t.fmt == "claude-code":
        t.note("client_secret", "Claude Code keeps a client secret in its keychain; if this client has one, "
                  "set client_secret = \"${VAR}\"")
    port = next((settings[k] for k in ("callbackPort", "callback_port") if k in settings), None)
    if isinstance(port, int) and not isinstance(port, bool) and 0 < port < 65536:
        fields["redirect_port"] = port
    scopes_value = settings.get("scopes", raw.get("scopes") if t.fmt == "codex" else None)
    if scopes_value is not None:
        scopes = _scope_list(scopes_value)
        if scopes is None:
            t.note("scopes", "not imported: expected a list of scope names", "warning")
        elif scopes:
            fields["scopes"] = scopes
        if t.fmt == "codex":
            handled.add("scopes")
    for key in handled:  # the settings object's other keys (Gemini CLI's authorizationUrl, tokenUrl, ...)
        for name in settings:
            if name in _OAUTH_KEYS or (name == "enabled" and settings[name] is True):
                continue
            why = (
                "prefixgate takes the code on http://127.0.0.1:PORT/callback (redirect_port sets PORT)"
                if name.lower() in ("redirecturi", "redirect_uri")
                else "prefixgate has no such OAuth setting (it finds the authorization server's endpoints "
                "in the server's metadata)"
            )
            t.note(f"{key}.{name}", f"not imported: {why}", "warning")
    t.note("auth", f"oauth: {client} logs in when the server asks; run prefixgate login for it if it does "
              "(tokens are stored under state_dir, never in the config)")
    return handled


def _timeout(t: _Translator, key: str, value: Any, target: str, scale: int) -> None:
    """A client's timeout (seconds, or milliseconds with ``scale`` 1000) as ``target`` in seconds."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
        t.note(key, "not imported: expected a positive number", "warning")
    elif target in t.out.fields:
        t.note(key, f"not imported: {target} is already set from another key", "warning")
    else:
        t.out.fields[target] = value if scale == 1 else value / scale


def _raise_max_call_time(fields: dict[str, Any]) -> None:
    """A ``call_timeout`` past the default ``max_call_time`` raises that too (a config may not
    set one past the other)."""
    if fields.get("call_timeout", 0) > DEFAULT_MAX_CALL_TIME:
        fields["max_call_time"] = fields["call_timeout"]


def _translate_json(entry: Entry) -> Translated:
    raw = entry.raw
    if not isinstance(raw, dict):
        raise Skip(f"expected an object, found {type_name(raw)}")
    t = _Translator(entry)
    fields = t.out.fields
    client = CLIENT_NAMES[entry.source.fmt]
    type_key = next((k for k in ("type", "transport", "transportType") if k in raw), None)
    url_key = next((k for k in ("httpUrl", "url", "serverUrl") if k in raw), None)
    has_command = "command" in raw
    if type_key is not None:
        declared = raw[type_key]
        if not isinstance(declared, str):
            raise Skip(f"{type_key}: expected a string, found {type_name(declared)}")
        kind = _TYPES.get(declared.lower())
        if kind is None:
            raise Skip(f"{type_key} {declared!r} is not a transport prefixgate speaks (stdio, http, sse)")
    elif has_command and url_key:
        raise Skip(f"has both command and {url_key} and no type saying which one {client} uses")
    elif has_command:
        kind = "stdio"
    elif url_key == "httpUrl":  # Gemini CLI's streamable HTTP; its url is tried as HTTP, then SSE
        kind = "http"
    elif url_key:
        url_value = raw[url_key]
        path = url_value.split("?", 1)[0].rstrip("/") if isinstance(url_value, str) else ""
        kind = "sse" if path.endswith("/sse") else "http"
        t.note(
            "transport",
            f"no type given; {kind!r} inferred from the URL" + (" (its path ends in /sse)" if kind == "sse" else ""),
        )
    else:
        raise Skip("has neither command (stdio) nor url (http/sse)")

    handled = {"type", "transport", "transportType", "disabled", "enabled"}
    if kind == "stdio":
        if not has_command:
            raise Skip(f"{type_key} is {raw[type_key]!r} but there is no command")
        fields["command"] = t.nonempty(raw["command"], "command")
        if "args" in raw and raw["args"] is not None:
            args = t.str_list(raw["args"], "args")
            if args:
                fields["args"] = args
        if raw.get("cwd") is not None:
            fields["cwd"] = t.nonempty(raw["cwd"], "cwd")
        if raw.get("env") is not None:
            env = t.str_table(raw["env"], "env", drop_null=True)
            if env:
                fields["env"] = env
        handled |= {"command", "args", "cwd", "env"}
        if url_key:
            t.note(url_key, f"ignored: the entry is a stdio server ({type_key} {raw[type_key]!r})", "warning")
            handled.add(url_key)
        if "headers" in raw:
            t.note("headers", "ignored: headers apply to remote servers only", "warning")
            handled.add("headers")
        t.relative_cwd(fields)
    else:
        if not url_key:
            raise Skip(f"{type_key} is {raw[type_key]!r} but there is no url")
        fields["url"] = t.nonempty(raw[url_key], url_key)
        t.check_url(fields["url"], url_key)
        fields["transport"] = kind
        if raw.get("headers") is not None:
            headers = t.str_table(raw["headers"], "headers")
            if headers:
                fields["headers"] = headers
        handled |= {url_key, "headers"}
        if url_key == "httpUrl" and "url" in raw:
            t.note("url", f"ignored: {client} connects to httpUrl when both are set", "warning")
            handled.add("url")
        handled |= _oauth(t, raw, fields)
        if has_command:
            t.note("command", f"ignored: the entry is a remote server ({type_key} {raw[type_key]!r})", "warning")
            handled.add("command")
        for key in ("args", "env", "cwd"):
            if raw.get(key):
                t.note(key, "ignored: it applies to stdio servers only", "warning")
            handled.add(key)

    enabled = True
    if "disabled" in raw:
        if not isinstance(raw["disabled"], bool):
            raise Skip(f"disabled: expected true or false, found {type_name(raw['disabled'])}")
        enabled = not raw["disabled"]
    if "enabled" in raw:
        if not isinstance(raw["enabled"], bool):
            raise Skip(f"enabled: expected true or false, found {type_name(raw['enabled'])}")
        enabled = enabled and raw["enabled"]
    if entry.scope_disabled:
        enabled = False
        t.note("enabled", f"false: {entry.scope_disabled}")
    if not enabled:
        fields["enabled"] = False
    for key, target in (("includeTools", "include"), ("excludeTools", "exclude")):  # Gemini CLI's
        if key in raw:
            fields[target] = [_glob_literal(name) for name in t.str_list(raw[key], key)]
            handled.add(key)
    if entry.source.fmt == "gemini" and "timeout" in raw:
        _timeout(t, "timeout", raw["timeout"], "call_timeout", 1000)  # Gemini CLI's, in milliseconds
        _raise_max_call_time(fields)
        handled.add("timeout")

    for key in raw:
        if key in handled:
            continue
        loud, reason = _DROPPED_FIELDS.get(key, (False, f"unknown {client} field"))
        t.note(key, f"not imported: {reason}", "warning" if loud else "note")
    return _ordered(t.out)


def _translate_codex(entry: Entry) -> Translated:
    raw = entry.raw
    if not isinstance(raw, dict):
        raise Skip(f"expected a table, found {type_name(raw)}")
    t = _Translator(entry)
    fields = t.out.fields
    has_command, has_url = "command" in raw, "url" in raw
    if has_command and has_url:
        raise Skip("has both command and url")
    if not has_command and not has_url:
        raise Skip("has neither command (stdio) nor url (streamable HTTP)")
    handled = {"enabled", "required", "startup_timeout_sec", "startup_timeout_ms", "tool_timeout_sec",
               "enabled_tools", "disabled_tools"}  # fmt: skip
    if has_command:
        fields["command"] = t.nonempty(raw["command"], "command")
        if "args" in raw:
            args = t.str_list(raw["args"], "args")
            if args:
                fields["args"] = args
        if "cwd" in raw:
            fields["cwd"] = t.nonempty(raw["cwd"], "cwd")
        env = t.str_table(raw["env"], "env") if "env" in raw else {}
        env_vars = raw.get("env_vars", [])
        if not isinstance(env_vars, list):
            raise Skip(f"env_vars: expected a list, found {type_name(env_vars)}")
        for i, item in enumerate(env_vars):
            name = item.get("name") if isinstance(item, dict) else item
            if not isinstance(name, str) or not VAR_NAME.fullmatch(name):
                raise Skip(f"env_vars[{i}]: expected an environment variable name")
            if name not in env:
                env[name] = "${" + name + "}"
                t.note(
                    f"env.{name}",
                    f"from env_vars: passed through as ${{{name}}}; Codex skips it when unset, "
                    "prefixgate requires it to be set",
                )
        if env:
            fields["env"] = env
        handled |= {"command", "args", "cwd", "env", "env_vars"}
        for key in ("http_headers", "env_http_headers", "bearer_token_env_var", "bearer_token", "scopes", "oauth"):
            if key in raw:
                t.note(key, "ignored: it applies to remote servers only", "warning")
                handled.add(key)
        t.relative_cwd(fields)
    else:
        fields["url"] = t.nonempty(raw["url"], "url")
        t.check_url(fields["url"], "url")
        fields["transport"] = "http"
        headers = t.str_table(raw["http_headers"], "http_headers") if "http_headers" in raw else {}

        def put(name: str, value: str) -> None:
            for existing in [k for k in headers if k.lower() == name.lower()]:
                del headers[existing]
            headers[name] = value

        env_headers = raw.get("env_http_headers", {})
        if not isinstance(env_headers, dict):
            raise Skip(f"env_http_headers: expected a table, found {type_name(env_headers)}")
        for name, var in env_headers.items():
            if not isinstance(var, str) or not VAR_NAME.fullmatch(var):
                raise Skip(f"env_http_headers.{name}: expected an environment variable name")
            put(name, "${" + var + "}")
            t.note(
                f"headers.{name}",
                f"from env_http_headers: ${{{var}}}; Codex omits the header when {var} is unset, "
                "prefixgate requires it to be set",
            )
        if "bearer_token_env_var" in raw:
            var = raw["bearer_token_env_var"]
            if not isinstance(var, str) or not VAR_NAME.fullmatch(var):
                raise Skip("bearer_token_env_var: expected an environment variable name")
            put("Authorization", "Bearer ${" + var + "}")
        if "bearer_token" in raw:
            put("Authorization", "Bearer " + t.nonempty(raw["bearer_token"], "bearer_token"))
        if headers:
            fields["headers"] = headers
        handled |= {"url", "http_headers", "env_http_headers", "bearer_token_env_var", "bearer_token"}
        handled |= _oauth(t, raw, fields)
        for key in ("args", "env", "env_vars", "cwd"):
            if key in raw:
                t.note(key, "ignored: it applies to stdio servers only", "warning")
                handled.add(key)

    for key in ("enabled", "required"):
        if key in raw and not isinstance(raw[key], bool):
            raise Skip(f"{key}: expected true or false, found {type_name(raw[key])}")
    if raw.get("enabled") is False:
        fields["enabled"] = False
    if entry.scope_disabled:
        fields["enabled"] = False
        t.note("enabled", f"false: {entry.scope_disabled}")
    if raw.get("required") is True:
        fields["required"] = True
    for key, target, scale in (
        ("startup_timeout_sec", "startup_timeout", 1),
        ("startup_timeout_ms", "startup_timeout", 1000),
        ("tool_timeout_sec", "call_timeout", 1),
    ):
        if key in raw:
            _timeout(t, key, raw[key], target, scale)
    _raise_max_call_time(fields)
    for key, target in (("enabled_tools", "include"), ("disabled_tools", "exclude")):
        if key in raw:
            names = t.str_list(raw[key], key)
            fields[target] = [_glob_literal(n) for n in names]
    for key in raw:
        if key in handled:
            continue
        loud, reason = _CODEX_DROPPED.get(key, (False, "unknown Codex field"))
        t.note(key, f"not imported: {reason}", "warning" if loud else "note")
    return _ordered(t.out)


_ORDER = ("command", "args", "cwd", "url", "transport", "auth", "client_id", "client_secret", "scopes",
          "redirect_port", "enabled", "required", "startup_timeout", "call_timeout", "max_call_time", "include",
          "exclude", "env", "headers")  # fmt: skip


def _ordered(out: Translated) -> Translated:
    out.fields = {k: out.fields[k] for k in _ORDER if k in out.fields}
    return out


def _runs_prefixgate(fields: dict[str, Any]) -> bool:
    """Whether a stdio server is prefixgate's own ``serve``: the entry ``doctor``'s snippet
    registers in the client (``/path/to/prefixgate serve``, ``python -m gateway serve``,
    ``uvx prefixgate serve``). An import run once prefixgate is registered reads it too;
    imported, prefixgate would start itself, which starts itself again, without end."""
    words = [*str(fields.get("command", "")).split(), *fields.get("args", [])]
    if "serve" not in words:
        return False
    before = words[: words.index("serve")]
    for i, word in enumerate(before):
        name = re.split(r"[\\/]", word)[-1].lower().removesuffix(".exe")
        if name == "prefixgate" or (word == "gateway" and i > 0 and before[i - 1] == "-m"):
            return True
    return False


def _serves_prefixgate(entry: Entry, fields: dict[str, Any]) -> bool:
    """Whether a remote entry is prefixgate's own over HTTP, as docs/registering.md registers it:
    named ``prefixgate``, its URL ``serve --http``'s ``/mcp`` or a profile's ``/mcp/NAME``."""
    url = fields.get("url")
    if entry.name.lower() != "prefixgate" or not isinstance(url, str):
        return False
    path = urlsplit(url).path.rstrip("/")
    return re.fullmatch(r"/mcp(/[^/]+)?", path) is not None


def translate(entry: Entry) -> Translated:
    out = _translate_codex(entry) if entry.source.fmt == "codex" else _translate_json(entry)
    if _runs_prefixgate(out.fields):
        raise Skip(
            f"runs prefixgate serve: it is prefixgate itself, as registered in {CLIENT_NAMES[entry.source.fmt]}; "
            "imported, prefixgate would start itself over and over"
        )
    if _serves_prefixgate(entry, out.fields) and out.fields.get("enabled", True):
        # Maybe another gateway this one may front, maybe this one: a gateway serving the
        # config would then front itself, its own tools coming back to it renamed, over and over.
        entry.scope_disabled = entry.scope_disabled or (
            f"prefixgate's own entry over HTTP, as registered in {CLIENT_NAMES[entry.source.fmt]}; a gateway "
            "serving this config would front itself: set enabled = true only to front another gateway"
        )
        out.fields["enabled"] = False
        out.notes.append(("note", "enabled", f"false: {entry.scope_disabled}"))
        out = _ordered(out)
    return out
