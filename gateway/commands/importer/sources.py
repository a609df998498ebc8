"""Reading the MCP client configs an import starts from: find them, detect their format, list their entries.

Each client stores its servers in its own place and shape (JSON with comments, JSON
nested by project, TOML); this module turns every one into :class:`Source` entries so
translation never has to care where an entry came from.
"""

from __future__ import annotations

import json
import os
import sys
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from catalog.text import escape
from gateway.config import home_directory

FORMATS = ("claude-desktop", "claude-code", "cursor", "vscode", "codex", "gemini")
CLIENT_NAMES = {
    "claude-desktop": "Claude Desktop",
    "claude-code": "Claude Code",
    "cursor": "Cursor",
    "vscode": "VS Code",
    "codex": "Codex CLI",
    "gemini": "Gemini CLI",
}
PROG = "prefixgate import"


class InputError(Exception):
    """Unreadable or invalid input: ``str()`` is the one line shown (exit status 2)."""


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
    input_vars: dict[str, str] = field(default_factory=dict)
    """The variable each VS Code input became (``translate``): distinct inputs, distinct variables."""


@dataclass
class Entry:
    name: str
    where: str
    """Where in the file, e.g. ``mcpServers["github"]``."""
    raw: Any
    source: Source
    project_dir: str | None = None
    scope_disabled: str | None = None
    """Why the source's own scope disables it (Claude Code ``disabledMcpServers``, a project
    server Claude Code has not approved: ``NOT_APPROVED``)."""


def quoted(text: str) -> str:
    """A name or key from a file as a message shows it: a JSON string whose every character
    that is not printable is escaped (``json.dumps`` leaves C1 controls raw, U+009B a
    terminal's CSI among them, as it does U+2028 and the bidi overrides)."""
    return escape(json.dumps(text, ensure_ascii=False))


def _key_path(*parts: str) -> str:
    out = parts[0]
    for part in parts[1:]:
        out += "[" + quoted(part) + "]"
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
    if parent == ".gemini":
        return "gemini", data
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
        raise InputError(f"{shown}: {where}: expected an object of servers, found {type_name(value)}")
    return value


def type_name(value: Any) -> str:
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


def _home(env: Mapping[str, str]) -> Path | None:
    """The user's home: ``env``'s ``$HOME``, else ``home_directory`` (None where there is none)."""
    return Path(env["HOME"]) if env.get("HOME") else home_directory()


def _codex_home(env: Mapping[str, str]) -> Path | None:
    """Codex's own directory (its user-wide ``config.toml``): ``$CODEX_HOME``, else ``~/.codex``."""
    if env.get("CODEX_HOME"):
        return Path(env["CODEX_HOME"])
    home = _home(env)
    return home / ".codex" if home is not None else None


def _gemini_home(env: Mapping[str, str]) -> Path | None:
    """The directory Gemini CLI keeps its user-wide ``.gemini`` in: ``$GEMINI_CLI_HOME``, else the home."""
    return Path(env["GEMINI_CLI_HOME"]) if env.get("GEMINI_CLI_HOME") else _home(env)


def _project_dir(fmt: str, path: Path, env: Mapping[str, str]) -> str | None:
    """The project directory of a project-scoped file, or None for a user-wide one."""
    home = _home(env)
    parent = path.parent
    if fmt == "claude-code" and path.name == ".mcp.json":
        return str(parent)
    if fmt == "cursor" and parent.name == ".cursor" and parent.parent != home:
        return str(parent.parent)
    if fmt == "gemini" and parent.name == ".gemini" and parent.parent not in (home, _gemini_home(env)):
        return str(parent.parent)
    if fmt == "vscode" and parent.name == ".vscode":
        return str(parent.parent)
    if fmt == "codex" and parent.name == ".codex" and parent.parent != home:
        codex_home = env.get("CODEX_HOME")
        if not codex_home or Path(codex_home) != parent:
            return str(parent.parent)
    return None


@dataclass
class ProjectChoices:
    """What the user told Claude Code about the servers of one project's ``.mcp.json``."""

    rejected: dict[str, str] = field(default_factory=dict)
    """Each rejected server, with where it is rejected."""
    approved: set[str] = field(default_factory=set)
    approve_all: bool = False
    notes: list[str] = field(default_factory=list)
    """Settings files that could not be read."""

    def reason_disabled(self, name: str) -> str | None:
        """Why an import must not enable ``name``, or None when Claude Code would run it."""
        if name in self.rejected:
            return f"Claude Code rejected this project server ({self.rejected[name]})"
        if self.approve_all or name in self.approved:
            return None
        return NOT_APPROVED


