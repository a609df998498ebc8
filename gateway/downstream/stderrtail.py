"""Which of a failed server's last stderr lines says why it failed.

The last line is often the least useful: npm ends a 404 with "A complete log of this run can
be found in: ...", several lines after "404 Not Found - GET ...". The reason a server's start
failed (and doctor's view of its stderr) shows the informative line instead: the first that
names an HTTP status or something missing, else the last that reads as an error, else the last.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

_CAUSE = re.compile(
    r"\b[45]\d\d [A-Z][a-z]+"  # 404 Not Found, 401 Unauthorized, 503 Service ...
    r"|No module named|Cannot find module|ModuleNotFoundError|command not found|not in this registry"
    r"|\bENOENT\b|\bEACCES\b|Permission denied|No such file or directory",
)
_ERROR = re.compile(r"\berror\b|\bERR!|\bfatal\b|\bpanic\b|Exception\b|Error\b", re.IGNORECASE)
_POINTER = re.compile(r"complete log of this run|for (?:more )?details|--verbose|^\s*at\s", re.IGNORECASE)
"""Error-looking lines that only point elsewhere (a log file, a stack frame)."""


def informative(lines: Sequence[str]) -> str | None:
    """The line of ``lines`` (oldest first) that best says why the process failed, or None."""
    for line in lines:
        if _CAUSE.search(line):
            return line
    for line in reversed(lines):
        if _ERROR.search(line) and not _POINTER.search(line):
            return line
    return lines[-1] if lines else None


def shown(lines: Sequence[str], count: int) -> list[str]:
    """The last ``count`` lines, the informative one first when it is older than those."""
    last = list(lines[-count:])
    line = informative(lines)
    if line is None or line in last:
        return last
    return [line, "…", *last[2:]]
