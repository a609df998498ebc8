"""prefixgate as the client under test of the conformance suite's *client* scenarios.

The suite starts its own test server (and, for ``auth/*`` scenarios, its own authorization
server) and runs ``python -m tests.conformance.client_under_test URL`` with
``MCP_CONFORMANCE_SCENARIO``, ``MCP_CONFORMANCE_PROTOCOL_VERSION`` and, for some scenarios,
``MCP_CONFORMANCE_CONTEXT`` (JSON) in the environment. The suite's test server is then a
*downstream* server of prefixgate, and what the suite checks is how prefixgate speaks to it.

This program does what a user does, and nothing that bypasses the gateway:

1. it writes a prefixgate config whose one server ``s`` is ``url = URL`` with ``prefix = ""``
   and the default ``protocol`` ("auto": ``server/discover`` finds a 2026-07-28 server, and a
   handshake-era one is initialized), as a user would;
2. for an ``auth/*`` scenario, ``auth = "oauth"`` with the pre-registered credentials from the
   context as ``${VAR}`` references, and runs ``python -m gateway login s --config PATH`` with
   ``$BROWSER`` set to ``stand_in_browser.py`` (it follows the authorization server's redirects
   to the loopback redirect URI, as a user's browser would);
3. it runs ``python -m gateway serve`` over stdio with the mcp SDK's ``Client`` in front (the
   same era as the scenario) and, through it, lists the tools and calls every one of them
   (arguments from the context's ``toolCalls`` when it names the tool, else the least the tool's
   schema requires), then lists and reads resources and lists and gets prompts.

The end client answers elicitation by accepting with the requested schema's defaults (as a
client's form does when the user changes nothing), sampling with a fixed text, roots with one root.
Exit status 0 when the gateway session ran (a tool that fails is the scenario's verdict to
draw, not this program's), 1 when the gateway could not be started or the session broke.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
from mcp import Client, StdioServerParameters

from tests.helpers import PYTHON, write_config

ROOT = Path(__file__).resolve().parent.parent.parent
HERE = Path(__file__).resolve().parent
LOG = logging.getLogger("client_under_test")
# The CIMD URL the suite's authorization servers expect as a URL-based client_id (auth/basic-cimd).
CLIENT_METADATA_URL = "https://conformance-test.local/client-metadata.json"
# The suite's handshake-era revisions; the end client speaks the scenario's era to the gateway too.
HANDSHAKE_ERAS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
STEP_TIMEOUT = 25.0


def server_table(url: str, scenario: str, context: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """``[servers.s]`` for this scenario, and the environment its ``${VAR}`` references need.

    No ``protocol`` key: the default ("auto") is what a user gets, and it must reach the suite's
    servers of both eras (``server/discover`` first, the handshake when that is not answered)."""
    table: dict[str, Any] = {"url": url, "prefix": "", "required": True}
    env: dict[str, str] = {}
    if scenario.startswith("auth/"):
        table["auth"] = "oauth"
        table["client_metadata_url"] = CLIENT_METADATA_URL
        if "client_id" in context:
            table["client_id"] = str(context["client_id"])
        if "client_secret" in context:
            env["CONFORMANCE_CLIENT_SECRET"] = str(context["client_secret"])
            table["client_secret"] = "${CONFORMANCE_CLIENT_SECRET}"
    return table, env


def stand_in_browser(directory: Path) -> str:
    """A ``$BROWSER`` command: Python's ``webbrowser`` runs it as one executable with the URL."""
    script = directory / "browser"
    script.write_text(
        f'#!/bin/sh\nexec {shlex.quote(sys.executable)} {shlex.quote(str(HERE / "stand_in_browser.py"))} "$@"\n'
    )
    script.chmod(0o700)
    return str(script)


def least_arguments(schema: Mapping[str, Any]) -> dict[str, Any]:
    """Arguments with only the schema's required properties, each its default, first enum value
    or a plain value of its type."""
    properties = schema.get("properties") or {}
    plain = {"string": "test", "integer": 1, "number": 1, "boolean": True, "array": [], "object": {}}
    arguments: dict[str, Any] = {}
    for name in schema.get("required") or []:
        prop = properties.get(name) or {}
        if "default" in prop:
            arguments[name] = prop["default"]
        elif prop.get("enum"):
            arguments[name] = prop["enum"][0]
        else:
            kind = prop.get("type")
            arguments[name] = plain.get(kind[0] if isinstance(kind, list) else kind, "test")
    return arguments


# What a scenario expects a client to send that a tool's schema cannot say: the arguments of a
# call, computed from the listed tools (as the client saw them through the gateway).
Planner = Callable[[dict[str, types.Tool]], dict[str, list[dict[str, Any]]]]
PLANS: dict[str, Planner] = {
    # Round-trip the focal tool's inputSchema, as listed, to the echo tool (SEP-1613, SEP-2106).
    "json-schema-2020-12-preservation": lambda tools: (
        {"json_schema_echo": [{"schema": tools["json_schema_2020_12_tool"].input_schema}]}
        if "json_schema_2020_12_tool" in tools
        else {}
    ),
}


def planned_calls(
    scenario: str, tools: list[types.Tool], context: Mapping[str, Any]
) -> list[tuple[str, dict[str, Any]]]:
    """Every listed tool once, in listing order, with the arguments the context, the scenario's
    plan or the tool's schema give (a context may list several calls of one tool)."""
    by_name = {tool.name: tool for tool in tools}
    given: dict[str, list[dict[str, Any]]] = {}
    for call in context.get("toolCalls") or []:
        given.setdefault(call["name"], []).append(dict(call.get("arguments") or {}))
    plan = PLANS.get(scenario)
    if plan is not None:
        for name, argument_lists in plan(by_name).items():
            given.setdefault(name, []).extend(argument_lists)
    calls = []
    for tool in tools:
        for arguments in given.get(tool.name) or [least_arguments(tool.input_schema)]:
            calls.append((tool.name, arguments))
    return calls


