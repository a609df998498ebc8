"""``prefixgate import``: turn the MCP servers other clients already run into a prefixgate config.

Reads the configs of Claude Desktop (``claude_desktop_config.json``), Claude Code
(``.mcp.json`` and ``~/.claude.json``: user scope and every ``projects.<path>`` scope),
Cursor (``.cursor/mcp.json``, ``~/.cursor/mcp.json``), VS Code (``.vscode/mcp.json``, the
user profile's ``mcp.json``, or ``settings.json`` with ``"mcp": {"servers": ...}``), Codex
CLI (``config.toml``, ``[mcp_servers.<name>]``) and Gemini CLI (``.gemini/settings.json``)
and prints one complete prefixgate TOML config that :func:`gateway.config.parse_config`
accepts.

One module per concern: ``sources`` (reading and format detection), ``translate``
(per-client translation), ``credentials`` (secret heuristics), ``names`` (ids and variable
names), ``merge`` (the whole import, rendered with ``gateway.commands.toml_writer``) and
``cli`` (options, output, exit status).

Rules, all deterministic (same inputs, same bytes):

- Server names become ids matching ``^[A-Za-z0-9][A-Za-z0-9_-]*$``; every change is
  reported. Several files are merged in input order: an identical definition under the
  same id is merged, a different one gets ``-2``, ``-3``, ... and both are reported.
- Placeholders the source client expands from the environment become prefixgate
  ``${VAR}`` references (Claude Code ``${VAR}``/``${VAR:-default}``, the default kept, Cursor and VS Code
  ``${env:VAR}`` and ``${userHome}``, VS Code ``${input:ID}`` -> ``${ID}`` upper-cased,
  ``_2``, ``_3``, ... after it for another input of the same name, ``INPUT_`` before one such
  as ``PATH``);
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

from gateway.commands.importer.cli import add_arguments, main, run

__all__ = ["add_arguments", "main", "run"]
