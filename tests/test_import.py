"""``prefixgate import``: other clients' MCP configs -> a prefixgate config the strict validator accepts."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tomllib
import unicodedata
from pathlib import Path
from typing import Any

import pytest

from gateway.commands import importer
from gateway.commands.importer.credentials import find_secrets
from gateway.commands.importer.sources import CLIENT_NAMES, default_paths
from gateway.commands.importer.translate import escape_literal
from gateway.commands.toml_writer import toml_string
from gateway.config import Config, ServerConfig, expand, parse_config

FIXTURES = Path(__file__).parent / "fixtures" / "import"
DESKTOP = FIXTURES / "claude-desktop" / "claude_desktop_config.json"
CODE_PROJECT = FIXTURES / "claude-code" / "project" / ".mcp.json"
APPROVE = "--approve-project-servers"
"""A project .mcp.json's servers imported enabled, as where Claude Code approved them: what most
tests here read is the translation, not the approval."""
CODE_USER = FIXTURES / "claude-code" / "home" / ".claude.json"
CURSOR = FIXTURES / "cursor" / ".cursor" / "mcp.json"
VSCODE = FIXTURES / "vscode" / ".vscode" / "mcp.json"
CODEX = FIXTURES / "codex" / "config.toml"

# What the imported configs reference; parse_config expands ${VAR} of enabled servers.
ENV = {
    "HOME": "/home/alice",
    "API_BASE_URL": "https://api.example.com",
    "API_KEY": "k-api",
    "DATABASE_URL": "postgres://localhost/app",
    "CONTEXT7_API_KEY": "k-c7",
    "GITHUB_PAT": "k-gh",
    "PERPLEXITY_KEY": "k-pplx",
    "FIGMA_OAUTH_TOKEN": "k-figma",
    "DISPLAY": ":0",
    "XDG_STATE_HOME": "/tmp/state",
}


def do_import(capsys: pytest.CaptureFixture[str], *argv: Any) -> tuple[int, str, str]:
    code = importer.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def parsed(out: str, env: dict[str, str] | None = None) -> Config:
    return parse_config(tomllib.loads(out), env=ENV if env is None else env)


def servers(config: Config) -> dict[str, ServerConfig]:
    return {s.id: s for s in config.servers}


@pytest.fixture(autouse=True)
def _home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private $HOME: nothing here reads the real one."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    for var in ("XDG_CONFIG_HOME", "CODEX_HOME", "CLAUDE_CONFIG_DIR", "GEMINI_CLI_HOME", "GEMINI_CLI_TRUST_WORKSPACE",
                "GEMINI_CLI_TRUSTED_FOLDERS_PATH"):  # fmt: skip
        monkeypatch.delenv(var, raising=False)
    return home


# --- each client format ----------------------------------------------------------------


def test_claude_desktop(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = do_import(capsys, DESKTOP)
    assert code == 0, err
    assert "(Claude Desktop)" in out
    # Names are counted as Claude Desktop shows them (issue 31).
    assert (parsed(out).client.profile, parsed(out).client.entry) == ("claude-desktop", "prefixgate")
    s = servers(parsed(out))
    assert list(s) == sorted(["filesystem", "github", "Brave-Search", "postgres", "notes", "atlassian"])
    assert s["filesystem"].command == "npx" and s["filesystem"].args[-1] == "/Users/alice/Downloads"
    assert dict(s["github"].env) == {"GITHUB_PERSONAL_ACCESS_TOKEN": "ghp_EXAMPLEfake0000000000000000000000001"}
    # A literal ${HOME} (Claude Desktop does not expand it) stays literal: written $${HOME}.
    assert s["notes"].args[1] == "${HOME}/src/notes-mcp"
    assert '"$${HOME}/src/notes-mcp"' in out
    assert "Claude Desktop does not expand it" in err
    # disabled: true -> enabled = false.
    assert s["atlassian"].enabled is False and s["filesystem"].enabled is True
    # The entry without command or url is listed, with the reason, on stderr and in the file.
    assert 'skipped: "slack" (' in err and "has neither command (stdio) nor url" in err
    assert '#   "slack" (' in out


def test_claude_code_project_file(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = do_import(capsys, CODE_PROJECT, APPROVE)
    assert code == 0, err
    assert "(Claude Code)" in out
    # Names are counted with Claude Code's mcp__prefixgate__ wrapper (issue 31).
    assert (parsed(out).client.profile, parsed(out).client.entry) == ("claude-code", "prefixgate")
    assert '\nprofile = "claude-code"' in out and '\nentry = "prefixgate"' in out
    s = servers(parsed(out))
    assert set(s) == {"sentry", "asana", "api-server", "dbhub", "repo-tools"}
    assert (s["sentry"].transport, s["sentry"].url) == ("http", "https://mcp.sentry.dev/mcp")
    assert (s["asana"].transport, s["asana"].url) == ("sse", "https://mcp.asana.com/sse")
    # Claude Code expands ${VAR} and ${VAR:-default}: they stay environment references, the
    # default with them (prefixgate expands it as Claude Code does).
    assert s["api-server"].url == "https://api.example.com/mcp"
    assert dict(s["api-server"].headers) == {"Authorization": "Bearer k-api", "X-Team": "platform"}
    assert 'url = "${API_BASE_URL:-https://api.example.com}/mcp"' in out and "has a default" not in err
    unset = {k: v for k, v in ENV.items() if k != "API_BASE_URL"}
    assert servers(parsed(out, unset))["api-server"].url == "https://api.example.com/mcp"
    assert servers(parsed(out, {**unset, "API_BASE_URL": "https://other.test"}))["api-server"].url == (
        "https://other.test/mcp"
    )
    assert s["dbhub"].args[-1] == "postgres://localhost/app"
    # Relative paths in a project file: the server runs in the project directory.
    assert s["repo-tools"].cwd == str(CODE_PROJECT.parent.absolute())
    assert "servers.repo-tools.cwd: set to the project directory" in err
    # type "ws" is no transport prefixgate speaks.
    assert 'skipped: "figma-desktop"' in err and "type 'ws' is not a transport" in err


def test_claude_code_user_file_with_project_scopes(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = do_import(capsys, CODE_USER)
    assert code == 0, err
    s = servers(parsed(out))
    assert set(s) == {"github", "memory", "context7", "playwright", "github-2", "aws-docs", "terraform"}
    # User scope and the projects' local scopes are all imported.
    assert s["github"].transport == "http" and s["github"].headers["Authorization"].startswith("Bearer ghp_")
    assert s["playwright"].args == ("@playwright/mcp@latest",)
    assert dict(s["aws-docs"].env) == {"FASTMCP_LOG_LEVEL": "ERROR", "AWS_PROFILE": "infra-admin"}
    # The same memory server in the user scope and a project scope is imported once.
    assert 'merged: "memory"' in err and 'projects["/home/alice/src/webapp"].mcpServers["memory"]' in err
    assert out.count("[servers.memory]") == 1
    # A different github in a project scope gets a suffix, reported.
    assert s["github-2"].command == "docker" and dict(s["github-2"].env) == {"GITHUB_PERSONAL_ACCESS_TOKEN": "k-gh"}
    assert 'duplicate: "github"' in err and "imported as servers.github-2" in err
    # disabledMcpServers of a project disables that project's server.
    assert s["terraform"].enabled is False
    assert 'listed in projects["/home/alice/src/infra"].disabledMcpServers' in err


def test_relative_paths_without_a_dot_run_in_the_project(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """``node build/index.js`` and ``.venv/bin/python`` in a project's .mcp.json are resolved by
    the client from the project directory. Only ``./``-style paths were seen, so these came out
    without cwd and ran from wherever prefixgate was started (another project: not found)."""
    project = tmp_path / "repo"
    (project / "build").mkdir(parents=True)
    (project / "server.py").write_text("")
    servers_json = {
        "node": {"command": "node", "args": ["build/index.js"]},
        "venv": {"command": ".venv/bin/python", "args": ["-m", "srv"]},
        "uv": {"command": "uv", "args": ["run", "server.py"]},
        "docker": {"command": "docker", "args": ["run", "-i", "--rm", "ghcr.io/github/github-mcp-server"]},
        "fs": {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-filesystem", "", "/tmp"]},
        # A relative cwd is the project's too; an absolute one, ~ or a reference is kept.
        "sub": {"command": "srv", "cwd": "./tools/mcp/"},
        "dot": {"command": "srv", "cwd": "."},
        "abs": {"command": "srv", "cwd": "/opt/srv"},
        "ref": {"command": "srv", "cwd": "${HOME}/srv"},
    }
    (project / ".mcp.json").write_text(json.dumps({"mcpServers": servers_json}))
    code, out, err = do_import(capsys, project / ".mcp.json", APPROVE)
    assert code == 0, err
    s = servers(parsed(out))
    assert {name for name, server in s.items() if server.cwd == str(project)} == {"node", "venv", "uv", "dot"}
    assert s["docker"].cwd is None and s["fs"].cwd is None
    assert s["sub"].cwd == str(project / "tools" / "mcp")
    assert (s["abs"].cwd, s["ref"].cwd) == ("/opt/srv", "/home/alice/srv")
    assert "servers.sub.cwd: ./tools/mcp/ is relative: taken from the project directory" in err
    assert "servers.node.cwd: set to the project directory" in err and "(build/index.js)" in err
    # No project to run it in (a user-wide file): a command with a directory in it is named.
    desktop = tmp_path / "claude_desktop_config.json"
    desktop.write_text(json.dumps({"mcpServers": {"local": {"command": "bin/server"}}}))
    code, out, err = do_import(capsys, desktop)
    assert code == 0, err
    assert "warning: servers.local.command: uses a relative path (bin/server)" in err


def test_a_project_server_rejected_in_claude_code_is_imported_disabled(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, _home: Path
) -> None:
    """A repository's .mcp.json can name any command; Claude Code runs one only once approved
    and keeps a refusal in disabledMcpjsonServers, in any of its settings files. It was imported
    enabled, so doctor and serve started a server the user had refused."""
    project = tmp_path / "repo"
    (project / ".claude").mkdir(parents=True)
    (project / ".mcp.json").write_text(
        json.dumps({"mcpServers": {n: {"command": f"{n}-server"} for n in ("asked", "local", "kept")}})
    )
    choices = {"enabledMcpjsonServers": ["kept"], "disabledMcpjsonServers": ["asked"]}
    (_home / ".claude.json").write_text(json.dumps({"projects": {str(project): choices}}))
    (project / ".claude" / "settings.local.json").write_text(json.dumps({"disabledMcpjsonServers": ["local"]}))
    code, out, err = do_import(capsys, project / ".mcp.json")
    assert code == 0, err
    s = servers(parsed(out))
    assert (s["asked"].enabled, s["local"].enabled, s["kept"].enabled) == (False, False, True)
    assert f"rejected this project server ({_home / '.claude.json'}: projects[{json.dumps(str(project))}]" in err
    assert f"({project / '.claude' / 'settings.local.json'}: disabledMcpjsonServers)" in err


@pytest.mark.parametrize("approved_by", ["enabledMcpjsonServers", "enableAllProjectMcpServers", "flag"])
def test_a_project_server_claude_code_never_approved_is_imported_disabled(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, _home: Path, approved_by: str
) -> None:
    """Claude Code runs a project .mcp.json's server only once the user approved it (a cloned
    repository can name any command). One never approved was imported enabled: serve started
    what Claude Code itself would have asked about first. It is imported disabled, saying why
    on stderr and in the file, unless approved there or with --approve-project-servers; a
    rejection stays a rejection whatever approves."""
    project = tmp_path / "repo"
    (project / ".claude").mkdir(parents=True)
    (project / ".mcp.json").write_text(
        json.dumps({"mcpServers": {n: {"command": f"{n}-server"} for n in ("pending", "kept", "refused")}})
    )
    choices: dict[str, Any] = {"disabledMcpjsonServers": ["refused"]}
    flags: list[str] = []
    if approved_by == "enabledMcpjsonServers":
        choices["enabledMcpjsonServers"] = ["kept", "refused"]
    elif approved_by == "enableAllProjectMcpServers":
        (project / ".claude" / "settings.json").write_text(json.dumps({"enableAllProjectMcpServers": True}))
    else:
        flags = [APPROVE]
    (_home / ".claude.json").write_text(json.dumps({"projects": {str(project): choices}}))
    code, out, err = do_import(capsys, project / ".mcp.json", *flags)
    assert code == 0, err
    s = servers(parsed(out))
    pending_enabled = approved_by != "enabledMcpjsonServers"
    assert (s["pending"].enabled, s["kept"].enabled, s["refused"].enabled) == (pending_enabled, True, False)
    not_approved = "Claude Code has not approved this project server"
    assert (f"servers.pending.enabled: false: {not_approved}" in err) is not pending_enabled
    assert (f"# enabled: {not_approved}" in out) is not pending_enabled
    assert f"# enabled: Claude Code rejected this project server ({_home / '.claude.json'}" in out
    assert "servers.kept.enabled" not in err


def test_gemini_cli(capsys: pytest.CaptureFixture[str], _home: Path) -> None:
    """Gemini CLI's settings.json read as a Claude Code file: its httpUrl server was skipped
    ("neither command nor url"), $VAR stayed literal text (reported as a literal secret), and
    excludeTools and mcp.excluded were dropped, so what the user kept from the model came back."""
    settings = {
        "theme": "Dracula",
        "mcp": {"excluded": ["off"]},
        "mcpServers": {
            "github": {
                "httpUrl": "https://api.githubcopilot.com/mcp/",
                "headers": {"Authorization": "Bearer $GITHUB_PAT"},
                "trust": True,
                "includeTools": ["get_issue", "list_*"],
            },
            "events": {
                "url": "https://example.com/events",
                "type": "sse",
                "excludeTools": ["delete_all"],
                "timeout": 30000,
            },
            "py": {
                "command": "python3",
                "args": ["-m", "srv"],
                "env": {"KEY": "${API_KEY}", "HOME_DIR": "$HOME"},
                "timeout": 7200000,
            },
            "bad": {"command": "b", "timeout": "soon"},
            "off": {"command": "off-server"},
        },
    }
    (_home / ".gemini").mkdir()
    (_home / ".gemini" / "settings.json").write_text(json.dumps(settings))
    code, out, err = do_import(capsys, "--from", "gemini")
    assert code == 0, err
    assert "(Gemini CLI)" in out and "holds a literal secret" not in err
    # Its names are mcp_<entry>_<tool> in 63 characters: the gemini profile counts the wrapper.
    assert parsed(out).client.profile == "gemini" and '\nprofile = "gemini"' in out
    assert '\nentry = "prefixgate"' in out
    s = servers(parsed(out))
    assert (s["github"].transport, s["github"].url) == ("http", "https://api.githubcopilot.com/mcp/")
    assert s["github"].headers["Authorization"] == "Bearer k-gh"
    assert s["github"].include == ("get_issue", "list_[*]")
    assert (s["events"].transport, s["events"].exclude) == ("sse", ("delete_all",))
    assert dict(s["py"].env) == {"KEY": "k-api", "HOME_DIR": "/home/alice"}
    # Its timeout (milliseconds) is the call's: past the default max_call_time it raises that too.
    assert (s["events"].call_timeout, s["events"].max_call_time) == (30.0, 3600.0)
    assert (s["py"].call_timeout, s["py"].max_call_time) == (7200.0, 7200.0)
    assert s["bad"].call_timeout == 300.0 and "servers.bad.timeout: not imported: expected a positive number" in err
    assert s["off"].enabled is False and "servers.off.enabled: false: listed in mcp.excluded" in err
    assert "servers.github.trust: not imported: tool approval belongs to the client" in err
    # Found by its place without --from too, and the same.
    code, detected, _ = do_import(capsys, _home / ".gemini" / "settings.json")
    assert code == 0 and detected == out


def test_servers_gemini_cli_does_not_connect_to_are_imported_disabled(
    capsys: pytest.CaptureFixture[str], _home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Gemini CLI compares mcp.allowed and mcp.excluded with names lower-cased and trimmed, and
    keeps what 'gemini mcp disable NAME' turned off in ~/.gemini/mcp-server-enablement.json
    (its ids lower-cased), for the user's servers and a project's alike: each such server was
    imported enabled, so prefixgate started what the user had told Gemini CLI not to."""
    gemini = _home / ".gemini"
    gemini.mkdir()
    user = {"mcp": {"excluded": ["GitHub "]}, "mcpServers": {
        "github": {"httpUrl": "https://api.githubcopilot.com/mcp/"},
        "Time": {"command": "mcp-server-time"},
        "fetch": {"command": "uvx", "args": ["mcp-server-fetch"]},
    }}  # fmt: skip
    (gemini / "settings.json").write_text(json.dumps(user))
    (gemini / "mcp-server-enablement.json").write_text(
        json.dumps({"time": {"enabled": False}, "db": {"enabled": False}, "fetch": {"enabled": True}}, indent=2)
    )
    project = tmp_path / "project"
    (project / ".gemini").mkdir(parents=True)
    (project / ".gemini" / "settings.json").write_text(
        json.dumps({"mcp": {"allowed": ["DB"]}, "mcpServers": {"db": {"command": "db-mcp"}, "x": {"command": "x"}}})
    )
    monkeypatch.chdir(project)
    code, out, err = do_import(capsys, "--from", "gemini")
    assert code == 0, err
    enabled = {sid: s.enabled for sid, s in servers(parsed(out)).items()}
    assert enabled == {"github": False, "Time": False, "fetch": True, "db": False, "x": False}
    assert "servers.github.enabled: false: listed in mcp.excluded" in err
    disabled_in = f"disabled in Gemini CLI ({gemini / 'mcp-server-enablement.json'}:"
    assert f'servers.Time.enabled: false: {disabled_in} "time".enabled is false)' in err
    assert f'servers.db.enabled: false: {disabled_in} "db".enabled is false)' in err
    assert "servers.x.enabled: false: not listed in mcp.allowed" in err
    # An enablement file that cannot be read is named; the servers are imported as the settings say.
    (gemini / "mcp-server-enablement.json").write_text("{")
    code, out, err = do_import(capsys, "--from", "gemini")
    assert code == 0 and servers(parsed(out))["Time"].enabled is True
    assert f"{gemini / 'mcp-server-enablement.json'}: not valid JSON" in err


