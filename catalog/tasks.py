"""Tools that run only as tasks (``execution.taskSupport: "required"``, SEP-1686, 2025-11-25).

A client must call such a tool as a task, and the server refuses a plain call. The gateway
offers its clients no tasks, so it runs each call of one as a task at its server itself
(gateway/downstream/tasks.py) and answers with the task's result, as for any call. It
publishes the tool without ``taskSupport``, so that every client calls it plainly: a client
that honours the field would otherwise never call it, since the gateway has no tasks to
offer. That needs a server that runs tool calls as tasks
(``capabilities.tasks.requests.tools.call``); without one, no call can run the tool, and the
build says so (``task-only``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

TASK_ONLY = (
    'execution.taskSupport is "required", but its server declares no tasks for tools/call '
    "(capabilities.tasks.requests.tools.call), so no call can run it; exclude it (exclude in "
    "its [servers] table) or fix the server"
)
"""The build's warning for a published tool that no call through the gateway can run."""


def task_only(tool: Mapping[str, Any]) -> bool:
    """Whether a tool declaration says a call of it must be a task."""
    execution = tool.get("execution")
    return isinstance(execution, dict) and execution.get("taskSupport") == "required"


def runs_tool_tasks(capabilities: Mapping[str, Any]) -> bool:
    """Whether a server's capabilities say it runs ``tools/call`` as a task."""
    found: Any = capabilities
    for key in ("tasks", "requests", "tools", "call"):
        found = found.get(key) if isinstance(found, Mapping) else None
    return isinstance(found, Mapping)


def as_plain(tool: dict[str, Any]) -> dict[str, Any]:
    """The declaration without ``taskSupport`` (and without ``execution`` once that is empty),
    as the gateway publishes a tool it runs as a task itself."""
    execution = {k: v for k, v in tool["execution"].items() if k != "taskSupport"}
    plain = {k: v for k, v in tool.items() if k != "execution"}
    if execution:
        plain["execution"] = execution
    return plain
