"""Claude Code and Claude Desktop show a tool to the model as ``mcp__<entry>__<tool>`` and
reject a name over 64 characters *with* that wrapper: the ``claude-code`` / ``claude-desktop``
profiles count it (``[client] entry`` naming the registered entry), so every published name
fits once wrapped, and ``doctor --client`` checks the same."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from catalog.names import PROFILES, SUFFIX_HEX, suffix_hash
from tests.helpers import GATEWAY, catalog_json, demo, gateway, write_config

TOOL = "summarise_the_pull_request_review_comments_by_file"  # 50 characters
PLAIN = "d__" + TOOL  # 53: fits openai's 64 ...
WRAPPED = "mcp__prefixgate__" + PLAIN  # ... but not once wrapped: 70

pytestmark = pytest.mark.anyio


def config(directory: Path, **client: str) -> Path:
    directory.mkdir(exist_ok=True)
    return write_config(directory, {"d": demo("--tools", 1, "--extra-tool", TOOL)}, client=client)


def doctor(config: Path, *args: str) -> subprocess.CompletedProcess[str]:
    argv = [*GATEWAY, "doctor", "--config", str(config), "--json", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, cwd=config.parent)


def test_the_wrapper_is_counted_in_the_name_length() -> None:
    assert len(PLAIN) == 53 and len(WRAPPED) == 70
    for name in ("claude-code", "claude-desktop"):
        profile = PROFILES[name]
        assert profile.wrapped("x", "prefixgate") == "mcp__prefixgate__x"
        assert profile.for_entry("prefixgate").max_len == 64 - len("mcp__prefixgate__")
        assert profile.for_entry("pg").max_len == 64 - len("mcp__pg__")
    assert PROFILES["openai"].for_entry("prefixgate") is PROFILES["openai"]


async def test_a_name_that_fits_plain_is_shortened_once_wrapped_and_still_routes(tmp_path: Path) -> None:
    plain = {t["original"]: t["name"] for t in catalog_json(config(tmp_path / "a", profile="openai"))["tools"]}
    assert plain[TOOL] == PLAIN
    wrapped_config = config(tmp_path / "b", profile="claude-code")
    report = catalog_json(wrapped_config)
    names = {t["original"]: t["name"] for t in report["tools"]}
    room = 64 - len("mcp__prefixgate__")
    expected = PLAIN[: room - SUFFIX_HEX - 1] + "_" + suffix_hash("d", TOOL)
    assert names[TOOL] == expected and len("mcp__prefixgate__" + expected) == 64
    assert catalog_json(wrapped_config)["fingerprint"] == report["fingerprint"]  # deterministic
    assert all(len("mcp__prefixgate__" + d["name"]) <= 64 for d in report["declarations"])
    assert any(w["kind"] == "renamed" and "too long" in w["detail"] for w in report["warnings"])
    async with gateway(wrapped_config) as gw:
        listed = {t.name for t in (await gw.session.list_tools()).tools}
        assert expected in listed and PLAIN not in listed
        result = await gw.session.call_tool(expected, {})
        assert not result.is_error and result.content[0].text == f"demo:{TOOL}"
    # A short entry leaves room: the same tool keeps its plain name.
    short = catalog_json(config(tmp_path / "c", profile="claude-desktop", entry="pg"))
    assert {t["original"]: t["name"] for t in short["tools"]}[TOOL] == PLAIN


def test_an_entry_that_leaves_no_room_is_a_config_error(tmp_path: Path) -> None:
    path = config(tmp_path, profile="claude-code", entry="x" * 45)
    proc = subprocess.run([*GATEWAY, "catalog", "--config", str(path)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "client.entry: too long for profile claude-code" in proc.stderr, proc.stderr


def test_doctor_checks_names_as_the_client_wraps_them(tmp_path: Path) -> None:
    plain = doctor(config(tmp_path / "a", profile="openai"), "--client", "claude-code")
    assert plain.returncode == 1, plain.stderr
    report = json.loads(plain.stdout)
    assert report["wrapped_names"]["too_long"] == [PLAIN]
    warn = [c for c in report["checks"] if c["verdict"] == "warn" and "mcp__prefixgate__<name>" in c["message"]]
    assert len(warn) == 1 and 'profile = "claude-code"' in warn[0]["message"]
    assert warn[0]["details"] == [f"{WRAPPED} (70)"]
    # Cursor does not wrap: no such check.
    cursor = json.loads(doctor(config(tmp_path / "a", profile="openai"), "--client", "cursor").stdout)
    assert "wrapped_names" not in cursor
    # The wrapper-aware profile fits, and the snippet registers the entry the names were sized for.
    fitted = doctor(config(tmp_path / "b", profile="claude-code", entry="pg"), "--client", "claude-code")
    report = json.loads(fitted.stdout)
    assert report["wrapped_names"]["too_long"] == [] and report["wrapped_names"]["wrapper"] == "mcp__pg__"
    assert fitted.returncode == 0, fitted.stdout
    assert report["register"]["snippet"].startswith("claude mcp add --scope user pg -- ")
    desktop = json.loads(doctor(config(tmp_path / "b", profile="claude-code", entry="pg"), "--client",
                                "claude-desktop").stdout)  # fmt: skip
    assert list(json.loads(desktop["register"]["snippet"])["mcpServers"]) == ["pg"]


def test_gemini_wraps_as_mcp_entry_tool_in_63_characters(tmp_path: Path) -> None:
    """Gemini CLI shows a tool as ``mcp_<entry>_<tool>`` and cuts a name over 63 characters in
    the middle (two names can become one): doctor says so, and the ``gemini`` profile fits."""
    gemini = PROFILES["gemini"]
    assert gemini.wrapped("x", "prefixgate") == "mcp_prefixgate_x"
    assert gemini.for_entry("prefixgate").max_len == 63 - len("mcp_prefixgate_")
    plain = json.loads(doctor(config(tmp_path / "a", profile="openai"), "--client", "gemini").stdout)
    assert plain["wrapped_names"]["too_long"] == [PLAIN]
    (warn,) = [c for c in plain["checks"] if c["verdict"] == "warn" and "mcp_prefixgate_<name>" in c["message"]]
    assert "over 63 characters" in warn["message"] and "first and last 30 characters" in warn["message"]
    assert 'profile = "gemini"' in warn["message"] and warn["details"] == [f"mcp_prefixgate_{PLAIN} (68)"]
    fitted_config = config(tmp_path / "b", profile="gemini")
    fitted = doctor(fitted_config, "--client", "gemini")
    report = json.loads(fitted.stdout)
    assert fitted.returncode == 0, fitted.stdout
    assert report["wrapped_names"]["too_long"] == [] and report["wrapped_names"]["wrapper"] == "mcp_prefixgate_"
    names = {t["original"]: t["name"] for t in catalog_json(fitted_config)["tools"]}
    room = 63 - len("mcp_prefixgate_")
    assert names[TOOL] == PLAIN[: room - SUFFIX_HEX - 1] + "_" + suffix_hash("d", TOOL)
    assert list(json.loads(report["register"]["snippet"])["mcpServers"]) == ["prefixgate"]