@pytest.mark.parametrize(
    ("case", "trusted"),
    [
        ("no rule", False),
        ("TRUST_FOLDER", True),
        ("TRUST_PARENT", True),
        ("DO_NOT_TRUST inside a trusted parent", False),
        ("folder trust off", True),
        ("GEMINI_CLI_TRUST_WORKSPACE", True),
        ("flag", True),
    ],
)
def test_a_gemini_project_settings_file_is_imported_enabled_only_in_a_trusted_folder(
    _home: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    case: str,
    trusted: bool,
) -> None:
    """Gemini CLI ignores a workspace's .gemini/settings.json, its servers included, unless the
    folder is trusted (folder trust is on by default; ~/.gemini/trustedFolders.json, the longest
    rule holding the folder decides): 'import --from gemini' run inside a cloned repository
    imported its servers enabled, so prefixgate started any command the repository named."""
    work = tmp_path / "work"
    project = work / "repo"
    (project / ".gemini").mkdir(parents=True)
    (project / ".gemini" / "settings.json").write_text(json.dumps({"mcpServers": {"tool": {"command": "run-me"}}}))
    user: dict[str, Any] = {"mcpServers": {"time": {"command": "mcp-server-time"}}}
    rules = {
        "TRUST_FOLDER": {str(project): "TRUST_FOLDER"},
        "TRUST_PARENT": {str(project / "src"): "TRUST_PARENT"},
        "DO_NOT_TRUST inside a trusted parent": {str(work): "TRUST_FOLDER", str(project): "DO_NOT_TRUST"},
    }.get(case, {})
    if case == "folder trust off":
        user["security"] = {"folderTrust": {"enabled": False}}
    if case == "GEMINI_CLI_TRUST_WORKSPACE":
        monkeypatch.setenv("GEMINI_CLI_TRUST_WORKSPACE", "true")
    (_home / ".gemini").mkdir()
    (_home / ".gemini" / "settings.json").write_text(json.dumps(user))
    (_home / ".gemini" / "trustedFolders.json").write_text("// written by Gemini CLI\n" + json.dumps(rules))
    monkeypatch.chdir(project)
    code, out, err = do_import(capsys, "--from", "gemini", *([APPROVE] if case == "flag" else []))
    assert code == 0, err
    s = servers(parsed(out))
    assert s["time"].enabled is True and s["tool"].enabled is trusted
    reason = "servers.tool.enabled: false: Gemini CLI reads a project's .gemini/settings.json only in a trusted folder"
    assert (reason in err) is not trusted


