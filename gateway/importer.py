"""``prefixgate import``: turn the MCP servers other clients already run into a prefixgate config.

Reads the configs of Claude Desktop (``claude_desktop_config.json``), Claude Code
(``.mcp.json`` and ``~/.claude.json``: user scope and every ``projects.<path>`` scope),
Cursor (``.cursor/mcp.json``, ``~/.cursor/mcp.json``), VS Code (``.vscode/mcp.json``, the
user profile's ``mcp.json``, or ``settings.json`` with ``"mcp": {"servers": ...}``) and
Codex CLI (``config.toml``, ``[mcp_servers.<name>]``) and prints one complete prefixgate
TOML config that :func:`gateway.config.parse_config` accepts.

Rules, all deterministic (same inputs, same bytes):

- Server names become ids matching ``^[A-Za-z0-9][A-Za-z0-9_-]*$``; every change is
  reported. Several files are merged in input order: an identical definition under the
  same id is merged, a different one gets ``-2``, ``-3``, ... and both are reported.
- Placeholders the source client expands from the environment become prefixgate
  ``${VAR}`` references (Claude Code ``${VAR}``/``${VAR:-default}``, Cursor and VS Code
  ``${env:VAR}`` and ``${userHome}``, VS Code ``${input:ID}`` -> ``${ID}`` upper-cased);
  ``${workspaceFolder}`` becomes the project directory. Every other ``${`` is literal text
  and is written as ``$${`` (prefixgate expands ``${VAR}``).
- Literal secrets stay as they are, with a warning on stderr (and a comment in the
  output) naming the field and the ``${VAR}`` to use instead; the value itself is never
  printed.
- An entry that cannot be translated is listed on stderr (and in the output's header)
  with the reason; a field that is dropped is reported too. Nothing is dropped silently.

Exit status: 0 success (warnings included); 2 unreadable or invalid input, no server to
import, or ``--out`` naming an existing file without ``--force``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import tempfile
import tomllib
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gateway.config import SERVER_ID

FORMATS = ("claude-desktop", "claude-code", "cursor", "vscode", "codex")
CLIENT_NAMES = {
    "claude-desktop": "Claude Desktop",
    "claude-code": "Claude Code",
    "cursor": "Cursor",
    "vscode": "VS Code",
    "codex": "Codex CLI",
}
PROG = "prefixgate import"

_VARNAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_PLACEHOLDER = re.compile(r"\$\{([^}]*)\}")
_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")

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
    "oauth": (True, "prefixgate runs no OAuth flow; send a token in headers as a ${VAR} reference"),
    "dev": (False, "VS Code development mode (watch/debug) has no prefixgate equivalent"),
    "autoApprove": (False, "tool approval belongs to the client that runs prefixgate"),
    "alwaysAllow": (False, "tool approval belongs to the client that runs prefixgate"),
    "timeout": (False, "use startup_timeout / call_timeout (seconds) instead"),
    "description": (False, "descriptive only"),
    "name": (False, "descriptive only"),
    "icon": (False, "descriptive only"),
    "gallery": (False, "descriptive only"),
    "version": (False, "descriptive only"),
}
_CODEX_DROPPED: dict[str, tuple[bool, str]] = {
    "oauth": (True, "prefixgate runs no OAuth flow (codex mcp login); send a token in headers as a ${VAR} reference"),
    "scopes": (True, "prefixgate runs no OAuth flow"),
    "oauth_resource": (True, "prefixgate runs no OAuth flow"),
    "default_tools_approval_mode": (False, "tool approval belongs to the client that runs prefixgate"),
    "tools": (False, "per-tool approval belongs to the client that runs prefixgate"),
}


class InputError(Exception):
    """Unreadable or invalid input: ``str()`` is the one line shown (exit status 2)."""


class _Skip(Exception):
    """The entry cannot be translated; the message is the reason."""


# --- reading ---------------------------------------------------------------------------


@dataclass
class Source:
    path: str
    """As the user gave it (or as found in a usual location): used in messages."""
    fmt: str
    entries: list[Entry] = field(default_factory=list)
    inputs: dict[str, dict[str, Any]] = field(default_factory=dict)
    """VS Code ``inputs`` by id."""
    project_dir: str | None = None
    """The project a project-scoped file belongs to (None for user-wide files)."""
    notes: list[str] = field(default_factory=list)
    inputs_noted: set[str] = field(default_factory=set)


@dataclass
class Entry:
    name: str
    where: str
    """Where in the file, e.g. ``mcpServers["github"]``."""
    raw: Any
    source: Source
    project_dir: str | None = None
    scope_disabled: str | None = None
    """Why the source's own scope disables it (Claude Code ``disabledMcpServers``)."""


def _key_path(*parts: str) -> str:
    out = parts[0]
    for part in parts[1:]:
        out += "[" + json.dumps(part, ensure_ascii=False) + "]"
    return out