NOT_APPROVED = (
    "Claude Code has not approved this project server (enabledMcpjsonServers, enableAllProjectMcpServers); "
    "review its command, then set enabled = true, or import with --approve-project-servers"
)


SANDBOXED = (
    "VS Code runs this server sandboxed (sandboxEnabled: its file system and network access limited by its "
    "sandbox rules); prefixgate runs it without a sandbox: review it, then set enabled = true"
)


NOT_TRUSTED = (
    "Codex reads a project's .codex/config.toml only once the project is trusted (trust_level = \"trusted\" "
    "under its [projects] table in ~/.codex/config.toml); review its command, then set enabled = true, "
    "or import with --approve-project-servers"
)


def _codex_trusted(source: Source, env: Mapping[str, str]) -> bool:
    """Whether Codex trusts the project of ``source`` (a project's ``.codex/config.toml``): a
    cloned repository can name any command there, so Codex loads the file only for a project
    its user's config marks ``trust_level = "trusted"``, the directory itself or the root of
    its git repository (the one Codex asks about)."""
    codex_home = _codex_home(env)
    if codex_home is None or source.project_dir is None:
        return False
    user = codex_home / "config.toml"
    if not user.is_file():
        return False
    try:
        projects = _parse_toml(_read_text(user, str(user)), str(user)).get("projects")
    except InputError as exc:
        source.notes.append(f"{exc}; the projects Codex trusts are not known")
        return False
    project = Path(os.path.realpath(source.project_dir))
    root = next((p for p in (project, *project.parents) if (p / ".git").exists()), project)
    for key, value in projects.items() if isinstance(projects, dict) else ():
        if os.path.realpath(key) in (str(project), str(root)) and isinstance(value, dict):
            if value.get("trust_level") == "trusted":
                return True
    return False


def _project_choices(project_dir: str, env: Mapping[str, str]) -> ProjectChoices:
    """The user's choices in Claude Code about the servers of ``project_dir``'s ``.mcp.json``.

    Claude Code asks before it runs a server a project's ``.mcp.json`` brings (a cloned repository
    can name any command). It keeps an approval as ``enabledMcpjsonServers`` (or every server's,
    ``enableAllProjectMcpServers``) and a refusal as ``disabledMcpjsonServers``, which wins, in any
    settings file: ``~/.claude.json``'s ``projects.<dir>``, ``~/.claude/settings.json``, the
    project's ``.claude/settings.json`` and ``.claude/settings.local.json``. An import must not
    start what the user refused there, nor what nobody approved yet."""
    home = _home(env)
    config_dir = Path(env["CLAUDE_CONFIG_DIR"]) if env.get("CLAUDE_CONFIG_DIR") else None
    project = Path(project_dir)
    files = [project / ".claude" / "settings.json", project / ".claude" / "settings.local.json"]
    if config_dir is not None:
        files[:0] = [config_dir / ".claude.json", config_dir / "settings.json"]
    elif home is not None:  # (no home: only the project's own choices are known)
        files[:0] = [home / ".claude.json", home / ".claude" / "settings.json"]
    choices = ProjectChoices()
    for file in files:
        if not file.is_file():
            continue
        try:
            data = _parse_json(_read_text(file, str(file)), str(file))
        except InputError as exc:
            choices.notes.append(f"{exc}; its choices about project servers are not applied")
            continue
        if not isinstance(data, dict):
            continue
        scopes: list[tuple[str, Any]] = [("", data)]
        if file.name == ".claude.json" and isinstance(data.get("projects"), dict):
            real = os.path.realpath(project_dir)
            scopes = [
                (_key_path("projects", key) + ".", value)
                for key, value in data["projects"].items()
                if os.path.realpath(key) == real
            ]
        for prefix, scope in scopes:
            if not isinstance(scope, dict):
                continue
            if scope.get("enableAllProjectMcpServers") is True:
                choices.approve_all = True
            names = scope.get("enabledMcpjsonServers")
            choices.approved.update(n for n in (names if isinstance(names, list) else ()) if isinstance(n, str))
            names = scope.get("disabledMcpjsonServers")
            for name in names if isinstance(names, list) else ():
                if isinstance(name, str):
                    choices.rejected.setdefault(name, f"{file}: {prefix}disabledMcpjsonServers")
    return choices


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
        if "mcp_servers" not in data and isinstance(data.get("servers"), dict):
            raise InputError(
                f"{shown}: is a prefixgate config ([servers] tables), not a client's: prefixgate reads it "
                "as it is (check it with prefixgate catalog --config FILE)"
            )
        if "mcp_servers" not in data:
            source.notes.append(f"{shown}: no [mcp_servers] tables")
        add(servers, "mcp_servers", project=source.project_dir)
        if source.project_dir is not None and servers and not _codex_trusted(source, env):
            for entry in source.entries:
                entry.scope_disabled = NOT_TRUSTED
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
            raise InputError(f"{shown}: {prefix}inputs: expected a list, found {type_name(inputs)}")
        for item in inputs:
            if isinstance(item, dict) and isinstance(item.get("id"), str):
                source.inputs.setdefault(item["id"], item)
        add(servers, prefix + "servers", project=source.project_dir)
        for entry in source.entries:
            if isinstance(entry.raw, dict) and entry.raw.get("sandboxEnabled") is True and "command" in entry.raw:
                entry.scope_disabled = SANDBOXED
    elif fmt == "claude-code":
        servers = _servers_object(data, "mcpServers", shown, "mcpServers")
        add(servers, "mcpServers", project=source.project_dir)
        if source.project_dir is not None and servers:
            choices = _project_choices(source.project_dir, env)
            source.notes += choices.notes
            for entry in source.entries:
                entry.scope_disabled = choices.reason_disabled(entry.name)
        projects = data.get("projects", {})
        if not isinstance(projects, dict):
            raise InputError(f"{shown}: projects: expected an object, found {type_name(projects)}")
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
        if fmt == "gemini":
            _gemini_allowed(data, source, env)
            if source.project_dir is not None and servers and not _gemini_trusted(source, env):
                for entry in source.entries:
                    entry.scope_disabled = entry.scope_disabled or GEMINI_NOT_TRUSTED
    return source


