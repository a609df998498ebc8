"""The whole import: translate every entry, give it an id, merge duplicates, render one config."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gateway.commands.importer.credentials import find_secrets
from gateway.commands.importer.names import sanitize_id
from gateway.commands.importer.sources import CLIENT_NAMES, PROG, Entry, Source, quoted
from gateway.commands.importer.translate import Skip, translate
from gateway.commands.toml_writer import toml_comment, toml_key, toml_value
from gateway.config import ConfigError, parse_config


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


def refused_by_prefixgate(fields: dict[str, Any]) -> None:
    """Raise ``Skip`` with the reason when prefixgate would refuse the server table it was
    translated to (a header value with a trailing space, say): a config printed complete must
    load, and one such table would stop every server. Checked as a config of that one server,
    enabled, with no variable set (an unset reference is the user's to set, not an error)."""
    try:
        parse_config({"servers": {"s": {**fields, "enabled": True}}}, env={})
    except ConfigError as exc:
        raise Skip(f"prefixgate would refuse it: {str(exc).removeprefix('servers.s.')}") from None


def import_sources(sources: Sequence[Source]) -> Result:
    """Translate, name, merge and render; never raises for a bad entry (it is reported)."""
    messages: list[str] = []

    def say(kind: str, text: str) -> None:
        messages.append(f"{PROG}: {kind}: {text}")

    placed: dict[str, Placed] = {}
    families: dict[str, list[str]] = {}
    skipped: list[str] = []
    comments: dict[tuple[str, str], str] = {}
    total_entries = 0
    renamed = merged = suffixed = secrets = 0
    # Names already valid as ids, of entries not yet placed: each is that entry's own id, so a
    # name made valid (``my server``) or a duplicate's suffix never takes it and pushes the
    # entry that wrote it to another id (and its tools to other names).
    ahead = Counter(e.name for source in sources for e in source.entries if sanitize_id(e.name) == e.name)

    for source in sources:
        for note in source.notes:
            say("note", note)
        for entry in source.entries:
            total_entries += 1
            if ahead[entry.name] > 0:
                ahead[entry.name] -= 1
            label = quoted(entry.name)
            try:
                translated = translate(entry)
                refused_by_prefixgate(translated.fields)
            except Skip as exc:
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
                    f"{label} ({_origin(entry)}) is identical to servers.{twin} ({placed[twin].origins[0]}); "
                    "imported once",
                )
                continue
            server_id = base
            n = 1
            while server_id in placed or (server_id != entry.name and ahead[server_id] > 0):
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
            if entry.scope_disabled:  # why, in the file too, above the line to change
                comments[(server_id, "enabled")] = entry.scope_disabled
            for where, var, write in find_secrets(server_id, translated.fields):
                secrets += 1
                say(
                    "warning",
                    f"servers.{server_id}.{where} holds a literal secret; set {var} in your environment "
                    f"(export {var}=...) and write {write}",
                )
                comments[(server_id, where)] = f"literal secret: set {var} in the environment and write {write}"

    enabled = sum(1 for p in placed.values() if p.fields.get("enabled", True))
    text = _render(sources, placed, skipped, comments)
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
@CLIENT@
# max_functions = 128                       # overrides the profile's function limit
# context_window = 200000                   # unset: no token-budget check
# reserve_tokens = 16384
# keep_recent_tokens = 20000
# system_prompt_tokens = 0
# declarations = "auto"                     # auto, fixed or on-demand
# defer = []                                # globs on qualified names
"""


_PROFILE_FOR = {"claude-code": "claude-code", "claude-desktop": "claude-desktop", "codex": "openai", "gemini": "gemini"}
"""The naming profile that fits the client a config was imported from (Cursor and VS Code run
models of several providers: the default stays)."""


def _client_lines(sources: Sequence[Source]) -> str:
    """``profile`` and ``entry`` for the client the servers came from (all from one client), set;
    else the commented defaults. ``entry`` is the name doctor's snippet registers prefixgate under."""
    clients = {source.fmt for source in sources}
    profile = _PROFILE_FOR.get(next(iter(clients))) if len(clients) == 1 else None
    if profile is None:
        return (
            '# profile = "openai"                        '
            "# openai, deepseek, anthropic, mcp, claude-code, claude-desktop, gemini\n"
            '# entry = "prefixgate"                      '
            "# your client's name for prefixgate (claude-*, gemini: in every name)"
        )
    client = CLIENT_NAMES[next(iter(clients))]
    setting = f"profile = {toml_value(profile)}"
    return (
        f"{setting:<44}# fits {client}: its limits on tool names\n"
        f"{'entry = ' + toml_value('prefixgate'):<44}# the name it is registered under (doctor prints the command)"
    )


def _render(
    sources: Sequence[Source],
    placed: Mapping[str, Placed],
    skipped: Sequence[str],
    comments: Mapping[tuple[str, str], str],
) -> str:
    lines = ["# prefixgate configuration written by `prefixgate import` from:"]
    for source in sources:
        lines.append(toml_comment(f"#   {source.path} ({CLIENT_NAMES[source.fmt]})"))
    lines.append("# Check it with: prefixgate catalog --config <this file>")
    lines.append("# Every option is explained in config.example.toml.")
    if skipped:
        lines.append("#")
        lines.append("# Not imported (see the reasons):")
        lines += [toml_comment(f"#   {line}") for line in skipped]
    lines.append("")
    lines.append(_GATEWAY_DEFAULTS.replace("@CLIENT@", _client_lines(sources)))
    for server_id, server in placed.items():
        lines.append(f"[servers.{toml_key(server_id)}]")
        for origin in server.origins:
            lines.append(toml_comment(f"# from {origin}"))
        tables: list[tuple[str, dict[str, str]]] = []
        for key, value in server.fields.items():
            if isinstance(value, dict):
                tables.append((key, value))
                continue
            for (sid, where), comment in comments.items():
                if sid == server_id and (where == key or where.startswith(key + "[")):
                    lines.append(toml_comment(f"# {where}: {comment}"))
            lines.append(f"{toml_key(key)} = {toml_value(value)}")
        for table, values in tables:
            lines.append("")
            lines.append(f"[servers.{toml_key(server_id)}.{table}]")
            for key, value in values.items():
                hint = comments.get((server_id, f"{table}.{key}"))
                if hint:
                    lines.append(toml_comment(f"# {hint}"))
                lines.append(f"{toml_key(key)} = {toml_value(value)}")
        lines.append("")
    return "\n".join(lines).rstrip("\n") + "\n"