def _strip_jsonc(text: str) -> str:
    """Blank out // and /* */ comments and trailing commas (JSONC, as VS Code writes it).

    Positions are kept (removed characters become spaces) so parse errors still point at
    the right line and column.
    """
    out = list(text)
    i, n = 0, len(text)
    in_string = False
    last_comma: int | None = None
    while i < n:
        ch = text[i]
        if in_string:
            if ch == "\\":
                i += 2
                continue
            if ch == '"':
                in_string = False
            i += 1
            continue
        if ch == '"':
            in_string = True
            last_comma = None
        elif text.startswith("//", i):
            end = text.find("\n", i)
            end = n if end < 0 else end
            for j in range(i, end):
                out[j] = " "
            i = end
            continue
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end < 0 else end + 2
            for j in range(i, end):
                if out[j] != "\n":
                    out[j] = " "
            i = end
            continue
        elif ch == ",":
            last_comma = i
        elif ch in "]}":
            if last_comma is not None:
                out[last_comma] = " "
            last_comma = None
        elif not ch.isspace():
            last_comma = None
        i += 1
    return "".join(out)


def _read_text(path: Path, shown: str) -> str:
    try:
        data = path.read_bytes()
    except IsADirectoryError:
        raise InputError(f"{shown}: is a directory with no MCP client config in it") from None
    except OSError as exc:
        raise InputError(f"{shown}: cannot read: {exc.strerror or exc}") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(f"{shown}: not valid UTF-8 (byte {exc.start})") from None


