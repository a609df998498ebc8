"""A call of a tool that runs only as a task, made as one at its server and answered plainly.

The gateway offers its clients no tasks (SEP-1686), so a tool whose ``execution.taskSupport``
is ``"required"`` is published for plain calls (catalog/tasks.py) and each call of it is
run here the way a task-capable client runs it: ``tools/call`` with a ``task``, which the
server answers with the task it created, then ``tasks/result``, which the server answers
once the task is over with the call's own result. What the server asks the client
meanwhile (``elicitation/create`` while the task waits for input) reaches the caller as any
call's question does, and the task's status messages (``notifications/tasks/status``) reach
it as progress when its client asked for progress. A call that ends before its task
(cancelled, or past its time) cancels the task (``tasks/cancel``).
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Mapping
from typing import Any

import anyio

from catalog.tasks import runs_tool_tasks, task_only
from gateway.downstream.connection import Downstream
from gateway.downstream.link import ProgressFn

log = logging.getLogger("prefixgate.tasks")

RELATED_TASK = "io.modelcontextprotocol/related-task"
"""The ``_meta`` key of a result that names its task: the caller never saw that task."""
MAX_STATUS_CHARS = 1000
"""A status message passed on as progress is cut here."""
CANCEL_WAIT = 2.0
"""Seconds a call that ended early waits for its server to take the task's cancellation."""


_task_tools: weakref.WeakKeyDictionary[Downstream, tuple[tuple[Any, ...], frozenset[str]]] = weakref.WeakKeyDictionary()
"""Per server: its tool list as ``runs_as_task`` last saw it, and the names in it that run
only as tasks (found again only when the server lists anew)."""


def runs_as_task(downstream: Downstream, tool: str) -> bool:
    """Whether a call of ``tool`` is made as a task: the tool runs only so, and its server
    declares that it runs tool calls as tasks (most servers stop at that check)."""
    if not runs_tool_tasks(downstream.capabilities):
        return False
    tools = downstream.tools
    known = _task_tools.get(downstream)
    if known is None or known[0] is not tools:
        names = frozenset(
            name for t in tools if isinstance(t, dict) and task_only(t) and isinstance(name := t.get("name"), str)
        )
        known = _task_tools[downstream] = (tools, names)
    return tool in known[1]


class _Statuses:
    """A task's status messages on their way to its call's client as progress: the server's
    notification only records the newest (``task_status``), and the call's own task sends it,
    so a client that is slow to read holds up no notification of the server's."""

    def __init__(self, on_progress: ProgressFn) -> None:
        self.on_progress = on_progress
        self.count = 0
        self.newest: str | None = None
        self.changed = anyio.Event()

    def note(self, message: str) -> None:
        self.count += 1
        self.newest = message
        self.changed.set()

    async def forward(self) -> None:
        """Until cancelled (the call has its result): each newest message, one at a time."""
        while True:
            await self.changed.wait()
            self.changed = anyio.Event()
            try:
                await self.on_progress(float(self.count), None, self.newest)
            except Exception as exc:  # noqa: BLE001 - the client is gone: the call's answer says the rest
                log.debug("a task's status not sent as progress: %s", exc)
                return


_watched: dict[tuple[Downstream, str], _Statuses] = {}
"""The tasks whose calls are waiting for them and whose clients asked for progress."""


def task_status(downstream: Downstream, params: Mapping[str, Any]) -> None:
    """A server's ``notifications/tasks/status``: its status message (or status) as the next
    progress of the call the task runs for, if that call is waiting and wants progress."""
    task_id = params.get("taskId")
    statuses = _watched.get((downstream, task_id)) if isinstance(task_id, str) else None
    if statuses is None:
        return
    message = params.get("statusMessage")
    if not isinstance(message, str):
        message = params.get("status")
    if isinstance(message, str):
        statuses.note(message[:MAX_STATUS_CHARS])


async def call_as_task(
    downstream: Downstream,
    params: Mapping[str, Any],
    *,
    timeout: float,
    max_time: float,
    on_progress: ProgressFn | None = None,
    log_level: str | None = None,
    capabilities: Any = None,
) -> dict[str, Any]:
    """The result of the ``tools/call`` ``params`` run as a task (raises as ``request`` does)."""
    task = {"ttl": int(max_time * 1000)}
    created = await downstream.request(
        "tools/call",
        {**params, "task": task},
        timeout=timeout,
        on_progress=on_progress,
        log_level=log_level,
        capabilities=capabilities,
        max_time=max_time,
    )
    found = created.get("task") if isinstance(created, dict) else None
    task_id = found.get("taskId") if isinstance(found, dict) else None
    if not isinstance(task_id, str):
        return created  # answered without a task after all: that is the call's result
    finished = False
    key = (downstream, task_id)
    forwarder: asyncio.Task[None] | None = None
    try:
        if on_progress is not None:
            statuses = _watched[key] = _Statuses(on_progress)
            forwarder = asyncio.get_running_loop().create_task(statuses.forward())
        # The task runs as long as it needs: no answer is due before it ends, up to max_time.
        result = await downstream.request("tasks/result", {"taskId": task_id}, timeout=max_time, max_time=max_time)
        finished = True
    finally:
        _watched.pop(key, None)
        if forwarder is not None:
            forwarder.cancel()
        if not finished:
            await _cancel(downstream, task_id)
    meta = result.get("_meta") if isinstance(result, dict) else None
    if isinstance(meta, dict) and RELATED_TASK in meta:
        result = dict(result)
        rest = {k: v for k, v in meta.items() if k != RELATED_TASK}
        if rest:
            result["_meta"] = rest
        else:
            del result["_meta"]
    return result


async def _cancel(downstream: Downstream, task_id: str) -> None:
    """Ask the server to cancel the task, waiting ``CANCEL_WAIT`` s at most (even when the
    call was cancelled); an error (a task already over, a server gone) changes nothing."""
    with anyio.CancelScope(shield=True), anyio.move_on_after(CANCEL_WAIT):
        try:
            await downstream.request("tasks/cancel", {"taskId": task_id}, timeout=CANCEL_WAIT)
        except Exception as exc:  # noqa: BLE001 - best effort: the call is over either way
            log.debug("[%s] tasks/cancel of %s: %s", downstream.id, task_id, exc)
