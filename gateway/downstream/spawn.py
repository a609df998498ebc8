"""Starting a stdio server's process: the one place a child is spawned, standard library only.

A server is a process in its own session (so stopping it ends its whole process group)
with three pipes whose far ends the gateway owns. Spawning needs nothing of the SDK or
the event loop, so ``serve`` starts every stdio server the moment the config is read,
before the gateway's own ~0.8 s of imports (``gateway.upstream.prelude``): the servers
start up while the gateway does. The transport (``gateway.downstream.stdio``) adopts such
a child, or spawns one itself through the same function on a restart.
"""

from __future__ import annotations

import errno
import json
import os
import resource
import shlex
import shutil
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gateway.downstream import selfloop
from gateway.downstream.warden import GATEWAY as WARDEN

INHERITED_ENV = ("HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER")
"""What a server inherits from the gateway's environment besides its own ``env``: the mcp
SDK's ``DEFAULT_INHERITED_ENV_VARS`` on POSIX (tests/test_warm_start.py keeps them equal)."""


class CommandNotFound(OSError):
    pass


def resolve_command(command: str, path: str | None = None) -> str:
    """Find ``command`` on PATH, then beside the running interpreter.

    The second place lets a config say ``command = "prefixgate"`` (the bundled demo
    server) and work from an un-activated virtual environment. ``path``: the ``PATH`` the
    server's own ``env`` sets, searched instead of the gateway's, as the exec searches it
    (the SDKs' stdio clients, Node's ``spawn``): a command only there was "not found".
    """
    if os.sep in command:
        if not os.path.exists(command) and (hint := _arguments_inside(command)) is not None:
            raise CommandNotFound(f"command {command!r} does not exist; {hint}")
        # Relative to the directory prefixgate runs in, as its ``cwd`` is (docs/configuration.md),
        # not to that ``cwd``, where the exec would look for it.
        return os.path.abspath(command)
    found = _which(command, path)
    if found is None:
        hint = _arguments_inside(command)
        where = "PATH" if path is None else "the PATH its env sets"
        raise CommandNotFound(f"command {command!r} not found on {where}" + (f"; {hint}" if hint else ""))
    return found


def os_bytes(text: str) -> bytes:
    """A config's text as the bytes the exec takes: the locale's, or UTF-8 where it has none.

    The config is UTF-8 (TOML), and so is what a client that spawns a server itself passes
    (Node encodes every argument as UTF-8), whatever the locale: under ``LC_ALL=C
    PYTHONUTF8=0`` Python's own encoding is ASCII, and a server whose args, env or cwd held
    a non-ASCII character failed to start, naming neither the key nor the cause
    (``UnicodeEncodeError: 'ascii' codec can't encode character``). Text the locale can
    encode is encoded as before (a name read from the environment keeps its bytes)."""
    try:
        return os.fsencode(text)
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogateescape")


def start_failure(exc: OSError, cwd: str | None) -> str:
    """Why the exec failed, naming the path the system named: the command, or its ``cwd``."""
    reason = exc.strerror or str(exc)
    if exc.filename is None:
        return f"cannot start: {reason}"
    named = os.fsencode(exc.filename)
    if cwd is not None and named == os_bytes(cwd):
        return f"cannot start: its cwd {cwd!r}: {reason}"
    return f"cannot start {named.decode('utf-8', 'backslashreplace')!r}: {reason}"


def _which(command: str, path: str | None = None) -> str | None:
    """``command`` on ``path`` (else the gateway's PATH) or beside the interpreter. With PATH
    unset (``env -i``) the system's default path is searched, as the exec and a shell search
    it: ``command = "sh"`` was not found there."""
    own = path if path is not None else os.environ.get("PATH", os.defpath)
    search = os.pathsep.join(p for p in (own, os.path.dirname(sys.executable)) if p)
    return shutil.which(command, path=search)