GEMINI_NOT_TRUSTED = (
    "Gemini CLI reads a project's .gemini/settings.json only in a trusted folder (trustedFolders.json beside "
    "the user's settings.json); review its command, then set enabled = true, or import with "
    "--approve-project-servers"
)


def _gemini_trusted(source: Source, env: Mapping[str, str]) -> bool:
    """Whether Gemini CLI trusts the folder of ``source`` (a project's ``.gemini/settings.json``):
    with folder trust on (its default, unless the user's ``security.folderTrust.enabled`` is
    false) it ignores a workspace's settings, servers included, unless ``trustedFolders.json``
    trusts the folder (the longest rule that holds it decides: ``TRUST_FOLDER``, ``TRUST_PARENT``
    for the rule's parent, ``DO_NOT_TRUST``) or ``$GEMINI_CLI_TRUST_WORKSPACE`` is ``true``."""
    if env.get("GEMINI_CLI_TRUST_WORKSPACE") in ("true", "false"):
        return env["GEMINI_CLI_TRUST_WORKSPACE"] == "true"
    home = _gemini_home(env)
    if home is None or source.project_dir is None:
        return False
    settings = home / ".gemini" / "settings.json"
    folders = Path(env.get("GEMINI_CLI_TRUSTED_FOLDERS_PATH") or home / ".gemini" / "trustedFolders.json")
    try:
        user = _parse_json(_read_text(settings, str(settings)), str(settings)) if settings.is_file() else {}
        security = user.get("security") if isinstance(user, dict) else None
        folder_trust = security.get("folderTrust") if isinstance(security, dict) else None
        if isinstance(folder_trust, dict) and folder_trust.get("enabled") is False:
            return True
        rules = _parse_json(_read_text(folders, str(folders)), str(folders)) if folders.is_file() else {}
    except InputError as exc:
        source.notes.append(f"{exc}; the folders Gemini CLI trusts are not known")
        return False
    project = os.path.realpath(source.project_dir)
    longest, verdict = -1, False
    for rule, level in rules.items() if isinstance(rules, dict) else ():
        if level not in ("TRUST_FOLDER", "TRUST_PARENT", "DO_NOT_TRUST"):
            continue
        holder = os.path.realpath(os.path.dirname(rule) if level == "TRUST_PARENT" else rule)
        if (project == holder or project.startswith(holder.rstrip(os.sep) + os.sep)) and len(rule) > longest:
            longest, verdict = len(rule), level != "DO_NOT_TRUST"
    return verdict


