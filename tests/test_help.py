"""Help text a new user reads first: true (serve and demo-server also speak HTTP) and plain
(argparse prints it as is, so no reStructuredText or Markdown backticks)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.helpers import run_cli, sdk_imports

COMMANDS = (
    (),
    ("serve",),
    ("catalog",),
    ("catalog", "diff"),
    ("doctor",),
    ("import",),
    ("artifacts",),
    ("artifacts", "list"),
    ("artifacts", "read"),
    ("artifacts", "gc"),
    ("demo-server",),
)


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "prefixgate")
def test_help_is_plain_text(command: tuple[str, ...]) -> None:
    proc = run_cli(*command, "--help")
    assert proc.returncode == 0, proc.stderr
    assert "`" not in proc.stdout, proc.stdout


def test_serve_and_demo_server_say_they_also_serve_http() -> None:
    top = " ".join(run_cli("--help").stdout.split())
    assert "serve the gateway over stdio (default) or streamable HTTP" in top
    assert "demo MCP server (stdio, or HTTP/SSE" in top
    for command in ("serve", "demo-server"):
        text = run_cli(command, "--help").stdout
        description = " ".join(text.split("options:")[0].split())
        assert "HTTP" in description, f"{command} --help: {description}"


@pytest.mark.parametrize("action", ["list", "read", "gc"])
def test_each_artifacts_action_describes_itself(action: str) -> None:
    """Issue 31: ``artifacts list|read|gc --help`` say what each does, not only its options."""
    text = run_cli("artifacts", action, "--help").stdout
    description = " ".join(text.split("options:")[0].split("\n\n", 1)[1].split())
    assert len(description) > 40, text


def test_the_top_level_help_names_the_common_options() -> None:
    top = " ".join(run_cli("--help").stdout.split())
    assert "--log-level LEVEL" in top and "--config PATH" in top, top


def test_catalog_and_doctor_say_they_read_what_the_next_reload_publishes() -> None:
    for command in ("catalog", "doctor"):
        proc = run_cli(command, "--help")
        assert "what a running gateway publishes after its next reload" in " ".join(proc.stdout.split()), command
    serve = " ".join(run_cli("serve", "--help").stdout.split())
    assert "A changed config file is taken without a restart" in serve


def test_import_and_doctor_name_every_client_they_take() -> None:
    """``import --help`` named five of the six clients ``--from`` takes (not Gemini CLI), and
    ``doctor --help`` only Claude's wrapping of tool names, though ``--client gemini`` checks its own."""
    from gateway.commands.importer.sources import FORMATS

    names = {
        "claude-desktop": "Claude Desktop",
        "claude-code": "Claude Code",
        "vscode": "VS Code",
        "gemini": "Gemini CLI",
    }
    text = run_cli("import", "--help").stdout
    description = " ".join(text.split("positional arguments:")[0].split("\n\n", 1)[1].split())
    for client in FORMATS:
        assert names.get(client, client.capitalize()) in description, (client, description)
    doctor = " ".join(run_cli("doctor", "--help").stdout.split("options:")[0].split())
    assert "mcp_<entry>_<name>" in doctor, doctor


LIGHT = (
    ("--version",),
    ("--help",),
    ("doctor", "--help"),
    ("login", "--help"),
    ("artifacts", "list", "--config", "{config}"),
    ("catalog", "--config", "{bad}"),
    ("import", "--from", "claude-code", "{missing}"),
)
"""Command lines that never talk MCP: answered without importing the mcp SDK (0.6 s of CPU)."""


@pytest.mark.parametrize("argv", LIGHT, ids=lambda a: " ".join(a[:2]))
def test_commands_that_speak_no_mcp_never_import_the_sdk(argv: tuple[str, ...], tmp_path: Path) -> None:
    config = tmp_path / "prefixgate.toml"
    config.write_text(f"[gateway]\nstate_dir = {json.dumps(str(tmp_path / 'state'))}\n", encoding="utf-8")
    bad = tmp_path / "bad.toml"
    bad.write_text("[servers.x]\ncommand = 3\n", encoding="utf-8")
    args = [a.format(config=config, bad=bad, missing=tmp_path / "missing.json") for a in argv]
    assert sdk_imports(*args, timeout=60) == []


@pytest.mark.parametrize("timeout", ["nan", "inf", "-1", "0", "soon"])
def test_login_refuses_a_timeout_it_cannot_wait(timeout: str, tmp_path: Path) -> None:
    """``login --timeout nan`` started the flow and then stopped on a traceback from deep in its
    wait (``-1`` and ``0`` gave up at once): a usage error now, one line, exit 2."""
    config = tmp_path / "prefixgate.toml"
    config.write_text('[servers.r]\nurl = "http://127.0.0.1:9/mcp"\nauth = "oauth"\n')
    proc = run_cli("login", "r", "--config", str(config), "--timeout", timeout, "--no-browser")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == (
        f"prefixgate login: error: argument --timeout: expected a number of seconds greater than 0, got {timeout!r}"
    )