def _parse_json(text: str, shown: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        pass
    try:
        return json.loads(_strip_jsonc(text))
    except json.JSONDecodeError as exc:
        raise InputError(f"{shown}: not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}") from None


def _parse_toml(text: str, shown: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"{shown}: not valid TOML: {exc}") from None


def _detect(path: Path, text: str, shown: str) -> tuple[str, Any]:
    """The format of a file given without --from: from its name, then its content."""
    name = path.name
    parent = path.parent.name
    if path.suffix == ".toml":
        return "codex", _parse_toml(text, shown)
    try:
        data = _parse_json(text, shown)
    except InputError as json_error:
        try:
            toml = tomllib.loads(text)
        except tomllib.TOMLDecodeError:
            raise json_error from None
        if isinstance(toml.get("mcp_servers"), dict):
            return "codex", toml
        raise
    if not isinstance(data, dict):
        raise InputError(f"{shown}: expected a JSON object at the top level")
    if name == "claude_desktop_config.json":
        return "claude-desktop", data
    if parent == ".cursor":
        return "cursor", data
    if parent == ".vscode" or (isinstance(data.get("servers"), dict) and "mcpServers" not in data):
        return "vscode", data
    if isinstance(data.get("mcp"), dict) and "servers" in data["mcp"]:
        return "vscode", data
    if name in (".claude.json", ".mcp.json") or isinstance(data.get("projects"), dict):
        return "claude-code", data
    if "mcpServers" in data:
        text_all = json.dumps(data.get("mcpServers"))
        if "${env:" in text_all or "${workspaceFolder}" in text_all:
            return "cursor", data
        # Claude Code's .mcp.json vocabulary is the common denominator of mcpServers files.
        return "claude-code", data
    raise InputError(
        f"{shown}: not a known MCP client config (no mcpServers, servers or mcp_servers); "
        "pass --from to name the client"
    )


def _servers_object(data: Mapping[str, Any], key: str, shown: str, where: str) -> dict[str, Any]:
    value = data.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InputError(f"{shown}: {where}: expected an object of servers, found {_type_name(value)}")
    return value


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _project_dir(fmt: str, path: Path, env: Mapping[str, str]) -> str | None:
    """The project directory of a project-scoped file, or None for a user-wide one."""
    home = Path(env.get("HOME") or str(Path.home()))
    parent = path.parent
    if fmt == "claude-code" and path.name == ".mcp.json":
        return str(parent)
    if fmt == "cursor" and parent.name == ".cursor" and parent.parent != home:
        return str(parent.parent)
    if fmt == "vscode" and parent.name == ".vscode":
        return str(parent.parent)
    if fmt == "codex" and parent.name == ".codex" and parent.parent != home:
        codex_home = env.get("CODEX_HOME")
        if not codex_home or Path(codex_home) != parent:
            return str(parent.parent)
    return None


def read_source(path: Path, shown: str, fmt: str | None, env: Mapping[str, str]) -> Source:
    """Read one file; raise InputError (one line) when it is unreadable or invalid."""
    text = _read_text(path, shown)
    if fmt is None:
        fmt, data = _detect(path, text, shown)
    elif fmt == "codex":
        data = _parse_toml(text, shown)
    else:
        data = _parse_json(text, shown)
        if not isinstance(data, dict):
            raise InputError(f"{shown}: expected a JSON object at the top level")
    absolute = Path(os.path.abspath(path))
    source = Source(path=shown, fmt=fmt, project_dir=_project_dir(fmt, absolute, env))

    def add(servers: Mapping[str, Any], where: str, *, project: str | None, disabled: Sequence[Any] = (),
            scope: str = "") -> None:  # fmt: skip
        for name, raw in servers.items():
            entry = Entry(name, _key_path(where, name), raw, source, project)
            if name in disabled:
                entry.scope_disabled = f"listed in {scope}disabledMcpServers"
            source.entries.append(entry)

    if fmt == "codex":
        servers = _servers_object(data, "mcp_servers", shown, "mcp_servers")
        if "mcp_servers" not in data:
            source.notes.append(f"{shown}: no [mcp_servers] tables")
        add(servers, "mcp_servers", project=source.project_dir)
    elif fmt == "vscode":
        holder: Mapping[str, Any] = data
        prefix = ""
        if "servers" not in data and isinstance(data.get("mcp"), dict):
            holder, prefix = data["mcp"], "mcp."
        servers = _servers_object(holder, "servers", shown, prefix + "servers")
        if "servers" not in holder:
            source.notes.append(f'{shown}: no "servers" object')
        inputs = holder.get("inputs", [])
        if not isinstance(inputs, list):
            raise InputError(f"{shown}: {prefix}inputs: expected a list, found {_type_name(inputs)}")
        for item in inputs:
            if isinstance(item, dict) and isinstance(item.get("id"), str):
                source.inputs.setdefault(item["id"], item)
        add(servers, prefix + "servers", project=source.project_dir)
    elif fmt == "claude-code":
        servers = _servers_object(data, "mcpServers", shown, "mcpServers")
        add(servers, "mcpServers", project=source.project_dir)
        projects = data.get("projects", {})
        if not isinstance(projects, dict):
            raise InputError(f"{shown}: projects: expected an object, found {_type_name(projects)}")
        for project_path, project in projects.items():
            if not isinstance(project, dict):
                continue
            where = _key_path("projects", project_path)
            scoped = _servers_object(project, "mcpServers", shown, where + ".mcpServers")
            disabled = project.get("disabledMcpServers") or []
            if not isinstance(disabled, list):
                disabled = []
            add(scoped, where + ".mcpServers", project=project_path, disabled=disabled, scope=where + ".")
        if "mcpServers" not in data and "projects" not in data:
            source.notes.append(f"{shown}: no mcpServers object")
    else:
        servers = _servers_object(data, "mcpServers", shown, "mcpServers")
        if "mcpServers" not in data:
            source.notes.append(f"{shown}: no mcpServers object")
        add(servers, "mcpServers", project=source.project_dir)
    return source


def default_paths(client: str, env: Mapping[str, str], cwd: Path, platform: str = sys.platform) -> list[Path]:
    """The usual locations of a client's MCP config, user-wide first, then the project in ``cwd``."""
    home = Path(env.get("HOME") or str(Path.home()))
    xdg = Path(env["XDG_CONFIG_HOME"]) if env.get("XDG_CONFIG_HOME") else home / ".config"
    if platform == "darwin":
        app_config = home / "Library" / "Application Support"
    elif platform.startswith("win"):
        app_config = Path(env.get("APPDATA") or str(home / "AppData" / "Roaming"))
    else:
        app_config = xdg
    paths: list[Path]
    if client == "claude-desktop":
        paths = [app_config / "Claude" / "claude_desktop_config.json"]
    elif client == "claude-code":
        config_dir = env.get("CLAUDE_CONFIG_DIR")
        user = Path(config_dir) / ".claude.json" if config_dir else home / ".claude.json"
        paths = [user, cwd / ".mcp.json"]
    elif client == "cursor":
        paths = [home / ".cursor" / "mcp.json", cwd / ".cursor" / "mcp.json"]
    elif client == "vscode":
        paths = [
            app_config / "Code" / "User" / "mcp.json",
            app_config / "Code - Insiders" / "User" / "mcp.json",
            cwd / ".vscode" / "mcp.json",
        ]
    elif client == "codex":
        codex_home = Path(env["CODEX_HOME"]) if env.get("CODEX_HOME") else home / ".codex"
        paths = [codex_home / "config.toml", cwd / ".codex" / "config.toml"]
    else:
        raise ValueError(client)
    unique: list[Path] = []
    for p in paths:
        if p not in unique:
            unique.append(p)
    return unique


_DIRECTORY_FILES = (
    ("claude-code", ".mcp.json"),
    ("cursor", ".cursor/mcp.json"),
    ("vscode", ".vscode/mcp.json"),
    ("codex", ".codex/config.toml"),
    ("claude-desktop", "claude_desktop_config.json"),
)


# --- translation -----------------------------------------------------------------------


@dataclass
class Translated:
    fields: dict[str, Any]
    """TOML keys of the server table in output order; ``env``/``headers`` are dicts."""
    notes: list[tuple[str, str, str]] = field(default_factory=list)
    """(kind, field, text): kind ``warning`` or ``note``; field relative to the server table."""


def _env_var_name(text: str) -> str:
    name = re.sub(r"[^A-Za-z0-9]+", "_", unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode())
    name = name.strip("_").upper() or "VALUE"
    return name if not name[0].isdigit() else "_" + name


def _has_surrogate(text: str) -> bool:
    return any(0xD800 <= ord(c) <= 0xDFFF for c in text)


def _escape_literal(text: str) -> str:
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
            raise _Skip(f"{where}: expected a string, found {_type_name(value)}")
        if not isinstance(value, str):
            self.note(where, f"number {value!r} written as the string {str(value)!r}")
            value = str(value)
        if _has_surrogate(value):
            raise _Skip(f"{where}: contains text that is not valid Unicode (a lone surrogate)")
        pieces: list[tuple[bool, str]] = []
        pos = 0
        for match in _PLACEHOLDER.finditer(value):
            if match.start() > pos:
                pieces.append((False, value[pos : match.start()]))
            pieces.append(self._placeholder(match.group(1), match.group(0), where))
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
                raise _Skip(
                    f"{where}: a '$' right before a variable reference cannot be written in a prefixgate config"
                )
            out.append(_escape_literal(text))
        return "".join(out)

    def _placeholder(self, inner: str, whole: str, where: str) -> tuple[bool, str]:
        fmt = self.fmt
        client = CLIENT_NAMES[fmt]
        if fmt == "claude-code":
            if _VARNAME.fullmatch(inner):
                return True, inner
            m = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*):-(.*)", inner, re.DOTALL)
            if m:
                self.note(
                    where,
                    f"${{{m[1]}:-...}} has a default prefixgate cannot express; it became ${{{m[1]}}}, "
                    f"so {m[1]} must be set in the environment",
                    "warning",
                )
                return True, m[1]
        if fmt in ("cursor", "vscode"):
            if inner.startswith("env:") and _VARNAME.fullmatch(inner[4:]):
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
        if fmt in ("claude-desktop", "codex") and _VARNAME.fullmatch(inner):
            self.note(
                where,
                f"{whole} is kept as literal text, written $${{{inner}}} ({client} does not expand it); "
                f"write ${{{inner}}} instead to read the environment variable",
            )
        else:
            self.note(where, f"{whole} has no prefixgate equivalent; kept as literal text", "warning")
        return False, whole

    def _input(self, input_id: str, where: str) -> str:
        var = _env_var_name(input_id)
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
                    extra.append(json.dumps(desc, ensure_ascii=False))
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
            raise _Skip(f"{where}: expected a list, found {_type_name(value)}")
        return [self.string(v, f"{where}[{i}]") for i, v in enumerate(value)]

    def str_table(self, value: Any, where: str, *, drop_null: bool = False) -> dict[str, str]:
        if not isinstance(value, dict):
            raise _Skip(f"{where}: expected an object, found {_type_name(value)}")
        out: dict[str, str] = {}
        for key, v in value.items():
            if _has_surrogate(key):
                raise _Skip(f"{where}: a key is not valid Unicode (a lone surrogate)")
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
            raise _Skip(f"{where}: is empty")
        return text

    def check_url(self, url: str, where: str) -> None:
        if re.match(r"(?i)^https?://", url) or url.startswith("${"):
            return
        scheme = url.split(":", 1)[0] if ":" in url else url
        raise _Skip(f"{where}: {scheme!r} URLs are not supported (prefixgate connects over http:// and https://)")

    def relative_cwd(self, fields: dict[str, Any]) -> None:
        """A project-scoped stdio server with relative paths runs in its project directory."""
        if "cwd" in fields:
            return
        values = [fields["command"], *fields.get("args", [])]
        relative = [v for v in values if v in (".", "..") or v.startswith(("./", "../", ".\\", "..\\"))]
        if not relative:
            return
        if self.project_dir:
            fields["cwd"] = _escape_literal(self.project_dir)
            self.note(
                "cwd",
                f"set to the project directory: the client starts this server there and it uses relative paths ({relative[0]})",
            )
        else:
            self.note(
                "args",
                f"uses a relative path ({relative[0]}) but prefixgate starts it in its own working directory; set cwd",
                "warning",
            )


