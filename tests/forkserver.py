"""A fork server for the Python processes the suite starts: each is a real process on real
pipes and sockets, forked from one that has already imported the mcp SDK and the gateway.

Why: a run starts about 2,200 Python processes (gateways, the demo and fixture servers,
commands), and each spent ~0.7 s of CPU importing the same modules (the SDK's pydantic
models most of it): on a 2-core machine that was most of the suite's time.

How: ``start`` runs this file as a server (the *zygote*) that imports those modules once,
freezes them out of the collector's reach and listens on a Unix socket (in a private
directory: only the user running the tests can ask it for a process), and writes a
*launcher*: a small executable script that the tests use in place of ``sys.executable``
(``tests.helpers.PYTHON``), including in the configs they write, so the gateways start their
servers through it too. The launcher (``python -IS``: the standard library only, ~20 ms)
hands the zygote its argv, working directory, environment and its stdin, stdout and
stderr descriptors (``SCM_RIGHTS``); the zygote forks a child that takes those descriptors
as its own 0, 1 and 2, the environment and directory, a new session, fresh ``sys.std*``
objects (line buffering decided by the new descriptors, as at start-up), and runs
``-m MODULE``, ``-c CODE`` or ``SCRIPT`` as the interpreter would, ending as the
interpreter ends. The launcher stays as the process its starter knows: it forwards the
stop and reload signals to the child (held back from its request until it knows the
child's pid: the child may run, and be signalled, before that) and exits as the child exited (the same code, or
killed by the same signal); when the launcher dies any other way (``SIGKILL`` of its
process group, as a gateway stops a server), its connection closes and the zygote kills
the child's process group.

What it does not cover, the launcher runs the real interpreter for (``exec``): any other
interpreter option, an environment that changes what was decided at import time (the
``PYTHON*`` variables start-up reads, a non-UTF-8 locale, a ``PREFIXGATE_*`` variable not
known to be read at run time), a missing socket, a declined request, and every test marked
``real_processes``: those look at the process itself (its pid's ``/proc`` entries, its
memory, its children, how it imports the SDK) or need string hashing randomised per process
(the determinism checks). ``PREFIXGATE_TEST_FORKSERVER=0`` runs the whole suite on the
real interpreter.
"""

from __future__ import annotations

import os
import selectors
import signal
import socket
import struct
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ENV = "PREFIXGATE_TEST_FORKSERVER"
"""``0`` turns the fork server off (every process starts the real interpreter)."""
START_ERROR: str | None = None
"""Why this pytest process runs without its fork server (conftest.py could not start it)."""
PYTHON_ENV = "PREFIXGATE_TEST_PYTHON"
"""The launcher, for processes the tests' own processes start (the conformance client)."""

RUNTIME_ENV = frozenset(
    {
        "PREFIXGATE_CONFIG",
        "PREFIXGATE_TOKEN",
        "PREFIXGATE_PROFILE",
        "PREFIXGATE_SESSION",
        "PREFIXGATE_FAST_PATH",
        "PREFIXGATE_PRELUDE",
        "PREFIXGATE_CONFORMANCE_CACHE",
        "PREFIXGATE_NPM",
        "PREFIXGATE_GATEWAYS",
        PYTHON_ENV,
    }
)
"""``PREFIXGATE_*`` variables read only at run time: a child may differ from the zygote in
these. Any other one that differs (e.g. ``PREFIXGATE_LIVENESS_INTERVAL``, read at import)
makes the launcher run the real interpreter."""

STARTUP_ENV = (
    "PYTHONHASHSEED",
    "PYTHONPATH",
    "PYTHONHOME",
    "PYTHONSAFEPATH",
    "PYTHONIOENCODING",
    "PYTHONUTF8",
    "PYTHONWARNINGS",
    "PYTHONDEVMODE",
    "PYTHONMALLOC",
    "PYTHONFAULTHANDLER",
    "PYTHONTRACEMALLOC",
    "PYTHONOPTIMIZE",
    "PYTHONINSPECT",
    "PYTHONVERBOSE",
    "PYTHONASYNCIODEBUG",
    "PYTHONNOUSERSITE",
    "PYTHONUSERBASE",
    "PYTHONPLATLIBDIR",
    "PYTHONINTMAXSTRDIGITS",
)
"""What the interpreter reads from the environment at start-up (a child must match the zygote;
``PYTHONUNBUFFERED`` it need not: the child makes its standard streams as start-up would)."""

FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)
"""The signals a launcher passes on to its child."""

PRELOAD = (
    "mcp",
    "mcp.client.stdio",
    "mcp.client.streamable_http",
    "mcp.client.sse",
    "mcp.server.mcpserver",
    "mcp.server.lowlevel",
    "mcp.server.stdio",
    "mcp.server.sse",
    "mcp.server.streamable_http",
    "mcp.server.streamable_http_manager",
    "mcp.server.subscriptions",
    "httpx",
    "uvicorn",
    "uvicorn.protocols.http.h11_impl",
    "uvicorn.lifespan.on",
    "starlette.applications",
    "starlette.routing",
    "sse_starlette",
    "jsonschema",
    "canonicaljson",
    "redis.asyncio",
    "gateway.commands.cli",
    "gateway.commands.serve",
    "gateway.commands.demo",
    "gateway.commands.doctor",
    "gateway.commands.catalog",
)
"""What the zygote imports before it forks (a module that fails to import is skipped)."""

LAUNCHER = """#!{python} -IS
# Written by tests/forkserver.py: runs Python through the suite's fork server.
import marshal, os, signal, socket, struct, sys

REAL, SOCKET, REAL_FLAG, SIGNALS = {real!r}, {socket!r}, {flag!r}, {signals!r}
MASK = None  # the signal mask the launcher was started with, while it holds the signals back


def real():
    if MASK is not None:  # (the mask survives exec: the interpreter gets the starter's)
        signal.pthread_sigmask(signal.SIG_SETMASK, MASK)
    os.execv(REAL, [REAL, *sys.argv[1:]])


def main():
    global MASK
    argv = sys.argv[1:]
    simple = argv and (argv[0] in ("-m", "-c") and len(argv) > 1 or not argv[0].startswith("-"))
    if not simple or os.path.exists(REAL_FLAG):
        real()
    # Held back from the request on: the child may run (and its starter signal the launcher)
    # before the launcher knows its pid. A blocked signal stays pending, even one ignored.
    MASK = signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
    try:
        cwd = os.getcwd()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(SOCKET)
        ignored = [s for s in SIGNALS if signal.getsignal(s) == signal.SIG_IGN]
        payload = marshal.dumps((cwd, argv, dict(os.environ), ignored))
        socket.send_fds(sock, [struct.pack("!I", len(payload)) + payload], [0, 1, 2])
    except (OSError, ValueError):
        real()
    try:  # sent: from here on the zygote may have forked, so never start a second one
        pid = struct.unpack("!i", receive(sock, 4))[0]
    except OSError:
        os._exit(1)
    if pid == 0:
        real()

    def forward(signum, frame):
        try:
            os.kill(pid, signum)
        except OSError:
            pass

    for signum in SIGNALS:  # all of them: the child ignores what it was started ignoring, unless it chose not to
        signal.signal(signum, forward)
    signal.pthread_sigmask(signal.SIG_SETMASK, MASK)  # what came meanwhile is forwarded now
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    try:
        status = struct.unpack("!i", receive(sock, 4))[0]
    except (OSError, struct.error):
        os._exit(1)
    code = os.waitstatus_to_exitcode(status)
    if code < 0:
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
        code = 128 - code
    os._exit(code)


def receive(sock, size):
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise OSError("the fork server closed the connection")
        data += chunk
    return data


main()
"""