def _arguments_inside(command: str) -> str | None:
    """The pointer for a command with its arguments written into it (``"server --flag"``),
    when its first word is a program: what ``args`` should say instead."""
    try:
        words = shlex.split(command)
    except ValueError:
        return None
    if len(words) < 2:
        return None
    program = words[0]
    if not (os.path.exists(program) if os.sep in program else _which(program)):
        return None
    listed = ", ".join(json.dumps(word) for word in words[1:])
    return f"{program!r} is a program: put its arguments in args = [{listed}] and set command = {json.dumps(program)}"


def default_environment() -> dict[str, str]:
    """The inherited part of a server's environment (never shell functions: ``()``-values),
    and the gateways above it (``selfloop.environment``: a gateway that is its own server stops)."""
    inherited = {k: v for k in INHERITED_ENV if (v := os.environ.get(k)) is not None and not v.startswith("()")}
    return inherited | selfloop.environment()


@dataclass
class Spawned:
    """A started server: the process, and the gateway's ends of its stdin, stdout and stderr.

    Until a transport adopts it (``take``), ``discard`` ends it: the process group is killed
    and the pipes closed, so a server started early never outlives a gateway that stopped
    before it was used. Its group is the warden's (``warden.py``) until ``release``: ended
    should the gateway die without stopping it.
    """

    process: subprocess.Popen[bytes]
    stdin: int
    stdout: int
    stderr: int
    taken: bool = False
    released: bool = False

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def returncode(self) -> int | None:
        """None while it runs; reading it reaps an exited process (``Popen.poll``)."""
        return self.process.poll()

    def take(self) -> Spawned:
        self.taken = True
        return self

    def discard(self) -> None:
        if self.taken:
            return
        self.taken = True
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except OSError:
            pass
        for fd in (self.stdin, self.stdout, self.stderr):
            try:
                os.close(fd)
            except OSError:
                pass
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        self.release()

    def release(self) -> None:
        """Its group was stopped: the warden forgets it (once)."""
        if not self.released:
            self.released = True
            WARDEN.release(self.process.pid)


FD_RESERVE = 32
"""Descriptors a server's start leaves to the gateway itself. Under a low open-file limit
(``ulimit -n 64``: about 11 servers, each holding 3 pipes and a pidfd) the servers took every
descriptor, and the gateway then stopped on a traceback at its next file (a module imported
late, its state): a start that would leave fewer fails that server alone, naming the limit."""


def _descriptors_left() -> tuple[int, int] | None:
    """The open-file limit and how many descriptors are free under it (None: no limit, or not
    known: no ``/proc``)."""
    try:
        limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        if limit == resource.RLIM_INFINITY:
            return None
        return limit, limit - len(os.listdir("/proc/self/fd"))
    except (OSError, ValueError):
        return None


def spawn(command: str, args: Sequence[str], env: Mapping[str, str] | None, cwd: str | None) -> Spawned:
    """Start the server in a new session with fresh pipes (CommandNotFound, or OSError from the exec)."""
    executable = resolve_command(command, (env or {}).get("PATH"))
    if (room := _descriptors_left()) is not None and room[1] < FD_RESERVE + 4:
        limit, left = room
        raise OSError(
            errno.EMFILE,
            f"the open-file limit (ulimit -n {limit}) leaves {left} descriptors free, and the gateway keeps "
            f"{FD_RESERVE} of them for itself: raise the limit for more servers",
        )
    ends: list[int] = []
    try:
        child_in, our_in = os.pipe()
        ends += [child_in, our_in]
        our_out, child_out = os.pipe()
        ends += [our_out, child_out]
        our_err, child_err = os.pipe()
        ends += [our_err, child_err]
        for fd in (our_in, our_out, our_err):
            os.set_inheritable(fd, False)
        process = subprocess.Popen(
            [os_bytes(word) for word in (executable, *args)],
            stdin=child_in,
            stdout=child_out,
            stderr=child_err,
            env={os_bytes(k): os_bytes(v) for k, v in (default_environment() | dict(env or {})).items()},
            cwd=None if cwd is None else os_bytes(cwd),
            start_new_session=True,
            close_fds=True,
        )
    except BaseException:
        for fd in ends:
            os.close(fd)
        raise
    for fd in (child_in, child_out, child_err):
        os.close(fd)
    WARDEN.watch(process.pid)
    return Spawned(process, our_in, our_out, our_err)