def _translate_json(entry: Entry) -> Translated:
    raw = entry.raw
    if not isinstance(raw, dict):
        raise _Skip(f"expected an object, found {_type_name(raw)}")
    t = _Translator(entry)
    fields = t.out.fields
    client = CLIENT_NAMES[entry.source.fmt]
    type_key = next((k for k in ("type", "transport", "transportType") if k in raw), None)
    url_key = next((k for k in ("url", "serverUrl") if k in raw), None)
    has_command = "command" in raw
    if type_key is not None:
        declared = raw[type_key]
        if not isinstance(declared, str):
            raise _Skip(f"{type_key}: expected a string, found {_type_name(declared)}")
        kind = _TYPES.get(declared.lower())
        if kind is None:
            raise _Skip(f"{type_key} {declared!r} is not a transport prefixgate speaks (stdio, http, sse)")
    elif has_command and url_key:
        raise _Skip(f"has both command and {url_key} and no type saying which one {client} uses")
    elif has_command:
        kind = "stdio"
    elif url_key:
        url_value = raw[url_key]
        path = url_value.split("?", 1)[0].rstrip("/") if isinstance(url_value, str) else ""
        kind = "sse" if path.endswith("/sse") else "http"
        t.note(
            "transport",
            f"no type given; {kind!r} inferred from the URL" + (" (its path ends in /sse)" if kind == "sse" else ""),
        )
    else:
        raise _Skip("has neither command (stdio) nor url (http/sse)")

    handled = {"type", "transport", "transportType", "disabled", "enabled"}
    if kind == "stdio":
        if not has_command:
            raise _Skip(f"{type_key} is {raw[type_key]!r} but there is no command")
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
            raise _Skip(f"{type_key} is {raw[type_key]!r} but there is no url")
        fields["url"] = t.nonempty(raw[url_key], url_key)
        t.check_url(fields["url"], url_key)
        fields["transport"] = kind
        if raw.get("headers") is not None:
            headers = t.str_table(raw["headers"], "headers")
            if headers:
                fields["headers"] = headers
        handled |= {url_key, "headers"}
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
            raise _Skip(f"disabled: expected true or false, found {_type_name(raw['disabled'])}")
        enabled = not raw["disabled"]
    if "enabled" in raw:
        if not isinstance(raw["enabled"], bool):
            raise _Skip(f"enabled: expected true or false, found {_type_name(raw['enabled'])}")
        enabled = enabled and raw["enabled"]
    if entry.scope_disabled:
        enabled = False
        t.note("enabled", f"false: {entry.scope_disabled}")
    if not enabled:
        fields["enabled"] = False

    for key in raw:
        if key in handled:
            continue
        loud, reason = _DROPPED_FIELDS.get(key, (False, f"unknown {client} field"))
        t.note(key, f"not imported: {reason}", "warning" if loud else "note")
    return _ordered(t.out)