async def _elicit(context: object, params: Any) -> types.ElicitResult:
    """Accept, with the requested schema's defaults filled in for every field (what a client's
    form shows and submits when the user changes nothing: SEP-1034); the gateway relays both."""
    schema = getattr(params, "requested_schema", None)
    fields = schema.get("properties") if isinstance(schema, dict) else None
    content = {
        name: field["default"]
        for name, field in (fields or {}).items()
        if isinstance(field, dict) and "default" in field
    }
    return types.ElicitResult(action="accept", content=content)


async def _sample(context: object, params: Any) -> types.CreateMessageResult:
    text = types.TextContent(type="text", text="conformance")
    return types.CreateMessageResult(role="assistant", content=text, model="stand-in", stop_reason="endTurn")


async def _roots(context: object) -> types.ListRootsResult:
    return types.ListRootsResult(roots=[types.Root(uri="file:///conformance", name="conformance")])


async def exercise(config: Path, scenario: str, era: str, context: Mapping[str, Any], env: Mapping[str, str]) -> None:
    """One gateway session: list and call the tools, then resources and prompts."""
    params = StdioServerParameters(
        command=PYTHON,
        args=["-m", "gateway", "serve", "--config", str(config), "--log-level", "info"],
        env={**os.environ, **env},
        cwd=str(ROOT),
    )
    mode = "legacy" if era in HANDSHAKE_ERAS else "auto"
    async with Client(
        params,  # type: ignore[arg-type]
        mode=mode,
        read_timeout_seconds=STEP_TIMEOUT,
        elicitation_callback=_elicit,
        sampling_callback=_sample,
        list_roots_callback=_roots,
    ) as client:
        LOG.info("gateway session: %s", client.protocol_version)
        tools = (await client.list_tools()).tools
        LOG.info("tools: %s", [t.name for t in tools])
        for name, arguments in planned_calls(scenario, tools, context):
            result = await _attempt(f"tools/call {name}", client.call_tool(name, arguments))
            command = login_instruction(result)
            if command is not None:  # what a person does: run the command the error names, call again
                login(config, env, command)
                await _attempt(f"tools/call {name} (after the login)", client.call_tool(name, arguments))
        resources = await _attempt("resources/list", client.list_resources())
        for resource in getattr(resources, "resources", []):
            await _attempt(f"resources/read {resource.uri}", client.read_resource(str(resource.uri)))
        prompts = await _attempt("prompts/list", client.list_prompts())
        for prompt in getattr(prompts, "prompts", []):
            await _attempt(f"prompts/get {prompt.name}", client.get_prompt(prompt.name))


async def _attempt(what: str, awaitable: Any) -> Any:
    """Await one request; a failure is logged (the scenario judges it), never fatal."""
    try:
        result = await awaitable
    except Exception as exc:
        LOG.info("%s failed: %s", what, exc)
        return None
    if isinstance(result, types.CallToolResult) and result.is_error:
        LOG.info("%s: isError %s", what, [getattr(c, "text", c) for c in result.content])
    else:
        LOG.info("%s: ok", what)
    return result


_LOGIN = re.compile(r"run (prefixgate login .*)$")


def login_instruction(result: Any) -> list[str] | None:
    """The ``prefixgate login ...`` command an ``isError`` result tells the user to run
    (a step-up names the wider scope), as arguments after ``prefixgate``; None if none."""
    if not isinstance(result, types.CallToolResult) or not result.is_error:
        return None
    for block in result.content:
        found = _LOGIN.search(getattr(block, "text", ""))
        if found is not None:
            return shlex.split(found.group(1))[1:]
    return None


def login(config: Path, env: Mapping[str, str], words: Sequence[str] = ()) -> None:
    """``prefixgate login s`` (or the login an error named): the browser flow, through the
    stand-in browser."""
    command = [PYTHON, "-m", "gateway", *(words or ("login", "s", "--config", str(config)))]
    try:
        done = subprocess.run(command, cwd=ROOT, env={**os.environ, **env}, timeout=STEP_TIMEOUT, check=False)
    except subprocess.TimeoutExpired:
        LOG.error("%s did not finish within %g s", " ".join(command), STEP_TIMEOUT)
        return
    if done.returncode != 0:
        LOG.error("%s exited %s", " ".join(command), done.returncode)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="client_under_test: %(message)s")
    if len(args) != 1:
        print("usage: MCP_CONFORMANCE_SCENARIO=NAME python -m tests.conformance.client_under_test URL", file=sys.stderr)
        return 2
    url = args[0]
    scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "")
    era = os.environ.get("MCP_CONFORMANCE_PROTOCOL_VERSION", "2025-11-25")
    context = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
    LOG.info("scenario %s at %s against %s", scenario, era, url)
    with tempfile.TemporaryDirectory(prefix="prefixgate-cut-") as tmp:
        directory = Path(tmp)
        table, env = server_table(url, scenario, context)
        # The MCP name rule and no function limit, every tool declared: a transparent gateway.
        config = write_config(
            directory, {"s": table}, client={"profile": "mcp", "declarations": "fixed"}, spill={"enabled": False}
        )
        env = {**env, "BROWSER": stand_in_browser(directory)}
        if scenario.startswith("auth/"):
            login(config, env)
        try:
            anyio.run(exercise, config, scenario, era, context, env)
        except Exception as exc:
            LOG.error("the gateway session failed: %r", exc)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