def _gemini_id(name: Any) -> str | None:
    """A server's name as Gemini CLI compares it (``normalizeServerId``): lower-cased, trimmed."""
    return name.lower().strip() if isinstance(name, str) else None


def _gemini_allowed(data: Mapping[str, Any], source: Source, env: Mapping[str, str]) -> None:
    """Gemini CLI connects only to the servers ``mcp.allowed`` lists (when it is set), never to
    those ``mcp.excluded`` lists, nor to those ``gemini mcp disable`` turned off (``{"name":
    {"enabled": false}}`` in ``mcp-server-enablement.json`` beside the user's settings.json); it
    compares names lower-cased and trimmed. The others are imported disabled, saying why."""
    mcp = data.get("mcp")
    allowed, excluded = (mcp.get("allowed"), mcp.get("excluded")) if isinstance(mcp, dict) else (None, None)
    allowed_ids = {_gemini_id(n) for n in allowed} if isinstance(allowed, list) else None
    excluded_ids = {_gemini_id(n) for n in excluded} if isinstance(excluded, list) else set()
    off, where = _gemini_disabled(source, env) if source.entries else ({}, "")
    for entry in source.entries:
        name = _gemini_id(entry.name)
        if allowed_ids is not None and name not in allowed_ids:
            entry.scope_disabled = "not listed in mcp.allowed"
        elif name in excluded_ids:
            entry.scope_disabled = "listed in mcp.excluded"
        elif name in off:
            entry.scope_disabled = f"disabled in Gemini CLI ({where}: {quoted(off[name])}.enabled is false)"


def _gemini_disabled(source: Source, env: Mapping[str, str]) -> tuple[dict[str, str], str]:
    """The servers ``gemini mcp disable`` turned off (their Gemini ids, each with its key in
    the file) and the file's path; a file that cannot be read is noted, nothing disabled."""
    home = _gemini_home(env)
    if home is None:
        return {}, ""
    path = home / ".gemini" / "mcp-server-enablement.json"
    if not path.is_file():
        return {}, ""
    try:
        data = _parse_json(_read_text(path, str(path)), str(path))
    except InputError as exc:
        source.notes.append(f"{exc}; the servers disabled in Gemini CLI are not known")
        return {}, str(path)
    off: dict[str, str] = {}
    for key, state in data.items() if isinstance(data, dict) else ():
        if isinstance(state, dict) and state.get("enabled") is False and (name := _gemini_id(key)) is not None:
            off.setdefault(name, key)
    return off, str(path)


def default_paths(client: str, env: Mapping[str, str], cwd: Path, platform: str = sys.platform) -> list[Path]:
    """The usual locations of a client's MCP config, user-wide first, then the project in ``cwd``."""
    found = _home(env)
    if found is None:
        raise InputError("$HOME is not set and this user has no home directory: give the PATHs of the configs")
    home = found
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
    elif client == "gemini":
        paths = [(_gemini_home(env) or home) / ".gemini" / "settings.json", cwd / ".gemini" / "settings.json"]
    elif client == "codex":
        paths = [(_codex_home(env) or home / ".codex") / "config.toml", cwd / ".codex" / "config.toml"]
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
    ("gemini", ".gemini/settings.json"),
    ("claude-desktop", "claude_desktop_config.json"),
)


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
    sources = [read_source(path, shown, fmt, env) for path, shown, fmt in _read_once(files, notes)]
    return sources, notes


def _read_once(
    files: Sequence[tuple[Path, str, str | None]], notes: list[str]
) -> list[tuple[Path, str, str | None]]:
    """Each file once, at its first mention: the same file named twice (directly and through its
    folder, or through a symlink) would otherwise merge with itself and repeat its comments."""
    seen: dict[str, str] = {}
    unique = []
    for path, shown, fmt in files:
        key = os.path.realpath(path)
        if key in seen:
            if shown != seen[key]:
                notes.append(f"{PROG}: note: {shown} is the same file as {seen[key]}; read once")
            continue
        seen[key] = shown
        unique.append((path, shown, fmt))
    return unique