def test_cursor(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = do_import(capsys, CURSOR)
    assert code == 0, err
    assert "(Cursor)" in out
    # Cursor runs models of several providers: the default profile stays, commented.
    assert parsed(out).client.profile == "openai" and '# profile = "openai"' in out
    s = servers(parsed(out))
    assert set(s) == {"context7", "linear", "supabase", "puppeteer", "notes"}
    # ${env:NAME} -> ${NAME}; no type: the transport is inferred from the URL and reported.
    assert s["context7"].transport == "http" and dict(s["context7"].headers) == {"CONTEXT7_API_KEY": "k-c7"}
    assert s["linear"].transport == "sse" and "'sse' inferred from the URL" in err
    # ${workspaceFolder} is the project directory, ${userHome} is ${HOME}.
    project = str(CURSOR.parent.parent.absolute())
    assert s["notes"].args == (f"{project}/tools/notes_server.py", "--data", "/home/alice/notes")
    # envFile cannot be carried over: said so, loudly.
    assert "warning: servers.notes.envFile: not imported" in err
    assert 'skipped: "broken"' in err


def test_vscode_inputs_and_types(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = do_import(capsys, VSCODE)
    assert code == 0, err
    assert "(VS Code)" in out
    s = servers(parsed(out))
    assert set(s) == {"github", "perplexity", "fetch", "my-python-server", "playwright-sse"}
    # ${input:ID} -> ${ID_AS_ENV_VAR}, with a note naming the input and the variable.
    assert 'Authorization = "Bearer ${GITHUB_PAT}"' in out
    assert s["github"].headers["Authorization"] == "Bearer k-gh"
    assert s["perplexity"].env["PERPLEXITY_API_KEY"] == "k-pplx"
    assert 'VS Code input "github-pat" ("GitHub Personal Access Token", password) became ${GITHUB_PAT}' in err
    assert "export PERPLEXITY_KEY=..." in err
    assert (s["playwright-sse"].transport, s["playwright-sse"].url) == ("sse", "http://localhost:8931/sse")
    project = str(VSCODE.parent.parent.absolute())
    assert s["my-python-server"].command == f"{project}/.venv/bin/python"
    assert 'renamed: "my.python-server"' in err and "servers.my-python-server" in err
    assert "servers.my-python-server.dev: not imported" in err
    # A unix-socket URL cannot be reached by prefixgate.
    assert 'skipped: "local-socket"' in err and "'unix' URLs are not supported" in err


def test_a_server_vs_code_runs_sandboxed_is_imported_disabled(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """VS Code runs a stdio server with sandboxEnabled inside its sandbox (writes, reads and hosts
    limited by the sandbox rules): imported, it ran with the user's every permission, the sandbox
    dropped with a note. It is imported disabled, saying why, in the file too."""
    path = tmp_path / ".vscode" / "mcp.json"
    path.parent.mkdir()
    sandbox = {"filesystem": {"denyRead": ["${userHome}/.ssh"]}, "network": {"allowedDomains": ["api.example.com"]}}
    path.write_text(json.dumps({"servers": {
        "boxed": {"type": "stdio", "command": "npx", "args": ["-y", "@example/mcp-server"],
                  "sandboxEnabled": True, "sandbox": sandbox},
        "plain": {"type": "stdio", "command": "mcp-server-time", "sandboxEnabled": False},
    }}))  # fmt: skip
    code, out, err = do_import(capsys, path)
    assert code == 0, err
    s = servers(parsed(out))
    assert s["boxed"].enabled is False and s["plain"].enabled is True
    assert "servers.boxed.enabled: false: VS Code runs this server sandboxed" in err
    assert "# enabled: VS Code runs this server sandboxed" in out
    assert "servers.boxed.sandbox: not imported: prefixgate runs servers without VS Code's sandbox" in err


def test_distinct_vscode_inputs_stay_distinct_variables(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``api-key`` and ``api.key`` both read as ``API_KEY``: one service's secret would reach the
    other's server. And an input called ``path`` would have become ``${PATH}``."""
    (tmp_path / ".vscode").mkdir()
    path = tmp_path / ".vscode" / "mcp.json"
    inputs = [{"type": "promptString", "id": i, "password": True} for i in ("api-key", "api.key", "path")]
    path.write_text(
        json.dumps(
            {
                "inputs": inputs,
                "servers": {
                    "a": {"command": "a-server", "env": {"KEY": "${input:api-key}"}},
                    "b": {"command": "b-server", "env": {"KEY": "${input:api.key}"}},
                    "c": {"command": "c-server", "args": ["${input:path}"], "env": {"K": "${input:api-key}"}},
                },
            }
        )
    )
    code, out, err = do_import(capsys, path)
    assert code == 0, err
    s = servers(parsed(out, {"API_KEY": "for-a", "API_KEY_2": "for-b", "INPUT_PATH": "/p", "PATH": "/usr/bin"}))
    assert (s["a"].env["KEY"], s["b"].env["KEY"], s["c"].env["K"]) == ("for-a", "for-b", "for-a")
    assert s["c"].args == ("/p",)
    assert "export API_KEY_2=..." in err and "export INPUT_PATH=..." in err


def test_codex(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = do_import(capsys, CODEX)
    assert code == 0, err
    assert "(Codex CLI)" in out
    assert parsed(out).client.profile == "openai" and '\nprofile = "openai"' in out
    s = servers(parsed(out))
    assert set(s) == {"context7", "figma", "sentry", "github", "chrome-devtools", "templating", "linear"}
    assert s["figma"].transport == "http"
    assert dict(s["figma"].headers) == {"X-Figma-Region": "us-east-1", "Authorization": "Bearer k-figma"}
    sentry = s["sentry"]  # disabled: never expanded, shape kept
    assert (sentry.enabled, sentry.startup_timeout, sentry.call_timeout) == (False, 20, 120)
    table = tomllib.loads(out)["servers"]
    assert table["sentry"]["headers"] == {"X-Sentry-Org": "${SENTRY_ORG}"}
    github = s["github"]
    assert github.include == ("get_issue", "list_issues", "create_pull_request") and github.exclude == ("delete_file",)
    assert github.startup_timeout == 15
    assert s["chrome-devtools"].required is True and dict(s["chrome-devtools"].env) == {"DISPLAY": ":0"}
    assert s["templating"].args == ("--pattern", "${name}.md")
    # Codex logs in with OAuth (codex mcp login): the entry becomes auth = "oauth", its client id kept.
    assert (s["linear"].auth, s["linear"].client_id) == ("oauth", "prefixgate-example")
    assert "servers.linear.oauth: not imported" not in err


@pytest.mark.parametrize(
    ("path", "client"),
    [
        (DESKTOP, "Claude Desktop"),
        (CODE_PROJECT, "Claude Code"),
        (CODE_USER, "Claude Code"),
        (CURSOR, "Cursor"),
        (VSCODE, "VS Code"),
        (CODEX, "Codex CLI"),
    ],
)
def test_detected_format_matches_from(capsys: pytest.CaptureFixture[str], path: Path, client: str) -> None:
    """Without --from the format comes from the file; with --from the output is the same."""
    code, detected, _ = do_import(capsys, path)
    assert code == 0 and f"({client})" in detected
    fmt = {v: k for k, v in CLIENT_NAMES.items()}[client]
    code, forced, _ = do_import(capsys, "--from", fmt, path)
    assert code == 0 and forced == detected


def test_it_ends_with_what_to_do_next(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Registered beside the servers it imported, prefixgate doubled every tool: the client kept
    running them itself, and nothing said they should go once prefixgate runs them."""
    out_file = tmp_path / "prefix gate.toml"
    code, _, err = do_import(capsys, DESKTOP, "--out", out_file)
    assert code == 0, err
    assert err.splitlines()[-1] == (
        f"prefixgate import: next: prefixgate doctor --config '{out_file}' --client claude-desktop prints how "
        "to register prefixgate; once it is, remove or disable the imported servers where they came from "
        f"({DESKTOP}): else each runs twice, directly and through prefixgate"
    )
    code, _, err = do_import(capsys, DESKTOP, CURSOR)  # two clients: doctor is told which by the user
    assert code == 0, err
    assert "next: prefixgate doctor --config FILE prints how" in err and f"({DESKTOP}, {CURSOR})" in err


def test_content_detection_without_telling_names(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "a.json").write_text(json.dumps({"servers": {"x": {"type": "stdio", "command": "x"}}}))
    (tmp_path / "b.conf").write_text('[mcp_servers.y]\ncommand = "y"\n')
    (tmp_path / "c.json").write_text(json.dumps({"mcpServers": {"z": {"command": "z"}}}))
    code, out, err = do_import(capsys, tmp_path / "a.json", tmp_path / "b.conf", tmp_path / "c.json")
    assert code == 0, err
    assert "a.json (VS Code)" in out and "b.conf (Codex CLI)" in out and "c.json (Claude Code)" in out
    assert set(servers(parsed(out))) == {"x", "y", "z"}


# --- secrets, names, duplicates ------------------------------------------------------------


SECRET_VALUES = [
    "ghp_EXAMPLEfake0000000000000000000000001",
    "BSAexampleFAKEkey123",
    "hunter2",
    "ghp_EXAMPLEfake0000000000000000000000002",
    "sbp_EXAMPLEfake00000000000000000000000000",
    "ghp_EXAMPLEfake0000000000000000000000003",
]


def test_literal_secrets_are_kept_and_warned_without_echoing(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = do_import(capsys, DESKTOP, CODE_USER, CURSOR, CODEX)
    assert code == 0, err
    for value in SECRET_VALUES:
        assert value in out  # kept as in the source
        assert value not in err  # never printed on stderr
    assert (
        "warning: servers.github.env.GITHUB_PERSONAL_ACCESS_TOKEN holds a literal secret; set "
        "GITHUB_PERSONAL_ACCESS_TOKEN in your environment (export GITHUB_PERSONAL_ACCESS_TOKEN=...) and write "
        '"${GITHUB_PERSONAL_ACCESS_TOKEN}"'
    ) in err
    assert "servers.Brave-Search.env.BRAVE_API_KEY holds a literal secret" in err
    assert "servers.postgres.args[2] holds a literal secret; set POSTGRES_PASSWORD" in err
    # A header keeps its scheme in the suggested reference.
    assert (
        "servers.github-2.headers.Authorization holds a literal secret; set GITHUB_2_TOKEN in your environment "
        '(export GITHUB_2_TOKEN=...) and write "Bearer ${GITHUB_2_TOKEN}"'
    ) in err
    assert "servers.supabase.env.SUPABASE_ACCESS_TOKEN holds a literal secret" in err
    # References are not secrets.
    assert "CONTEXT7_API_KEY holds" not in err and "X-Team" not in err
    # The output carries the same hint as a comment next to the value.
    assert '# literal secret: set BRAVE_API_KEY in the environment and write "${BRAVE_API_KEY}"' in out


def test_secret_detection_rules() -> None:
    find = find_secrets
    assert find("docs", {"headers": {"Authorization": "Bearer abc.def"}}) == [
        ("headers.Authorization", "DOCS_TOKEN", '"Bearer ${DOCS_TOKEN}"')
    ]
    assert find("docs", {"headers": {"X-API-Key": "k"}})[0][1:] == ("DOCS_API_KEY", '"${DOCS_API_KEY}"')
    assert find("s", {"env": {"OPENAI_API_KEY": "${OPENAI_API_KEY}", "DB_PASSWORD": "", "KEY_FILE": "/etc/k"}}) == []
    assert find("s", {"env": {"UPSTREAM": "q8Zr2LmX0vPa7TnB4kWc9Ye"}})[0][0] == "env.UPSTREAM"  # high entropy
    assert (
        find("s", {"env": {"REGION": "eu-west-1", "LOG_LEVEL": "debug", "ID": "0f8fad5b-d9cb-469f-a165-70867728950e"}})
        == []
    )
    assert find("s", {"args": ["--api-key", "abc123"]})[0] == ("args[1]", "S_API_KEY", '"${S_API_KEY}"')
    assert find("s", {"args": ["--token=xyz"]})[0] == ("args[0]", "S_TOKEN", '"--token=${S_TOKEN}"')
    assert find("s", {"args": ["-y", "@scope/server-name@1.2.3", "--port", "8080"]}) == []
    assert find("s", {"url": "https://h/mcp?api_key=abc&x=1"})[0][:2] == ("url", "S_API_KEY")


def test_a_key_in_a_url_path_is_reported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Some services put the key in the URL's path (Zapier's https://mcp.zapier.com/api/mcp/s/<key>/mcp):
    only a query's key and a password were looked for, so it was kept without a word."""
    key = "ZjM2YjYxYTAtNDU4Ny00ZTZmLWI2ZDAtMjNjNjBkZTlhNTUxOjQ4NGQ2MzA3ZjdlOGE3YTZk"
    assert find_secrets("zapier", {"url": f"https://mcp.zapier.com/api/mcp/s/{key}/mcp"}) == [
        ("url", "ZAPIER_URL_KEY", "the URL with ${ZAPIER_URL_KEY} in place of the key in its path")
    ]
    for url in (
        "https://api.githubcopilot.com/mcp/",
        "https://mcp.example.com/v1/2025-06-18/0f8fad5b-d9cb-469f-a165-70867728950e/mcp",
        f"https://mcp.zapier.com/api/mcp/s/${{ZAPIER_KEY}}/mcp?session={key}x",
    ):
        assert [f for f in find_secrets("s", {"url": url}) if "path" in f[2]] == [], url
    path = tmp_path / ".cursor" / "mcp.json"
    path.parent.mkdir()
    path.write_text(json.dumps({"mcpServers": {"zapier": {"url": f"https://mcp.zapier.com/api/mcp/s/{key}/mcp"}}}))
    code, out, err = do_import(capsys, path)
    assert code == 0 and "servers.zapier.url holds a literal secret; set ZAPIER_URL_KEY" in err
    assert key not in err and "# url: literal secret: set ZAPIER_URL_KEY" in out


def test_renamed_ids_are_valid_and_reported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    names = ["Brave Search", "io.github/owner:server", "_private", "数据库", "café-mcp", "ok_id-1"]
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": {n: {"command": "srv", "args": [n]} for n in names}}, ensure_ascii=False))
    code, out, err = do_import(capsys, path)
    assert code == 0, err
    ids = {s.args[0]: s.id for s in parsed(out).servers}
    assert ids == {
        "Brave Search": "Brave-Search",
        "io.github/owner:server": "io-github-owner-server",
        "_private": "private",
        "数据库": "server",
        "café-mcp": "cafe-mcp",
        "ok_id-1": "ok_id-1",
    }
    for name in names[:-1]:
        assert f"renamed: {json.dumps(name, ensure_ascii=False)} (" in err
    assert 'renamed: "ok_id-1"' not in err


def test_duplicates_across_two_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = tmp_path / "a" / ".mcp.json"
    b = tmp_path / "b" / ".cursor" / "mcp.json"
    a.parent.mkdir()
    b.parent.mkdir(parents=True)
    memory = {"command": "npx", "args": ["-y", "@modelcontextprotocol/server-memory"]}
    a.write_text(json.dumps({"mcpServers": {"memory": memory, "github": {"type": "http", "url": "https://a/mcp"}}}))
    b.write_text(json.dumps({"mcpServers": {
        "github": {"url": "https://b/mcp"},
        "memory": memory,
        "git hub": {"url": "https://c/mcp"},
        "github-2": {"url": "https://d/mcp"},
    }}))  # fmt: skip
    code, out, err = do_import(capsys, a, b, APPROVE)
    assert code == 0, err
    s = servers(parsed(out))
    assert {k: v.url or v.command for k, v in s.items()} == {
        "memory": "npx",
        "github": "https://a/mcp",
        "github-3": "https://b/mcp",
        "git-hub": "https://c/mcp",
        "github-2": "https://d/mcp",  # its own name, valid: never taken by another's suffix
    }
    assert (
        f'merged: "memory" ({b}: mcpServers["memory"]) is identical to servers.memory ({a}: mcpServers["memory"])'
        in err
    )
    assert f'duplicate: "github" ({b}: mcpServers["github"]) differs from servers.github ({a}' in err
    assert "imported as servers.github-3" in err
    assert f'# from {a}: mcpServers["memory"]\n# from {b}: mcpServers["memory"]' in out
    # The other order gives the other numbering: input order decides, deterministically.
    code, reverse, _ = do_import(capsys, b, a, APPROVE)
    assert code == 0
    assert {k: v.url for k, v in servers(parsed(reverse)).items() if v.url}["github-3"] == "https://a/mcp"


def test_a_name_made_valid_never_takes_a_valid_name_given_later(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # "my server" reads as my-server, which a later entry is called: that one keeps it (its
    # tools keep their names) and the renamed one takes the suffix.
    source = tmp_path / "claude_desktop_config.json"
    source.write_text(json.dumps({"mcpServers": {
        "my server": {"command": "a"}, "my-server": {"command": "b"},
        "日本語": {"command": "c"}, "server": {"command": "d"},
    }}))  # fmt: skip
    code, out, err = do_import(capsys, source)
    assert code == 0, err
    assert {k: v.command for k, v in servers(parsed(out)).items()} == {
        "my-server-2": "a",
        "my-server": "b",
        "server-2": "c",
        "server": "d",
    }


def test_same_inputs_same_bytes(capsys: pytest.CaptureFixture[str]) -> None:
    every = [DESKTOP, CODE_PROJECT, CODE_USER, CURSOR, VSCODE, CODEX]
    code, first, first_err = do_import(capsys, *every)
    assert code == 0
    code, second, second_err = do_import(capsys, *every)
    assert (first, first_err) == (second, second_err)
    assert len(parsed(first).servers) > 25


# --- escaping ----------------------------------------------------------------------------------


TRICKY = [
    "plain",
    'quote " and backslash \\ and \\"',
    "line\nbreak\tand tab\rcarriage",
    "bell\x07 null\x00 escape\x1b del\x7f",
    "unicode é 数据 😀 \u2028",
    "c1 \x85 csi \x9b[31m bidi \u202e reversed \u2066 isolate \u200f mark \u200b zero-width \U000e0041 tag",
    "literal ${HOME} and ${",
    "already $${escaped} and $$ and $",
    "${}${x${y}}",
    "trailing $",
]


def test_strings_round_trip_through_toml_and_expansion(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Claude Desktop values are literal: whatever they hold, prefixgate passes exactly that on
    (but NUL, which no process's command line or environment can hold: that entry is skipped,
    saying why, where it used to be written and then fail to start with "embedded null byte")."""
    config = {
        "mcpServers": {
            f"s{i}": {"command": "cmd" + value, "args": [value], "env": {"K " + value: value}}
            for i, value in enumerate(TRICKY)
        }
    }
    path = tmp_path / "claude_desktop_config.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    code, out, err = do_import(capsys, path)
    assert code == 0, err
    s = servers(parsed(out, env={}))
    for i, value in enumerate(TRICKY):
        if "\x00" in value:
            assert f"s{i}" not in s and f'skipped: "s{i}"' in err and "contains a NUL character" in err
            continue
        server = s[f"s{i}"]
        assert server.command == "cmd" + value
        assert server.args == (value,)
        assert dict(server.env) == {"K " + value: value}


@pytest.mark.parametrize("value", TRICKY)
def test_toml_string_is_valid_and_exact(value: str) -> None:
    written = toml_string(value)
    assert tomllib.loads(f"v = {written}")["v"] == value
    # what a terminal or an editor would act on (a C1 CSI, a bidi override, a line separator) is escaped
    unseen = [ch for ch in written if unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp")]
    assert not unseen, unseen
    assert expand("x", escape_literal(value), {}) == value


def test_names_from_the_files_are_printed_with_c1_controls_escaped_as_c0_ones(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A server name or key holding U+009B (a terminal's CSI) or U+0085 was printed raw in the
    import's messages, and in the config's comments, where ESC (C0) was escaped: now both are
    written as ``\\u009b``, as ESC is (``\\u001b``)."""
    config = {
        "mcpServers": {
            "bad\x9b31m name\x1b": {"command": "x"},
            "s\x85": {"url": "ftp://example.com"},
        }
    }
    path = tmp_path / "claude_desktop_config.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    code, out, err = do_import(capsys, path)
    assert code == 0, err
    assert '"bad\\u009b31m name\\u001b"' in err and '"s\\u0085"' in err, err
    assert not any(0x80 <= ord(c) <= 0x9F or ord(c) < 0x20 and c != "\n" for c in err + out), (err, out)
    assert "\\u0085" in out


def test_dollar_before_a_reference_cannot_be_written(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / ".mcp.json"
    path.write_text(json.dumps({"mcpServers": {"a": {"command": "x", "args": ["$${HOME}"]}, "b": {"command": "y"}}}))
    code, out, err = do_import(capsys, path, APPROVE)
    assert code == 0
    assert 'skipped: "a"' in err and "a '$' right before a variable reference" in err
    assert set(servers(parsed(out))) == {"b"}


def test_claude_code_defaults_carry_over_but_a_nested_one_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / ".mcp.json"
    args = ["--port", "${PORT:-8080}", "--dir", "${DATA:-}", "--home", "${BASE:-${HOME}}"]
    path.write_text(json.dumps({"mcpServers": {"a": {"command": "srv", "args": args}}}))
    code, out, err = do_import(capsys, path, APPROVE)
    assert code == 0, err
    # ${BASE:-${HOME}} reads as Claude Code reads it: ${BASE:-${HOME} (the default dropped), then "}".
    assert 'args = ["--port", "${PORT:-8080}", "--dir", "${DATA:-}", "--home", "${BASE}}"]' in out
    assert "${BASE:-...} has a default with a '$' in it (a nested reference)" in err
    assert "PORT" not in err and "DATA" not in err
    assert servers(parsed(out, {"BASE": "/b"}))["a"].args == ("--port", "8080", "--dir", "", "--home", "/b}")
    assert servers(parsed(out, {"BASE": "/b", "PORT": "1"}))["a"].args[1] == "1"


def test_an_entry_prefixgate_would_refuse_is_skipped_with_the_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A header value with a trailing space, a header name with a space: copied as they were,
    the printed config would not load (exit 2, every server down); the entry is skipped, naming
    why, and the rest loads."""
    path = tmp_path / ".mcp.json"
    remote = {"type": "http", "url": "https://mcp.example.com/mcp"}
    path.write_text(
        json.dumps(
            {
                "mcpServers": {
                    "docs": {**remote, "headers": {"X-Team": "platform "}},
                    "named": {**remote, "headers": {"X Team": "platform"}},
                    "local": {"command": "srv"},
                }
            }
        )
    )
    code, out, err = do_import(capsys, path, APPROVE)
    assert code == 0
    assert (
        f'skipped: "docs" ({path}: mcpServers["docs"]): prefixgate would refuse it: headers.X-Team: invalid header '
        "value: control characters (CR, LF, NUL...) or leading/trailing whitespace (the value is not shown)"
    ) in err
    assert f'skipped: "named" ({path}: mcpServers["named"]): prefixgate would refuse it: headers.X Team: ' in err
    assert set(servers(parsed(out))) == {"local"}
    parse_config(tomllib.loads(out), env={})  # it loads


# --- files: --out, --from, bad input ------------------------------------------------------


def test_out_refuses_to_overwrite_without_force(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "prefixgate.toml"
    code, out, err = do_import(capsys, CURSOR, "--out", target)
    assert (code, out) == (0, "")
    assert stat.S_IMODE(target.stat().st_mode) == 0o600  # it may hold literal secrets
    written = target.read_text()
    assert set(servers(parsed(written))) == {"context7", "linear", "supabase", "puppeteer", "notes"}
    target.write_text("# mine\n")
    code, out, err = do_import(capsys, CODEX, "--out", target)
    assert code == 2 and out == ""
    assert err == f"prefixgate import: {target} already exists; pass --force to overwrite it\n"
    assert target.read_text() == "# mine\n"
    code, _, err = do_import(capsys, CODEX, "--out", target, "--force")
    assert code == 0, err
    assert "(Codex CLI)" in target.read_text()


def test_out_with_force_writes_through_a_symlink(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A config kept in a dotfiles repository and linked into place: ``--force`` replaced the
    link with a file of its own, leaving the repository's copy as it was (and the link gone)."""
    (tmp_path / "dotfiles").mkdir()
    real = tmp_path / "dotfiles" / "prefixgate.toml"
    real.write_text("# mine\n")
    (tmp_path / "conf").mkdir()
    link = tmp_path / "conf" / "prefixgate.toml"
    link.symlink_to(real)
    code, out, err = do_import(capsys, CODEX, "--out", link)
    assert code == 2 and real.read_text() == "# mine\n"
    code, _, err = do_import(capsys, CODEX, "--out", link, "--force")
    assert code == 0, err
    assert link.is_symlink() and link.resolve() == real.resolve()
    assert "(Codex CLI)" in real.read_text()
    assert [p.name for p in link.parent.iterdir()] == [p.name for p in real.parent.iterdir()] == ["prefixgate.toml"]


def _limited_to(size: int) -> None:
    """In the child: files it writes may not grow past ``size`` bytes (a write past it fails
    with EFBIG, as on a full disk, instead of killing it)."""
    import resource
    import signal

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))


@pytest.mark.parametrize("force", [False, True])
def test_a_failed_write_leaves_nothing_half_written(tmp_path: Path, force: bool) -> None:
    """A write that fails midway (a full disk; here a file size limit) is one line and exit 2,
    and leaves neither a truncated config, which a second run would refuse to overwrite, nor a
    temporary file; with ``--force`` the file it would replace is kept whole."""
    source = tmp_path / "config.toml"
    source.write_text(f'[mcp_servers.a]\ncommand = "npx"\nargs = ["-y", "{"x" * 9000}"]\n')
    out = tmp_path / "out" / "prefixgate.toml"
    out.parent.mkdir()
    if force:
        out.write_text("# mine\n")
    argv = [sys.executable, "-m", "gateway", "import", str(source), "--out", str(out), *(["--force"] if force else [])]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60, preexec_fn=lambda: _limited_to(4096))
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr == f"prefixgate import: {out}: cannot write: File too large\n"
    assert [p.name for p in out.parent.iterdir()] == (["prefixgate.toml"] if force else [])
    if force:
        assert out.read_text() == "# mine\n"


def test_from_reads_the_usual_locations(_home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                         monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    project = tmp_path / "project"
    (project / ".cursor").mkdir(parents=True)
    monkeypatch.chdir(project)
    (_home / ".cursor").mkdir()
    shutil.copy(CURSOR, _home / ".cursor" / "mcp.json")
    (project / ".cursor" / "mcp.json").write_text(json.dumps({"mcpServers": {"local": {"command": "srv"}}}))
    code, out, err = do_import(capsys, "--from", "cursor")
    assert code == 0, err
    assert f"note: reading {_home / '.cursor' / 'mcp.json'} (Cursor)" in err
    assert "local" in servers(parsed(out)) and "supabase" in servers(parsed(out))

    shutil.copy(CODE_USER, _home / ".claude.json")
    code, out, err = do_import(capsys, "--from", "claude-code")
    assert code == 0 and "github-2" in servers(parsed(out))

    (_home / ".codex").mkdir()
    shutil.copy(CODEX, _home / ".codex" / "config.toml")
    code, out, _ = do_import(capsys, "--from", "codex")
    assert code == 0 and "figma" in servers(parsed(out))

    code, out, err = do_import(capsys, "--from", "claude-desktop")
    assert code == 2 and out == ""
    assert err.startswith("prefixgate import: no Claude Desktop config found (looked in: ") and err.count("\n") == 1


def test_default_paths_per_platform(tmp_path: Path) -> None:
    env = {"HOME": "/Users/alice"}
    cwd = Path("/work/p")
    assert default_paths("claude-desktop", env, cwd, "darwin") == [
        Path("/Users/alice/Library/Application Support/Claude/claude_desktop_config.json")
    ]
    assert default_paths("claude-desktop", env, cwd, "linux") == [
        Path("/Users/alice/.config/Claude/claude_desktop_config.json")
    ]
    assert default_paths("claude-desktop", {**env, "XDG_CONFIG_HOME": "/x"}, cwd, "linux") == [
        Path("/x/Claude/claude_desktop_config.json")
    ]
    assert default_paths("claude-code", env, cwd, "linux") == [
        Path("/Users/alice/.claude.json"), Path("/work/p/.mcp.json")
    ]  # fmt: skip
    assert default_paths("vscode", env, cwd, "darwin")[0] == Path(
        "/Users/alice/Library/Application Support/Code/User/mcp.json"
    )
    assert default_paths("vscode", env, cwd, "linux")[-1] == Path("/work/p/.vscode/mcp.json")
    assert default_paths("codex", {**env, "CODEX_HOME": "/c"}, cwd, "linux") == [
        Path("/c/config.toml"), Path("/work/p/.codex/config.toml")
    ]  # fmt: skip
    assert default_paths("cursor", env, Path("/Users/alice"), "linux") == [Path("/Users/alice/.cursor/mcp.json")]


def test_gemini_cli_home_is_where_gemini_cli_keeps_its_user_settings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Gemini CLI keeps its user-wide .gemini in $GEMINI_CLI_HOME when it is set (documented for
    shared machines): --from gemini looked in $HOME/.gemini, found nothing or another user's file,
    and read the file there, as a project's, resolving its relative paths from that directory."""
    assert default_paths("gemini", {"HOME": "/home/a", "GEMINI_CLI_HOME": "/g"}, Path("/w"), "linux") == [
        Path("/g/.gemini/settings.json"), Path("/w/.gemini/settings.json")
    ]  # fmt: skip
    gemini_home = tmp_path / "gemini-home"
    (gemini_home / ".gemini").mkdir(parents=True)
    servers_ = {"time": {"command": "mcp-server-time"}, "local": {"command": "python3", "args": ["server.py"]}}
    (gemini_home / ".gemini" / "settings.json").write_text(json.dumps({"mcpServers": servers_}))
    (gemini_home / "server.py").write_text("")
    (gemini_home / ".gemini" / "mcp-server-enablement.json").write_text(json.dumps({"time": {"enabled": False}}))
    monkeypatch.setenv("GEMINI_CLI_HOME", str(gemini_home))
    monkeypatch.chdir(tmp_path)
    code, out, err = do_import(capsys, "--from", "gemini")
    assert code == 0, err
    assert f"reading {gemini_home / '.gemini' / 'settings.json'} (Gemini CLI)" in err
    s = servers(parsed(out))
    assert s["time"].enabled is False and s["local"].cwd is None  # user-wide: not a project's file


@pytest.mark.parametrize("trust", [None, "untrusted", "trusted", "trusted-root", "flag"])
def test_a_codex_project_config_is_imported_enabled_only_where_codex_trusts_the_project(
    _home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, trust: str | None
) -> None:
    """Codex reads a project's .codex/config.toml only once the user trusted the project
    ([projects."<dir>"] trust_level = "trusted" in ~/.codex/config.toml, for the directory or
    its git root): a cloned repository can name any command there. 'import --from codex' run
    inside one imported its servers enabled, so prefixgate started what Codex never would."""
    repo = tmp_path / "repo"
    project = repo / "sub"
    (repo / ".git").mkdir(parents=True)
    (project / ".codex").mkdir(parents=True)
    (project / ".codex" / "config.toml").write_text('[mcp_servers.tool]\ncommand = "curl-and-run"\n')
    user = '[mcp_servers.time]\ncommand = "mcp-server-time"\n'
    if trust in ("untrusted", "trusted"):
        user += f"\n[projects.{toml_string(str(project))}]\ntrust_level = {toml_string(trust)}\n"
    elif trust == "trusted-root":
        user += f'\n[projects.{toml_string(str(repo))}]\ntrust_level = "trusted"\n'
    (_home / ".codex").mkdir()
    (_home / ".codex" / "config.toml").write_text(user)
    monkeypatch.chdir(project)
    code, out, err = do_import(capsys, "--from", "codex", *([APPROVE] if trust == "flag" else []))
    assert code == 0, err
    s = servers(parsed(out))
    assert s["time"].enabled is True
    trusted = trust in ("trusted", "trusted-root", "flag")
    assert s["tool"].enabled is trusted
    assert ("servers.tool.enabled: false: Codex reads a project's .codex/config.toml only once" in err) is not trusted


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([FIXTURES / "bad" / "truncated.json"], "truncated.json: not valid JSON: Expecting ',' delimiter at line 8"),
        ([FIXTURES / "bad" / "array.json"], "array.json: expected a JSON object at the top level"),
        ([FIXTURES / "bad" / "missing.json"], "missing.json: cannot read: No such file or directory"),
        (["--from", "codex", DESKTOP], "claude_desktop_config.json: not valid TOML"),
        (["--from", "vscode", CODEX], "config.toml: not valid JSON"),
        ([], "give one or more PATHs, or --from CLIENT"),
    ],
)
def test_bad_input_exits_2_with_one_line(capsys: pytest.CaptureFixture[str], argv: list[Any], message: str) -> None:
    code, out, err = do_import(capsys, *argv)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("prefixgate import: ") and message in err


def test_bad_second_file_prints_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = do_import(capsys, CODEX, FIXTURES / "bad" / "array.json")
    assert code == 2 and out == "" and err.count("\n") == 1


def test_wrong_shapes_are_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "x.json"
    path.write_text(json.dumps({"mcpServers": ["a"]}))
    code, _, err = do_import(capsys, path)
    assert code == 2 and err == f"prefixgate import: {path}: mcpServers: expected an object of servers, found a list\n"
    path.write_text(json.dumps({"mcpServers": {}}))
    code, _, err = do_import(capsys, path)
    assert code == 2 and err.endswith(f"no MCP servers found in {path}\n")


@pytest.mark.parametrize("argv", [[], ["--from", "codex"]])
def test_a_prefixgate_config_given_is_named_as_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    """The config an import wrote, given back to it (to add a client's new servers to it), was
    taken for a Codex config and refused as 'no MCP servers found', after a note that it has no
    [mcp_servers] tables: neither says what the file is."""
    code, written, _ = do_import(capsys, DESKTOP)
    assert code == 0
    path = tmp_path / "prefixgate.toml"
    path.write_text(written)
    code, out, err = do_import(capsys, *argv, path)
    assert code == 2 and out == ""
    assert err == (
        f"prefixgate import: {path}: is a prefixgate config ([servers] tables), not a client's: prefixgate reads "
        "it as it is (check it with prefixgate catalog --config FILE)\n"
    )


def test_untranslatable_entries_are_listed_never_dropped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / ".mcp.json"
    path.write_text(json.dumps({"mcpServers": {
        "ok": {"command": "srv"},
        "neither": {"env": {"A": "1"}},
        "both": {"command": "srv", "url": "https://x/mcp"},
        "ws": {"type": "ws-ide", "url": "ws://127.0.0.1:1/"},
        "notobj": "npx srv",
        "badargs": {"command": "srv", "args": "--flag"},
        "ftp": {"type": "http", "url": "ftp://x/"},
        "nocmd": {"type": "stdio", "url": "https://x/mcp"},
    }}))  # fmt: skip
    code, out, err = do_import(capsys, path, APPROVE)
    assert code == 0, err
    assert set(servers(parsed(out))) == {"ok"}
    skipped = [line for line in err.splitlines() if ": skipped: " in line]
    assert [line.split('"')[1] for line in skipped] == ["neither", "both", "ws", "notobj", "badargs", "ftp", "nocmd"]
    for reason in (
        "has neither command (stdio) nor url",
        "has both command and url and no type saying which one Claude Code uses",
        "type 'ws-ide' is not a transport prefixgate speaks",
        "expected an object, found a string",
        "args: expected a list, found a string",
        "'ftp' URLs are not supported",
        "type is 'stdio' but there is no command",
    ):
        assert reason in err
    assert "7 skipped" in err.splitlines()[-2]  # before what comes next
    assert out.count('#   "') == 7


@pytest.mark.parametrize(
    "words",
    [
        ["/opt/venv/bin/prefixgate", "serve", "--config", "/home/alice/prefixgate.toml"],
        ["/usr/bin/python3", "-m", "gateway", "serve", "--config", "/home/alice/prefixgate.toml", "--profile", "p"],
        ["uvx", "prefixgate", "serve", "--config", "/home/alice/prefixgate.toml"],
        ["C:\\Tools\\PrefixGate.exe", "serve"],
    ],
)
@pytest.mark.parametrize("client", ["claude-code", "codex"])
def test_prefixgate_itself_registered_in_the_client_is_not_imported(
    _home: Path, capsys: pytest.CaptureFixture[str], words: list[str], client: str
) -> None:
    """Once prefixgate is registered as doctor's snippet says, importing from that client again
    (a server added there later) reads prefixgate's own entry: imported, it would start itself,
    which starts itself again, without end. It is listed as not imported, the others are."""
    if client == "claude-code":  # as 'claude mcp add --scope user' writes it
        registered = {"type": "stdio", "command": words[0], "args": words[1:], "env": {}}
        time = {"type": "stdio", "command": "mcp-server-time", "args": [], "env": {}}
        (_home / ".claude.json").write_text(json.dumps({"mcpServers": {"prefixgate": registered, "time": time}}))
    else:
        (_home / ".codex").mkdir()
        (_home / ".codex" / "config.toml").write_text(
            f"[mcp_servers.prefixgate]\ncommand = {toml_string(words[0])}\n"
            f"args = [{', '.join(toml_string(w) for w in words[1:])}]\n\n"
            '[mcp_servers.time]\ncommand = "mcp-server-time"\n'
        )
    code, out, err = do_import(capsys, "--from", client)
    assert code == 0, err
    assert set(servers(parsed(out))) == {"time"}
    assert f"it is prefixgate itself, as registered in {CLIENT_NAMES[client]}" in err
    assert "1 skipped" in err and '#   "prefixgate" (' in out


@pytest.mark.parametrize("url", ["https://gateway.example:8765/mcp", "http://127.0.0.1:8765/mcp/codex/"])
@pytest.mark.parametrize("client", ["claude-code", "codex"])
def test_prefixgate_itself_registered_over_http_is_imported_disabled(
    _home: Path, capsys: pytest.CaptureFixture[str], url: str, client: str
) -> None:
    """prefixgate registered over HTTP as docs/registering.md says (the entry prefixgate, at
    serve --http's /mcp or a profile's /mcp/NAME) was imported enabled: a gateway serving the
    config fronted itself, its own tools coming back renamed (prefixgate__prefixgate__...) over
    and over. It may be another gateway to front: it is imported disabled, saying why."""
    if client == "claude-code":  # as 'claude mcp add --transport http --scope user' writes it
        registered = {"type": "http", "url": url, "headers": {"Authorization": "Bearer ${PREFIXGATE_TOKEN}"}}
        time = {"type": "stdio", "command": "mcp-server-time", "args": [], "env": {}}
        (_home / ".claude.json").write_text(json.dumps({"mcpServers": {"prefixgate": registered, "time": time}}))
    else:
        (_home / ".codex").mkdir()
        (_home / ".codex" / "config.toml").write_text(
            f'[mcp_servers.prefixgate]\nurl = {toml_string(url)}\nbearer_token_env_var = "PREFIXGATE_TOKEN"\n\n'
            '[mcp_servers.time]\ncommand = "mcp-server-time"\n'
        )
    code, out, err = do_import(capsys, "--from", client)
    assert code == 0, err
    imported = servers(parsed(out))
    assert not imported["prefixgate"].enabled and imported["time"].enabled
    reason = f"prefixgate's own entry over HTTP, as registered in {CLIENT_NAMES[client]}"
    assert f"servers.prefixgate.enabled: false: {reason}" in err
    assert reason in out.split("[servers.prefixgate]")[1].split("enabled = false")[0]  # above the line
    assert "2 servers (1 enabled)" in err


def test_a_remote_server_named_prefixgate_elsewhere_is_imported_enabled(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": {"prefixgate": {"url": "https://docs.example.com/prefixgate/mcp"}}}))
    code, out, err = do_import(capsys, path)
    assert code == 0, err
    assert servers(parsed(out))["prefixgate"].enabled


def test_a_server_merely_named_prefixgate_or_serving_is_imported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "claude_desktop_config.json"
    path.write_text(json.dumps({"mcpServers": {
        "prefixgate": {"command": "npx", "args": ["-y", "prefixgate-docs-mcp"]},
        "web": {"command": "python", "args": ["-m", "http.server", "serve"]},
    }}))  # fmt: skip
    code, out, err = do_import(capsys, path)
    assert code == 0, err
    assert set(servers(parsed(out))) == {"prefixgate", "web"}


def test_a_url_without_a_scheme_is_refused_without_showing_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A URL written without its scheme (as a vendor's page shows it) was named whole as the
    'scheme' in the reason, on stderr and in the file's comments: with its key in the query."""
    secret = "sk_live_4eC39HqLyjWDarjtT1zdp7dc"
    path = tmp_path / "mcp.json"
    path.write_text(json.dumps({"mcpServers": {
        "pay": {"url": f"mcp.example.com/mcp?api_key={secret}"},
        "vault": {"type": "sse", "url": f"{secret}@vault.example.com/sse"},
        "ok": {"command": "srv"},
    }}))  # fmt: skip
    code, out, err = do_import(capsys, path)
    assert code == 0, err
    assert secret not in out and secret not in err
    assert err.count("url: has no scheme; prefixgate connects over http:// and https:// (write one)") == 2
    assert "2 skipped" in err


def test_a_number_is_written_as_a_string_without_printing_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A value written as a JSON number (Telegram's API hash, a PIN) was echoed on stderr in the
    note saying it became a string: a secret printed, which the import never does."""
    path = tmp_path / "claude_desktop_config.json"
    secret = 83917264519283746501928
    path.write_text(json.dumps({"mcpServers": {"bot": {"command": "tg-mcp", "args": ["--pin", 9876543],
                                                       "env": {"TELEGRAM_API_HASH": secret}}}}))  # fmt: skip
    code, out, err = do_import(capsys, path)
    assert code == 0, err
    s = servers(parsed(out))["bot"]
    assert s.args == ("--pin", "9876543") and s.env["TELEGRAM_API_HASH"] == str(secret)
    assert str(secret) not in err and "9876543" not in err
    assert "servers.bot.env.TELEGRAM_API_HASH: a number: written as a string" in err


def test_nothing_importable_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / ".mcp.json"
    path.write_text(json.dumps({"mcpServers": {"x": {"args": []}}}))
    code, out, err = do_import(capsys, path)
    assert code == 2 and out == ""
    assert (
        'skipped: "x"' in err and err.splitlines()[-1] == f"prefixgate import: no server could be imported from {path}"
    )


def test_directory_argument_finds_project_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / ".vscode").mkdir()
    shutil.copy(VSCODE, tmp_path / ".vscode" / "mcp.json")
    shutil.copy(CODE_PROJECT, tmp_path / ".mcp.json")
    code, out, err = do_import(capsys, tmp_path)
    assert code == 0, err
    assert "(Claude Code)" in out and "(VS Code)" in out
    assert servers(parsed(out))["my-python-server"].command == f"{tmp_path}/.venv/bin/python"


# --- end to end ------------------------------------------------------------------------


def test_imported_config_runs_catalog(tmp_path: Path) -> None:
    """Import (python -m gateway.commands.importer), then `prefixgate catalog` on the result."""
    project = tmp_path / "project"
    project.mkdir()
    template = (FIXTURES / "demo" / ".mcp.json").read_text()
    (project / ".mcp.json").write_text(template.replace("@PYTHON@", json.dumps(sys.executable)[1:-1]))
    out_file = tmp_path / "prefixgate.toml"
    env = {**os.environ, "HOME": str(tmp_path), "XDG_STATE_HOME": str(tmp_path / "state"), "GITHUB_TOKEN": "t"}
    imported = subprocess.run(
        [sys.executable, "-m", "gateway.commands.importer", str(project), APPROVE, "--out", str(out_file)],
        check=False, capture_output=True, text=True, env=env, timeout=60, cwd=Path(__file__).parent.parent,
    )  # fmt: skip
    assert imported.returncode == 0, imported.stderr
    assert "2 enabled" in imported.stderr
    catalog = subprocess.run(
        [sys.executable, "-m", "gateway", "catalog", "--config", str(out_file), "--json", "--log-level", "warning"],
        check=False, capture_output=True, text=True, env=env, timeout=60, cwd=Path(__file__).parent.parent,
    )  # fmt: skip
    assert catalog.returncode == 0, catalog.stderr
    report = json.loads(catalog.stdout)
    status = {s["id"]: s["status"] for s in report["servers"]}
    assert status == {"docs": "disabled", "github": "ready", "tickets": "ready"}
    names = [t["name"] for t in report["tools"]]
    assert any(n.startswith("github__") for n in names) and any(n.startswith("tickets__") for n in names)


def test_from_with_a_broken_file_is_one_line(_home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (_home / ".claude.json").write_text('{"mcpServers": {')
    code, out, err = do_import(capsys, "--from", "claude-code")
    assert code == 2 and out == ""
    assert err == (
        f"prefixgate import: {_home / '.claude.json'}: not valid JSON: "
        "Expecting property name enclosed in double quotes at line 1 column 17\n"
    )


def test_the_same_file_twice_is_read_once(tmp_path: Path) -> None:
    """Named directly, through its folder and through a symlink: one source, no self-merge,
    one ``# from`` comment per server, and a note naming the other spelling of the same file."""
    from tests.helpers import run_cli

    project = tmp_path / "project"
    project.mkdir()
    mcp = project / ".mcp.json"
    mcp.write_text(json.dumps({"mcpServers": {"memory": {"command": "npx", "args": ["-y", "m"]}}}))
    (tmp_path / "link.json").symlink_to(mcp)
    once = run_cli("import", str(mcp))
    proc = run_cli("import", str(mcp), str(project), str(tmp_path / "link.json"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == once.stdout
    assert proc.stdout.count("# from ") == 1
    assert "from 1 file; 0 skipped, 0 renamed, 0 merged" in proc.stderr and "identical to" not in proc.stderr
    assert f"{tmp_path / 'link.json'} is the same file as {mcp}; read once" in proc.stderr


def test_a_codex_tool_timeout_past_the_default_maximum_raises_the_maximum_too(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """Codex's ``tool_timeout_sec`` becomes ``call_timeout``; one over the default
    ``max_call_time`` (an hour) takes that with it, so the config it writes loads."""
    source = tmp_path / "config.toml"
    source.write_text(
        '[mcp_servers.build]\ncommand = "make-mcp"\ntool_timeout_sec = 7200\n'
        '[mcp_servers.lint]\ncommand = "lint-mcp"\ntool_timeout_sec = 90\n'
    )
    code, out, err = do_import(capsys, source, "--from", "codex")
    assert code == 0, err
    s = servers(parsed(out))
    assert (s["build"].call_timeout, s["build"].max_call_time) == (7200, 7200)
    assert (s["lint"].call_timeout, s["lint"].max_call_time) == (90, 3600)
    assert "max_call_time" not in tomllib.loads(out)["servers"]["lint"]


@pytest.mark.parametrize(
    ("fmt", "name", "text"),
    [
        (
            "claude-code",
            ".mcp.json",
            {
                "mcpServers": {
                    "notion": {
                        "type": "http",
                        "url": "https://mcp.notion.com/mcp",
                        "oauth": {"clientId": "cc-client", "callbackPort": 8123},
                    }
                }
            },
        ),
        (
            "cursor",
            "mcp.json",
            {
                "mcpServers": {
                    "notion": {
                        "url": "https://mcp.notion.com/mcp",
                        "auth": {
                            "CLIENT_ID": "cu-client",
                            "CLIENT_SECRET": "cu-secret-value-1234",
                            "scopes": ["read", "write"],
                        },
                    }
                }
            },
        ),
        ("vscode", "mcp.json", {"servers": {"notion": {"type": "http", "url": "https://mcp.notion.com/mcp"}}}),
        (
            "codex",
            "config.toml",
            '[mcp_servers.notion]\nurl = "https://mcp.notion.com/mcp"\nscopes = ["read", "write"]\n'
            'oauth_resource = "https://mcp.notion.com"\n',
        ),
    ],
)
def test_oauth_entries_become_auth_oauth(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, fmt: str, name: str, text: Any
) -> None:
    source = tmp_path / name
    source.write_text(text if isinstance(text, str) else json.dumps(text))
    code, out, err = do_import(capsys, source, "--from", fmt, APPROVE)
    assert code == 0, err
    notion = servers(parsed(out, env={**ENV, "NOTION_CLIENT_SECRET": "s"}))["notion"]
    assert notion.auth == "oauth"
    assert "not imported: prefixgate runs no OAuth flow" not in err
    assert "run prefixgate login" in err
    if fmt == "claude-code":
        assert (notion.client_id, notion.redirect_port) == ("cc-client", 8123)
    if fmt == "cursor":
        assert (notion.client_id, notion.scopes) == ("cu-client", ("read", "write"))
        assert tomllib.loads(out)["servers"]["notion"]["client_secret"] == "${NOTION_CLIENT_SECRET}"
        assert "cu-secret-value-1234" not in out + err
    if fmt == "codex":
        assert notion.scopes == ("read", "write")


def test_oauth_settings_prefixgate_has_no_key_for_are_reported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Gemini CLI's oauth object also names the endpoints (authorizationUrl, tokenUrl) and a
    redirectUri, which prefixgate's login cannot take: they were dropped without a word, and the
    login then failed or went elsewhere, unexplained. Each is named; what carries over, does."""
    path = tmp_path / ".gemini" / "settings.json"
    path.parent.mkdir()
    oauth = {
        "enabled": True,
        "clientId": "abc",
        "authorizationUrl": "https://auth.example.com/authorize",
        "tokenUrl": "https://auth.example.com/token",
        "redirectUri": "http://localhost:7777/oauth/callback",
        "scopes": ["read"],
    }
    path.write_text(json.dumps({"mcpServers": {"api": {"httpUrl": "https://api.example.com/mcp", "oauth": oauth}}}))
    code, out, err = do_import(capsys, path, APPROVE)
    assert code == 0, err
    s = servers(parsed(out))["api"]
    assert (s.auth, s.client_id, s.scopes) == ("oauth", "abc", ("read",))
    reported = [line.split(": ")[2] for line in err.splitlines() if "not imported" in line]
    assert reported == [
        "servers.api.oauth.authorizationUrl",
        "servers.api.oauth.tokenUrl",
        "servers.api.oauth.redirectUri",
    ]
    assert "redirectUri: not imported: prefixgate takes the code on http://127.0.0.1:PORT/callback" in err


def test_a_remote_entry_with_its_own_authorization_header_stays_as_it_is(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    source = tmp_path / "mcp.json"
    entry = {"type": "http", "url": "https://x.example/mcp", "headers": {"Authorization": "Bearer ${TOKEN}"}}
    source.write_text(json.dumps({"servers": {"x": entry}}))
    code, out, err = do_import(capsys, source, "--from", "vscode")
    assert code == 0, err
    assert servers(parsed(out, env={**ENV, "TOKEN": "t"}))["x"].auth is None
