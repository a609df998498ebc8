"""A zero-work stdio relay: the floor of any process between an agent and its server.

    python -m bench.relay COMMAND [ARG ...]

Starts COMMAND and passes bytes through unread: its stdin from ours, its stdout to ours
(no parsing, no framing, one event loop, the one ``prefixgate serve`` runs on, a blocking
write of whatever one read returned).
The calls benchmark runs it in front of the demo server beside prefixgate: what the relay
adds over a direct connection is the cost of the extra process hop on this machine (two
more pipe crossings and wake-ups a call), which no stdio gateway can avoid; what
prefixgate adds over the relay is its own work.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys

from gateway.commands.eventloop import backend_options

_CHUNK = 256 * 1024


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _new_loop() -> asyncio.AbstractEventLoop:
    """The loop ``prefixgate serve`` runs on (gateway/commands/eventloop.py): the floor is
    measured on the same one."""
    if backend_options().get("use_uvloop"):
        import uvloop

        return uvloop.new_event_loop()
    return asyncio.new_event_loop()


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python -m bench.relay COMMAND [ARG ...]", file=sys.stderr)
        return 2
    child = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)
    assert child.stdin is not None and child.stdout is not None
    to_child, from_child = child.stdin.fileno(), child.stdout.fileno()
    loop = _new_loop()

    def relay(source: int, target: int) -> None:
        data = os.read(source, _CHUNK)
        if not data:  # either end closed: the relay is over
            loop.stop()
            return
        try:
            _write_all(target, data)
        except OSError:
            loop.stop()

    loop.add_reader(0, relay, 0, to_child)
    loop.add_reader(from_child, relay, from_child, 1)
    loop.add_signal_handler(signal.SIGTERM, loop.stop)
    try:
        loop.run_forever()
    finally:
        loop.close()
        child.stdin.close()
        try:
            child.wait(timeout=5)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