@dataclass
class ForkServer:
    """A running zygote and the launcher that starts processes through it."""

    process: subprocess.Popen[bytes]
    launcher: str
    real_flag: Path

    def stop(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()  # its lifeline: it exits at EOF
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def start(directory: Path) -> ForkServer:
    """Start a zygote listening in ``directory`` and write its launcher there (``python``)."""
    directory.mkdir(parents=True, exist_ok=True)
    sock, flag, launcher = directory / "zygote.sock", directory / "real", directory / "python"
    launcher.write_text(
        LAUNCHER.format(
            python=sys.executable,
            real=sys.executable,
            socket=str(sock),
            flag=str(flag),
            signals=tuple(int(s) for s in FORWARDED),
        ),
        encoding="utf-8",
    )
    launcher.chmod(0o755)
    log = (directory / "zygote.log").open("wb")
    process = subprocess.Popen(
        [sys.executable, __file__, str(sock)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=log,
        env={k: v for k, v in os.environ.items() if k != ENV},
        cwd=Path(__file__).resolve().parent.parent,
    )
    log.close()
    assert process.stdout is not None
    ready = process.stdout.readline()
    if ready != b"ready\n":
        process.kill()
        process.wait()
        raise RuntimeError(f"the fork server did not start: {(directory / 'zygote.log').read_text()[-2000:]}")
    process.stdout.close()
    return ForkServer(process, str(launcher), flag)


# The zygote: everything below runs in the server process (and, after a fork, in its child).


@dataclass
class Child:
    """What a forked child becomes: the launcher's argv, directory, environment and descriptors."""

    cwd: str
    argv: list[str]
    env: dict[str, str]
    fds: list[int]
    ignored: list[int]
    """The stop and reload signals the launcher was started ignoring (inherited ``SIG_IGN``)."""


def _acceptable(cwd: str, argv: list[str], env: dict[str, str]) -> bool:
    """Whether a forked child would behave as the real interpreter started this way would."""
    for name in STARTUP_ENV:
        if env.get(name) != os.environ.get(name):
            return False
    for name in ("LC_ALL", "LC_CTYPE", "LANG"):
        value = env.get(name, "")
        if value not in ("", "C", "POSIX") and "utf-8" not in value.lower() and "utf8" not in value.lower():
            return False
    for name in set(env) | set(os.environ):
        if name.startswith("PREFIXGATE_") and name not in RUNTIME_ENV and env.get(name) != os.environ.get(name):
            return False
    if not argv[0].startswith("-"):
        return os.path.isfile(os.path.join(cwd, argv[0]))
    return True


def _receive(conn: socket.socket) -> Child | None:
    """A launcher's request: its descriptors and what it was given (None, nothing kept: a
    request that is not whole within 10 s)."""
    import marshal

    conn.settimeout(10)
    fds: list[int] = []
    try:
        data, fds, _flags, _addr = socket.recv_fds(conn, 1 << 16, 3)
        if len(fds) != 3 or len(data) < 4:
            raise OSError("not a request")
        size = struct.unpack("!I", data[:4])[0]
        data = data[4:]
        while len(data) < size:
            chunk = conn.recv(size - len(data))
            if not chunk:
                raise OSError("short request")
            data += chunk
        cwd, argv, env, ignored = marshal.loads(data)
    except (OSError, ValueError, EOFError, TypeError):
        for fd in fds:
            os.close(fd)
        return None
    return Child(cwd, list(argv), dict(env), list(fds), list(ignored))


def serve(path: str) -> Child | None:
    """Import, listen, fork. Returns only in a forked child (None: the zygote was told to stop)."""
    import gc
    import importlib

    for name in PRELOAD:
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 - an optional module; the child imports what it needs
            print(f"fork server: not preloaded: {name}: {exc!r}", file=sys.stderr)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(128)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)
    gc.collect()
    gc.freeze()  # the children's collections never walk (and so never copy) the preloaded objects
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
    children: dict[int, socket.socket | None] = {}
    """Each running child, with the connection of its launcher while that lives."""
    selector = selectors.DefaultSelector()
    selector.register(listener, selectors.EVENT_READ)
    selector.register(wake_r, selectors.EVENT_READ)
    selector.register(0, selectors.EVENT_READ)
    while True:
        for key, _events in selector.select():
            if key.fileobj is listener:
                conn, _addr = listener.accept()
                child = _receive(conn)
                if child is None or not _acceptable(child.cwd, child.argv, child.env):
                    if child is not None:
                        for fd in child.fds:
                            os.close(fd)
                    try:
                        conn.sendall(struct.pack("!i", 0))
                    except OSError:
                        pass
                    conn.close()
                    continue
                pid = os.fork()
                if pid == 0:
                    signal.set_wakeup_fd(-1)
                    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                    selector.close()
                    listener.close()
                    for fd in (wake_r, wake_w):
                        os.close(fd)
                    for other in children.values():
                        if other is not None:
                            other.close()
                    conn.close()
                    return child
                for fd in child.fds:
                    os.close(fd)
                try:
                    conn.sendall(struct.pack("!i", pid))
                except OSError:
                    pass
                children[pid] = conn
                selector.register(conn, selectors.EVENT_READ, pid)
            elif key.fileobj == wake_r:
                try:
                    while os.read(wake_r, 512):
                        pass
                except BlockingIOError:
                    pass
                _reap(children, selector)
            elif key.fileobj == 0:
                if not os.read(0, 1):
                    return None
            else:
                _launcher_gone(key.fileobj, key.data, children, selector)  # type: ignore[arg-type]


def _reap(children: dict[int, socket.socket | None], selector: selectors.BaseSelector) -> None:
    """Collect every child that exited and tell its launcher how (the raw wait status)."""
    while children:
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            return
        conn = children.pop(pid, None)
        if conn is not None:
            selector.unregister(conn)
            try:
                conn.sendall(struct.pack("!i", status))
            except OSError:
                pass
            conn.close()


def _launcher_gone(
    conn: socket.socket, pid: int, children: dict[int, socket.socket | None], selector: selectors.BaseSelector
) -> None:
    """A launcher's connection closed (it never sends after the request): the launcher died,
    as a server's process does when a gateway kills its group; its child, and the child's
    group, die with it (a child that became another program through ``exec`` too)."""
    try:
        if conn.recv(1):
            return
    except OSError:
        pass
    selector.unregister(conn)
    conn.close()
    if pid in children:
        children[pid] = None
        for kill in (os.killpg, os.kill):  # its group, once it made one (setsid)
            try:
                kill(pid, signal.SIGKILL)
            except OSError:
                pass


def become(child: Child) -> None:
    """Turn the forked zygote into the process the launcher was asked to start."""
    import io

    os.setsid()
    for signum in FORWARDED:  # as the interpreter starts: what its parent ignored stays ignored
        if signum in child.ignored:
            signal.signal(signum, signal.SIG_IGN)
        else:
            signal.signal(signum, signal.default_int_handler if signum == signal.SIGINT else signal.SIG_DFL)
    for target, fd in enumerate(child.fds):
        os.dup2(fd, target)
    for fd in child.fds:
        if fd > 2:
            os.close(fd)
    os.chdir(child.cwd)
    os.environ.clear()
    os.environ.update(child.env)
    sys.dont_write_bytecode = bool(child.env.get("PYTHONDONTWRITEBYTECODE"))

    buffered = not child.env.get("PYTHONUNBUFFERED")

    def stream(fd: int, write: bool, errors: str) -> io.TextIOWrapper:
        """As the interpreter makes ``sys.std*`` at start-up (``create_stdio``): unbuffered
        writes under ``PYTHONUNBUFFERED``, else line buffered on a terminal (stderr always)."""
        unbuffered = write and not buffered
        buffer = open(fd, "wb" if write else "rb", buffering=0 if unbuffered else -1, closefd=False)  # noqa: SIM115
        made = io.TextIOWrapper(
            buffer,  # type: ignore[arg-type]
            encoding=sys.__stdout__.encoding if sys.__stdout__ else "utf-8",
            errors=errors,
            newline="\n",
            line_buffering=buffered and (os.isatty(fd) or fd == 2),
            write_through=not buffered,
        )
        made.mode = "w" if write else "r"  # type: ignore[misc]
        return made

    errors = sys.__stdout__.errors if sys.__stdout__ and sys.__stdout__.errors else "strict"
    sys.stdin = sys.__stdin__ = stream(0, False, errors)
    sys.stdout = sys.__stdout__ = stream(1, True, errors)
    sys.stderr = sys.__stderr__ = stream(2, True, "backslashreplace")


def run(child: Child) -> None:
    """``-m MODULE``, ``-c CODE`` or ``SCRIPT``, with ``sys.argv``, ``sys.path[0]`` and
    ``__main__`` as the interpreter sets them."""
    import builtins
    import runpy
    import types

    main = types.ModuleType("__main__")
    main.__dict__["__builtins__"] = builtins
    sys.modules["__main__"] = main
    argv = child.argv
    if argv[0] == "-m":
        sys.argv = ["-m", *argv[2:]]
        sys.path[0] = os.getcwd()
        runpy._run_module_as_main(argv[1], alter_argv=True)  # type: ignore[attr-defined]
    elif argv[0] == "-c":
        sys.argv = ["-c", *argv[2:]]
        sys.path[0] = ""
        exec(compile(argv[1], "<string>", "exec"), main.__dict__)
    else:
        script = argv[0]
        sys.argv = list(argv)
        sys.path[0] = os.path.dirname(os.path.realpath(script))
        main.__dict__.update(__file__=script, __cached__=None)
        with open(script, "rb") as handle:
            code = compile(handle.read(), script, "exec")
        exec(code, main.__dict__)


if __name__ == "__main__":
    _child = serve(sys.argv[1])
    if _child is not None:
        become(_child)
        run(_child)