def _translate_codex(entry: Entry) -> Translated:
    raw = entry.raw
    if not isinstance(raw, dict):
        raise _Skip(f"expected a table, found {_type_name(raw)}")
    t = _Translator(entry)
    fields = t.out.fields
    has_command, has_url = "command" in raw, "url" in raw
    if has_command and has_url:
        raise _Skip("has both command and url")
    if not has_command and not has_url:
        raise _Skip("has neither command (stdio) nor url (streamable HTTP)")
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
            raise _Skip(f"env_vars: expected a list, found {_type_name(env_vars)}")
        for i, item in enumerate(env_vars):
            name = item.get("name") if isinstance(item, dict) else item
            if not isinstance(name, str) or not _VARNAME.fullmatch(name):
                raise _Skip(f"env_vars[{i}]: expected an environment variable name")
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
        for key in ("http_headers", "env_http_headers", "bearer_token_env_var", "bearer_token"):
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
            raise _Skip(f"env_http_headers: expected a table, found {_type_name(env_headers)}")
        for name, var in env_headers.items():
            if not isinstance(var, str) or not _VARNAME.fullmatch(var):
                raise _Skip(f"env_http_headers.{name}: expected an environment variable name")
            put(name, "${" + var + "}")
            t.note(
                f"headers.{name}",
                f"from env_http_headers: ${{{var}}}; Codex omits the header when {var} is unset, prefixgate requires it to be set",
            )
        if "bearer_token_env_var" in raw:
            var = raw["bearer_token_env_var"]
            if not isinstance(var, str) or not _VARNAME.fullmatch(var):
                raise _Skip("bearer_token_env_var: expected an environment variable name")
            put("Authorization", "Bearer ${" + var + "}")
        if "bearer_token" in raw:
            put("Authorization", "Bearer " + t.nonempty(raw["bearer_token"], "bearer_token"))
        if headers:
            fields["headers"] = headers
        handled |= {"url", "http_headers", "env_http_headers", "bearer_token_env_var", "bearer_token"}
        for key in ("args", "env", "env_vars", "cwd"):
            if key in raw:
                t.note(key, "ignored: it applies to stdio servers only", "warning")
                handled.add(key)

    for key in ("enabled", "required"):
        if key in raw and not isinstance(raw[key], bool):
            raise _Skip(f"{key}: expected true or false, found {_type_name(raw[key])}")
    if raw.get("enabled") is False:
        fields["enabled"] = False
    if raw.get("required") is True:
        fields["required"] = True
    for key, target, scale in (
        ("startup_timeout_sec", "startup_timeout", 1),
        ("startup_timeout_ms", "startup_timeout", 1000),
        ("tool_timeout_sec", "call_timeout", 1),
    ):
        if key not in raw:
            continue
        value = raw[key]
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
            t.note(key, "not imported: expected a positive number", "warning")
            continue
        if target in fields:
            t.note(key, f"not imported: {target} is already set from another key", "warning")
            continue
        fields[target] = value if scale == 1 else value / scale
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


_ORDER = ("command", "args", "cwd", "url", "transport", "enabled", "required",
          "startup_timeout", "call_timeout", "include", "exclude", "env", "headers")  # fmt: skip


