"""An unset ``${VAR}`` in one server's table fails that server alone (status ``failed``, the
variable and the key in its reason, never a value, no retries) in ``serve``, ``catalog`` and
``doctor``; the gateway keeps serving the others. Real processes throughout."""

from __future__ import annotations

import json
import os
from pathlib import Path

import anyio
import pytest

from tests.helpers import catalog_json, demo, gateway, run_cli, write_config

pytestmark = pytest.mark.anyio

UNSET = "PG_Q2_UNSET_TOKEN"
"""Never set in a test's environment (each test checks)."""


def config_for(tmp_path: Path, *, required: bool = False) -> Path:
    assert UNSET not in os.environ
    bad = {**demo("--tools", 1, "--name", "bad"), "env": {"TOKEN": "Bearer ${" + UNSET + "}"}}
    if required:
        bad["required"] = True
    return write_config(tmp_path, {"bad": bad, "good": demo("--tools", 2, "--name", "good")})


async def test_serve_fails_only_that_server_and_never_retries_it(tmp_path: Path) -> None:
    async with gateway(config_for(tmp_path)) as gw:  # main: exit 2 before anything starts
        with anyio.fail_after(60):
            names = {t.name for t in (await gw.session.list_tools()).tools}
            assert "good__echo" in names and not any(n.startswith("bad__") for n in names), names
            assert not (await gw.session.call_tool("good__echo", {"text": "hi"})).is_error  # the others serve
            assert await gw.saw("[bad] failed: environment variable " + UNSET + " not set", "servers.bad.env.TOKEN")
    # Logged at once after a failure when a retry is due: nothing will change without a restart.
    assert "[bad] retrying" not in gw.stderr()


def test_catalog_reports_it_failed_with_the_variable_and_key(tmp_path: Path) -> None:
    report = catalog_json(config_for(tmp_path))  # main: exit 2, nothing on stdout
    by_id = {s["id"]: s for s in report["servers"]}
    assert by_id["good"]["status"] == "ready"
    bad = by_id["bad"]
    assert bad["status"] == "failed", bad
    assert UNSET in bad["error"] and "servers.bad.env.TOKEN" in bad["error"] and "Bearer" not in bad["error"]


def test_a_required_server_with_an_unset_variable_fails_like_any_required_server(tmp_path: Path) -> None:
    proc = run_cli("catalog", "--config", str(config_for(tmp_path, required=True)), "--json")
    assert proc.returncode == 1, proc.stderr  # a required server failed; not 2: the config is fine
    assert UNSET in proc.stderr and "required server 'bad'" in proc.stderr


def test_doctor_names_the_variable_and_the_snippet_lists_what_the_environment_must_carry(tmp_path: Path) -> None:
    config = config_for(tmp_path)
    text = config.read_text() + '\n[servers.remote]\nurl = "https://${PG_Q2_HOST}/mcp"\nenabled = false\n'
    config.write_text(text)
    proc = run_cli("doctor", "--config", str(config))
    assert proc.returncode == 1, proc.stdout + proc.stderr
    fail = [line for line in proc.stdout.splitlines() if line.strip().startswith("FAIL") and "bad:" in line]
    assert len(fail) == 1 and UNSET in fail[0] and "servers.bad.env.TOKEN" in fail[0], proc.stdout
    assert "good: ready" in proc.stdout
    assert f"must carry: {UNSET}" in proc.stdout  # a disabled server's variables are not needed
    assert f' -e {UNSET}="${UNSET}" -- ' in proc.stdout  # and the snippet passes it on (claude-code)
    assert f"copies these from the shell it is pasted in (set them there first): {UNSET}" in proc.stdout
    assert "PG_Q2_HOST" not in proc.stdout
    proc = run_cli("doctor", "--config", str(config), "--json")
    assert json.loads(proc.stdout)["register"]["variables"] == [UNSET]


def test_the_snippet_passes_on_what_the_gateway_table_references(tmp_path: Path) -> None:
    """A store password as ``${VAR}``: a client that passes its environment on only in part
    (Codex: ``env_vars``) started a gateway that exited 2 for the unset variable."""
    config = write_config(
        tmp_path, {"good": demo("--tools", 1)}, gateway={"store": "redis://:${PG_STORE_PW}@127.0.0.1:9/0"}
    )
    proc = run_cli("doctor", "--config", str(config), "--client", "codex", "--json", env={"PG_STORE_PW": "pw"})
    assert json.loads(proc.stdout)["register"]["variables"] == ["PG_STORE_PW"]
    assert 'env_vars = ["PG_STORE_PW"]' in json.loads(proc.stdout)["register"]["snippet"]


def test_the_codex_note_says_whether_the_warm_start_record_is_in_place(tmp_path: Path) -> None:
    """Codex starts without a server not listed after about a second: the note says the run
    left the record that answers at once, and only when it did (a catalog that does not build
    leaves none)."""
    (tmp_path / "good").mkdir()
    (tmp_path / "over").mkdir()
    good = write_config(tmp_path / "good", {"d": demo("--tools", 1)})
    over = write_config(tmp_path / "over", {"d": demo("--tools", 140)}, client={"declarations": "fixed"})
    notes = {}
    for name, config in (("good", good), ("over", over)):
        proc = run_cli("doctor", "--config", str(config), "--client", "codex", "--json")
        notes[name] = json.loads(proc.stdout)["register"]["note"]
    assert "This run left the warm-start record" in notes["good"]
    assert "This run could not leave the warm-start record" in notes["over"]
    assert not any((tmp_path / "over" / "state").glob("warm/*"))
