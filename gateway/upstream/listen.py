"""The listening socket of every HTTP server prefixgate runs (``serve --http``, the demo server).

Made with ``IPPROTO_TCP`` named, not protocol 0: asyncio turns ``TCP_NODELAY`` on for the
connections it accepts only from a socket whose ``proto`` says TCP, and uvicorn writes a
response's head and body (and each SSE event) separately, so without it each response waits
~40 ms for the client's delayed ACK (Nagle's algorithm). ``TCP_NODELAY`` is set on the
listener too, which Linux passes on to every accepted connection.
"""

from __future__ import annotations

import socket


def listening_socket(host: str, port: int, backlog: int = 128) -> socket.socket:
    """Bound and listening (connections are accepted from the moment it returns)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind((host, port))
        sock.listen(backlog)
    except BaseException:
        sock.close()
        raise
    return sock