def _ordered(out: Translated) -> Translated:
    out.fields = {k: out.fields[k] for k in _ORDER if k in out.fields}
    return out


def translate(entry: Entry) -> Translated:
    if entry.source.fmt == "codex":
        return _translate_codex(entry)
    return _translate_json(entry)


# --- ids -------------------------------------------------------------------------------


def sanitize_id(name: str) -> str:
    """A valid server id for ``name``: unchanged when already valid, else deterministic."""
    if SERVER_ID.fullmatch(name):
        return name
    text = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode()
    text = re.sub(r"[^A-Za-z0-9_-]+", "-", text)
    text = re.sub(r"-{2,}", "-", text).lstrip("-_").rstrip("-")
    return text or "server"


# --- secrets ---------------------------------------------------------------------------

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
    return _env_var_name(server_id)


def find_secrets(server_id: str, fields: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """(field, variable, what to write) for every literal secret in a server's fields.

    "What to write" is a quoted TOML value (``"${GITHUB_TOKEN}"``) or, for a value that
    only partly changes (a URL), a description. The secret itself never appears.
    """
    found: list[tuple[str, str, str]] = []
    for key, value in fields.get("env", {}).items():
        if _is_literal_secret(key, value):
            var = key if _VARNAME.fullmatch(key) else _env_var_name(key)
            found.append((f"env.{key}", var, '"${' + var + '}"'))
    for key, value in fields.get("headers", {}).items():
        if _is_literal_secret(key, value):
            if key.lower() in ("authorization", "proxy-authorization"):
                var = f"{_id_var(server_id)}_TOKEN"
            else:
                var = f"{_id_var(server_id)}_{_env_var_name(re.sub(r'(?i)^x-', '', key))}"
            scheme = _SCHEME.match(value)
            found.append((f"headers.{key}", var, '"' + (scheme.group(0) if scheme else "") + "${" + var + '}"'))
    args = fields.get("args", [])
    for i, arg in enumerate(args):
        flag = re.match(r"^(--?[A-Za-z][A-Za-z0-9_-]*)=(.*)$", arg, re.DOTALL)
        previous = args[i - 1] if i else ""
        userinfo = re.match(r"^([a-z][a-z0-9+.-]*://[^/:@\s]*:)([^@/\s]+)(@.*)$", arg, re.DOTALL | re.IGNORECASE)
        if flag and _is_literal_secret(flag.group(1).lstrip("-"), flag.group(2)):
            var = f"{_id_var(server_id)}_{_env_var_name(flag.group(1))}"
            found.append((f"args[{i}]", var, f'"{flag.group(1)}=${{{var}}}"'))
        elif (
            re.match(r"^--?[A-Za-z]", previous)
            and "=" not in previous
            and _is_literal_secret(previous.lstrip("-"), arg)
            and not arg.startswith("-")
        ):
            var = f"{_id_var(server_id)}_{_env_var_name(previous)}"
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
        query = url.split("?", 1)[1] if "?" in url else ""
        for part in query.split("&"):
            if "=" not in part:
                continue
            name, value = part.split("=", 1)
            if value and _is_literal_secret(name, value) and _SECRET_NAME.search(name):
                var = f"{_id_var(server_id)}_{_env_var_name(name)}"
                found.append(("url", var, f"the URL with {name}=${{{var}}}"))
    return found


# --- TOML ------------------------------------------------------------------------------


def toml_string(text: str) -> str:
    """A TOML basic string: \\\\ \\" \\n \\t escaped, other control characters as \\uXXXX."""
    out = ['"']
    for ch in text:
        code = ord(ch)
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\u{code:04X}")
        elif 0xD800 <= code <= 0xDFFF:
            raise ValueError("lone surrogate")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def toml_key(key: str) -> str:
    return key if _BARE_KEY.fullmatch(key) else toml_string(key)


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError("not a finite number")
        return repr(value)
    if isinstance(value, str):
        return toml_string(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    raise TypeError(type(value).__name__)


def _comment(text: str) -> str:
    """One comment line's text: control characters and surrogates escaped."""
    out = []
    for ch in text:
        code = ord(ch)
        if code < 0x20 or code == 0x7F or 0xD800 <= code <= 0xDFFF:
            out.append(f"\\u{code:04X}")
        else:
            out.append(ch)
    return "".join(out)


# --- the whole import ------------------------------------------------------------------


@dataclass
class Placed:
    id: str
    base: str
    fields: dict[str, Any]
    origins: list[str]
    """``file: where`` of every entry merged into this server."""


@dataclass
class Result:
    text: str
    messages: list[str]
    servers: int
    enabled: int
    sources: list[Source]


def _origin(entry: Entry) -> str:
    return f"{entry.source.path}: {entry.where}"


def import_sources(sources: Sequence[Source]) -> Result:
    """Translate, name, merge and render; never raises for a bad entry (it is reported)."""
    messages: list[str] = []

    def say(kind: str, text: str) -> None:
        messages.append(f"{PROG}: {kind}: {text}")

    placed: dict[str, Placed] = {}
    families: dict[str, list[str]] = {}
    skipped: list[str] = []
    secret_comments: dict[tuple[str, str], str] = {}
    total_entries = 0
    renamed = merged = suffixed = secrets = 0

    for source in sources:
        for note in source.notes:
            say("note", note)
        for entry in source.entries:
            total_entries += 1
            label = json.dumps(entry.name, ensure_ascii=False)
            try:
                translated = translate(entry)
            except _Skip as exc:
                line = f"{label} ({_origin(entry)}): {exc}"
                skipped.append(line)
                say("skipped", line)
                continue
            base = sanitize_id(entry.name)
            family = families.setdefault(base, [])
            twin = next((sid for sid in family if placed[sid].fields == translated.fields), None)
            if twin is not None:
                placed[twin].origins.append(_origin(entry))
                merged += 1
                say(
                    "merged",
                    f"{label} ({_origin(entry)}) is identical to servers.{twin} ({placed[twin].origins[0]}); imported once",
                )
                continue
            server_id = base
            n = 1
            while server_id in placed:
                n += 1
                server_id = f"{base}-{n}"
            earlier = [f"servers.{sid} ({placed[sid].origins[0]})" for sid in family]
            family.append(server_id)
            placed[server_id] = Placed(server_id, base, translated.fields, [_origin(entry)])
            if base != entry.name:
                renamed += 1
                say(
                    "renamed",
                    f"{label} ({_origin(entry)}) -> servers.{base}: ids use letters, digits, '_' and '-' "
                    "and start with a letter or digit",
                )
            if server_id != base:
                suffixed += 1
                other = ", ".join(earlier) if earlier else f"servers.{base}"
                say(
                    "duplicate",
                    f"{label} ({_origin(entry)}) differs from {other}; imported as servers.{server_id}",
                )
            for kind, where, text in translated.notes:
                say(kind, f"servers.{server_id}{'.' + where if where else ''}: {text}")
            for where, var, write in find_secrets(server_id, translated.fields):
                secrets += 1
                say(
                    "warning",
                    f"servers.{server_id}.{where} holds a literal secret; set {var} in your environment "
                    f"(export {var}=...) and write {write}",
                )
                secret_comments[(server_id, where)] = f"literal secret: set {var} in the environment and write {write}"

    enabled = sum(1 for p in placed.values() if p.fields.get("enabled", True))
    text = _render(sources, placed, skipped, secret_comments)
    if placed and not enabled:
        say(
            "warning",
            "every imported server is disabled; prefixgate needs at least one enabled server "
            "(set enabled = true on one before using this config)",
        )
    summary = (
        f"{len(placed)} server{'s' if len(placed) != 1 else ''} ({enabled} enabled) from "
        f"{len(sources)} file{'s' if len(sources) != 1 else ''}; {len(skipped)} skipped, {renamed} renamed, "
        f"{merged} merged, {suffixed} duplicates renamed, {secrets} literal secret{'s' if secrets != 1 else ''}"
    )
    messages.append(f"{PROG}: {summary}")
    return Result(text=text, messages=messages, servers=len(placed), enabled=enabled, sources=list(sources))


_GATEWAY_DEFAULTS = """\
[gateway]
# state_dir = "~/.local/state/prefixgate"   # default: $XDG_STATE_HOME/prefixgate
# discovery_deadline = 60                   # seconds to wait for every server
# separator = "__"                          # qualified name: <prefix>__<tool>

[client]
# profile = "openai"                        # openai, deepseek, anthropic or mcp
# max_functions = 128                       # overrides the profile's function limit
# context_window = 200000                   # unset: no token-budget check
# reserve_tokens = 16384
# keep_recent_tokens = 20000
# system_prompt_tokens = 0
# declarations = "auto"                     # auto, fixed or on-demand
# defer = []                                # globs on qualified names
"""


def _render(
    sources: Sequence[Source],
    placed: Mapping[str, Placed],
    skipped: Sequence[str],
    secret_comments: Mapping[tuple[str, str], str],
) -> str:
    lines = ["# prefixgate configuration written by `prefixgate import` from:"]
    for source in sources:
        lines.append(_comment(f"#   {source.path} ({CLIENT_NAMES[source.fmt]})"))
    lines.append("# Check it with: prefixgate catalog --config <this file>")
    lines.append("# Every option is explained in config.example.toml.")
    if skipped:
        lines.append("#")
        lines.append("# Not imported (see the reasons):")
        lines += [_comment(f"#   {line}") for line in skipped]
    lines.append("")
    lines.append(_GATEWAY_DEFAULTS)
    for server_id, server in placed.items():
        lines.append(f"[servers.{toml_key(server_id)}]")
        for origin in server.origins:
            lines.append(_comment(f"# from {origin}"))
        tables: list[tuple[str, dict[str, str]]] = []
        for key, value in server.fields.items():
            if isinstance(value, dict):
                tables.append((key, value))
                continue
            for (sid, where), comment in secret_comments.items():
                if sid == server_id and (where == key or where.startswith(key + "[")):
                    lines.append(_comment(f"# {where}: {comment}"))
            lines.append(f"{toml_key(key)} = {toml_value(value)}")
        for table, values in tables:
            lines.append("")
            lines.append(f"[servers.{toml_key(server_id)}.{table}]")
            for key, value in values.items():
                hint = secret_comments.get((server_id, f"{table}.{key}"))
                if hint:
                    lines.append(_comment(f"# {hint}"))
                lines.append(f"{toml_key(key)} = {toml_value(value)}")
        lines.append("")
    return "\n".join(lines).rstrip("\n") + "\n"


def collect_sources(
    paths: Sequence[str],
    client: str | None,
    *,
    env: Mapping[str, str],
    cwd: Path,
    platform: str = sys.platform,
) -> tuple[list[Source], list[str]]:
    """Read every input file (or the client's usual locations); raise InputError."""
    notes: list[str] = []
    files: list[tuple[Path, str, str | None]] = []
    if not paths:
        if client is None:
            raise InputError("give one or more PATHs, or --from CLIENT to read its usual locations")
        candidates = default_paths(client, env, cwd, platform)
        for candidate in candidates:
            if candidate.is_file():
                files.append((candidate, str(candidate), client))
                notes.append(f"{PROG}: note: reading {candidate} ({CLIENT_NAMES[client]})")
        if not files:
            raise InputError(
                f"no {CLIENT_NAMES[client]} config found (looked in: {', '.join(str(c) for c in candidates)})"
            )
    for given in paths:
        path = Path(given)
        if path.is_dir():
            found = [
                (path / rel, str(path / rel), fmt)
                for fmt, rel in _DIRECTORY_FILES
                if (client is None or client == fmt) and (path / rel).is_file()
            ]
            if not found:
                raise InputError(f"{given}: a directory with no MCP client config in it")
            files += found
        else:
            files.append((path, given, client))
    sources = [read_source(path, shown, fmt, env) for path, shown, fmt in files]
    return sources, notes


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``prefixgate import`` (dests: paths, source, out, force)."""
    parser.add_argument(
        "paths",
        nargs="*",
        metavar="PATH",
        help="client config files (or project directories) to import, merged in order; "
        "the format is detected from the name and content unless --from is given",
    )
    parser.add_argument(
        "--from",
        dest="source",
        choices=FORMATS,
        metavar="CLIENT",
        help="the client that wrote the files: " + ", ".join(FORMATS) + "; without PATH, read its usual locations",
    )
    parser.add_argument("--out", metavar="FILE", help="write the config to FILE (mode 0600) instead of stdout")
    parser.add_argument("--force", action="store_true", help="let --out overwrite an existing file")


def _write_out(path: str, text: str, force: bool) -> None:
    data = text.encode("utf-8")
    if not force:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            raise InputError(f"{path} already exists; pass --force to overwrite it") from None
        except OSError as exc:
            raise InputError(f"{path}: cannot write: {exc.strerror or exc}") from None
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        return
    directory = os.path.dirname(os.path.abspath(path))
    try:
        fd, tmp = tempfile.mkstemp(prefix=".prefixgate-import-", dir=directory)
    except OSError as exc:
        raise InputError(f"{path}: cannot write: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.replace(tmp, path)
    except OSError as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise InputError(f"{path}: cannot write: {exc.strerror or exc}") from None


def run(args: argparse.Namespace, *, env: Mapping[str, str] | None = None, cwd: Path | None = None) -> int:
    """Run ``prefixgate import``: 0 success, 2 bad input or a refused --out."""
    env = os.environ if env is None else env
    cwd = Path.cwd() if cwd is None else cwd
    to_file = bool(args.out) and args.out != "-"
    try:
        if to_file and not args.force and os.path.lexists(args.out):
            raise InputError(f"{args.out} already exists; pass --force to overwrite it")
        sources, notes = collect_sources(args.paths, args.source, env=env, cwd=cwd)
        result = import_sources(sources)
        if result.servers == 0:
            for line in [*notes, *result.messages[:-1]]:
                print(line, file=sys.stderr)
            raise InputError(
                "no server could be imported from " + ", ".join(s.path for s in sources)
                if any(s.entries for s in sources)
                else "no MCP servers found in " + ", ".join(s.path for s in sources)
            )
        if to_file:
            _write_out(args.out, result.text, args.force)
        else:
            sys.stdout.flush()
            buffer = getattr(sys.stdout, "buffer", None)
            if buffer is not None:
                buffer.write(result.text.encode("utf-8"))
                buffer.flush()
            else:
                sys.stdout.write(result.text)
        for line in [*notes, *result.messages]:
            print(line, file=sys.stderr)
        if to_file:
            print(f"{PROG}: wrote {args.out}", file=sys.stderr)
        return 0
    except InputError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Print a prefixgate config holding the MCP servers configured in other clients.",
    )
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
