"""Validate call arguments under a time budget without ever blocking the event loop.

A tree-shaped schema (no ``$ref``) costs at most schema size x argument size with
jsonschema-rs's linear regex engine, so it is validated inline. A schema with references
can cost exponential time, and jsonschema-rs holds the GIL while it validates (measured:
a ticker thread got no turn during a 1 s validation), so a worker thread would freeze the
event loop all the same. Such schemas go to worker processes
(``gateway.engine.validation_worker``); one that overruns the budget is killed and replaced.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import Process
from anyio.streams.buffered import BufferedByteReceiveStream

from gateway.engine.shares import Shares

log = logging.getLogger("prefixgate.validation")

BUDGET = 2.0
"""Seconds one call's arguments may take to validate against a referencing schema."""
START_TIMEOUT = 30.0
"""Seconds a new worker may take to start (imports on a busy machine)."""
MAX_WORKERS = 4
"""Concurrent validations in workers; more wait for a free one."""
PER_OWNER = 2
"""Of those, what one principal may hold: its many slow calls leave the others room."""
_MAX_LINE = 1 << 20


class ValidationTimeout(Exception):
    """The validation ran past the budget; its worker was killed."""


class ValidationFailure(Exception):
    """The worker could not validate (it crashed, ran out of memory, or said why)."""


def schema_key(schema: Any) -> str:
    """A worker caches compiled schemas by this key."""
    return hashlib.sha256(json.dumps(schema, sort_keys=True).encode()).hexdigest()


class _Worker:
    def __init__(self, process: Process) -> None:
        self.process = process
        assert process.stdout is not None and process.stdin is not None
        self.stdin = process.stdin
        self.reader = BufferedByteReceiveStream(process.stdout)

    @classmethod
    async def start(cls) -> _Worker:
        root = str(Path(__file__).resolve().parent.parent)  # where the gateway package lives
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p)}
        process = await anyio.open_process(
            [sys.executable, "-m", "gateway.engine.validation_worker"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,  # a Rust panic's backtrace would be many raw log lines
            env=env,
        )
        worker = cls(process)
        try:
            with anyio.fail_after(START_TIMEOUT):
                if json.loads(await worker.reader.receive_until(b"\n", _MAX_LINE)) != {"ready": True}:
                    raise ValidationFailure("the validation worker did not start")
        except BaseException:
            await worker.kill()
            raise
        return worker

    async def ask(self, key: str, schema: Any, instance: Any) -> dict[str, Any]:
        request = {"key": key, "schema": schema, "instance": instance}
        await self.stdin.send(json.dumps(request).encode() + b"\n")
        reply: dict[str, Any] = json.loads(await self.reader.receive_until(b"\n", _MAX_LINE))
        return reply

    async def kill(self) -> None:
        with anyio.CancelScope(shield=True):
            try:
                self.process.kill()
            except ProcessLookupError:
                pass
            with anyio.move_on_after(5):
                await self.process.wait()
            await self.process.aclose()


class ValidationPool:
    """Worker processes for referencing schemas, started on first use and reused.

    A principal's validations queue for its own share (``PER_OWNER``) first, then for a
    worker: one that sends many calls whose arguments take the whole budget waits behind
    its own, never in front of everyone else's."""

    def __init__(self, budget: float = BUDGET, max_workers: int = MAX_WORKERS, per_owner: int = PER_OWNER) -> None:
        self.budget = budget
        self._idle: list[_Worker] = []
        self._limiter = anyio.CapacityLimiter(max_workers)
        self._shares = Shares(min(per_owner, max_workers))
        """Per principal: its share of the workers."""

    async def violation(self, schema: Any, instance: Any, owner: object = None) -> tuple[list[str | int], str] | None:
        """Like ``catalog.validation.violation``, in a worker, within the budget; ``owner``:
        the principal the call is for.

        Raises ValidationTimeout or ValidationFailure; a cancelled call kills its worker.
        """
        async with self._shares.held(owner):
            return await self._validate(schema, instance)

    async def _validate(self, schema: Any, instance: Any) -> tuple[list[str | int], str] | None:
        async with self._limiter:
            worker = self._idle.pop() if self._idle else await _Worker.start()
            try:
                with anyio.fail_after(self.budget):
                    reply = await worker.ask(schema_key(schema), schema, instance)
            except TimeoutError:
                await worker.kill()
                log.warning("argument validation took longer than %g s: worker killed", self.budget)
                raise ValidationTimeout from None
            except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.IncompleteRead, anyio.DelimiterNotFound,
                    ValueError, OSError) as exc:
                await worker.kill()
                log.warning("argument validation worker died (exit status %s)", worker.process.returncode)
                raise ValidationFailure("the validation worker crashed (out of memory?)") from exc
            except BaseException:
                await worker.kill()
                raise
            self._idle.append(worker)
        if "failure" in reply:
            raise ValidationFailure(str(reply["failure"]))
        if reply.get("valid") is True:
            return None
        return list(reply.get("path") or []), str(reply.get("message") or "invalid")

    async def aclose(self) -> None:
        while self._idle:
            await self._idle.pop().kill()
