"""The gateway under a locale whose encoding is not UTF-8 (``LC_ALL=C PYTHONUTF8=0``: Python then
encodes names, arguments and its standard streams as ASCII), with non-ASCII names in the config."""

from __future__ import annotations

import json
import re
import stat
from pathlib import Path

import pytest

from tests.helpers import ASCII_LOCALE, ERAS, PYTHON, demo, read_artifact, run_cli, sdk_client, text, write_config

ARTIFACT = re.compile(r"saved as artifact ([A-Za-z0-9_-]+);")


def test_a_non_ascii_state_dir_is_the_directory_of_that_utf8_name(tmp_path: Path) -> None:
    """Every command stopped on a traceback at its first file (``UnicodeEncodeError: 'ascii'
    codec can't encode character '\\xe9'``)."""
    state = tmp_path / "état"
    config = write_config(tmp_path, {"d": demo("--tools", 1)}, gateway={"state_dir": str(state)})
    proc = run_cli("catalog", "--config", str(config), "--json", "--log-level", "warning", env=ASCII_LOCALE)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["servers"][0]["status"] == "ready"
    assert stat.S_IMODE(state.stat().st_mode) == 0o700 and (state / "warm").is_dir()


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ERAS)
async def test_serve_spills_into_a_non_ascii_state_dir(tmp_path: Path, mode: str) -> None:
    state = tmp_path / "état"
    config = write_config(tmp_path, {"d": demo("--tools", 1)}, gateway={"state_dir": str(state)})
    async with sdk_client(config, mode, env=ASCII_LOCALE, log_level="warning") as client:
        assert text(await client.call_tool("d__echo", {"text": "héllo ✓"})) == "héllo ✓"
        spilled = text(await client.call_tool("d__payload", {"bytes": 100_000}))
        found = ARTIFACT.search(spilled)
        assert found, spilled[-300:]
        assert len(await read_artifact(client, found.group(1))) == 100_000
    (artifact,) = (p for p in (state / "artifacts").rglob("*") if p.is_file() and p.stat().st_size == 100_000)
    assert stat.S_IMODE(artifact.stat().st_mode) == 0o600


def test_commands_name_a_non_ascii_state_dir_on_their_output(tmp_path: Path) -> None:
    """``catalog history`` stopped on a traceback as it printed its file
    (``'utf-8' codec can't encode characters: surrogates not allowed``): piped, it is its bytes."""
    state = tmp_path / "état"
    config = write_config(tmp_path, {"d": demo("--tools", 1)}, gateway={"state_dir": str(state)})
    proc = run_cli("catalog", "history", "--config", str(config), env=ASCII_LOCALE)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == f"no epoch recorded in {state / 'history' / 'default.jsonl'} yet (serve records them)\n"


def test_a_servers_stderr_line_is_logged_as_utf8(tmp_path: Path) -> None:
    """A client starting the server itself keeps its stderr's UTF-8; the gateway's log, not a
    terminal, wrote it ``d\\xe9marrage \\u2713``."""
    said = "import sys; sys.stderr.write('démarrage ✓\\n'); sys.exit(3)"
    config = write_config(tmp_path, {"b": {"command": PYTHON, "args": ["-c", said]}})
    proc = run_cli("catalog", "--config", str(config), "--log-level", "warning", env=ASCII_LOCALE)
    assert "[b] failed: exited during start-up (exit status 3); stderr: démarrage ✓\n" in proc.stderr, proc.stderr


def test_a_config_error_names_a_non_ascii_config_as_it_is_spelled(tmp_path: Path) -> None:
    """The name was shown as Python holds a name the locale cannot decode: ``bad \\udcc3\\udcbc.toml``."""
    config = tmp_path / "bad ü.toml"
    config.write_text("x = \n")
    proc = run_cli("catalog", "--config", str(config), env=ASCII_LOCALE)
    assert (proc.returncode, proc.stderr) == (
        2,
        f"prefixgate: config error: config {config} is not valid TOML: Invalid value (at line 1, column 5)\n",
    )


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ERAS)
async def test_serve_logs_a_non_ascii_path_as_it_is_spelled(tmp_path: Path, mode: str) -> None:
    """A path the locale could not decode (Python holds it with lone surrogates) was logged as
    their escapes: ``state store: file /…/\\udcc3\\udca9tat``, a name no one can find or paste."""
    state = tmp_path / "état"
    config = write_config(tmp_path, {"d": demo("--tools", 1)}, gateway={"state_dir": str(state)})
    errlog = tmp_path / "serve.log"
    async with sdk_client(config, mode, env=ASCII_LOCALE, errlog=errlog) as client:
        assert text(await client.call_tool("d__echo", {"text": "héllo ✓"})) == "héllo ✓"
    log = errlog.read_bytes()
    assert f"state store: file {state}\n".encode() in log, log[-2000:]
    assert b"\\udc" not in log, log[-2000:]
