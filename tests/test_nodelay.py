"""Issue 25, item 1: every HTTP connection prefixgate accepts has ``TCP_NODELAY`` on.

Without it uvicorn's separate writes of a response's head and body (and of each SSE event)
waited ~40 ms each for the client's delayed ACK: 48 ms a call for a 2026-07-28 client against
1.8 ms directly. The option is read from the server-side socket of a real connection to a
real process (``pidfd_getfd``, Linux >= 5.6; the test's own user may take another of its
processes' descriptors); the time it saves is measured in ``bench/``, not asserted here.
"""

from __future__ import annotations

import ctypes
import os
import socket
import time
from pathlib import Path

import pytest

from tests.helpers import GATEWAY, PYTHON, demo, url_process, write_config

_libc = ctypes.CDLL(None, use_errno=True)
_PIDFD_OPEN, _PIDFD_GETFD = 434, 438  # the same numbers on every architecture

pytestmark = pytest.mark.real_processes  # reads the gateway's own sockets in /proc


def _their_socket(pid: int, fd: int) -> socket.socket:
    """A duplicate of process ``pid``'s descriptor ``fd``, as a socket of ours."""
    pidfd = _libc.syscall(_PIDFD_OPEN, pid, 0)
    assert pidfd >= 0, f"pidfd_open: {os.strerror(ctypes.get_errno())}"
    try:
        mine = _libc.syscall(_PIDFD_GETFD, pidfd, fd, 0)
        assert mine >= 0, f"pidfd_getfd: {os.strerror(ctypes.get_errno())}"
    finally:
        os.close(pidfd)
    return socket.socket(fileno=mine)


def _accepted_socket(pid: int, port: int, client_port: int) -> socket.socket:
    """The server-side socket of the connection from ``client_port`` to ``port`` in ``pid``."""
    deadline = time.monotonic() + 10
    while True:
        inodes = set()
        for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
            fields = line.split()
            local, remote = int(fields[1].split(":")[1], 16), int(fields[2].split(":")[1], 16)
            if (local, remote) == (port, client_port):
                inodes.add(f"socket:[{fields[9]}]")
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") in inodes:
                    return _their_socket(pid, int(fd))
            except OSError:
                continue  # closed meanwhile
        assert time.monotonic() < deadline, f"no accepted connection from port {client_port} in process {pid}"
        time.sleep(0.05)


@pytest.mark.parametrize("server", ["gateway", "demo"])
def test_accepted_http_connections_have_tcp_nodelay(tmp_path: Path, server: str) -> None:
    if server == "gateway":
        config = write_config(tmp_path, {"d": demo("--tools", 1)})
        command = [*GATEWAY, "serve", "--config", str(config), "--http", "127.0.0.1:0"]
    else:
        command = [PYTHON, "-m", "gateway", "demo-server", "--tools", "1", "--transport", "http"]
    with (tmp_path / "stderr.log").open("w") as errlog, url_process(command, stderr=errlog) as (url, proc):
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        with socket.create_connection(("127.0.0.1", port), timeout=10) as client:
            accepted = _accepted_socket(proc.pid, port, client.getsockname()[1])
            try:
                assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0, server
            finally:
                accepted.close()
