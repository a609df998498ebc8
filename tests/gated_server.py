"""Run a stdio server behind gates a test sets in a directory, without changing its command.

``python -m tests.gated_server DIR COMMAND [ARG ...]`` writes its pid to ``DIR/pid``, then:
if ``DIR/fail`` exists, writes its text to stderr and exits 3 (a server that cannot start);
if ``DIR/delay`` exists, sleeps that many seconds (a slow start); then becomes COMMAND. The
gates live outside the config, so a warm-start record (keyed by the server's command,
arguments and environment) still matches while the server behaves differently.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path


def main() -> None:
    gates, command = Path(sys.argv[1]), sys.argv[2:]
    (gates / "pid.tmp").write_text(str(os.getpid()))
    os.replace(gates / "pid.tmp", gates / "pid")  # whole when it appears: a test waits for it
    fail = gates / "fail"
    if fail.exists():
        sys.stderr.write(fail.read_text() + "\n")
        sys.exit(3)
    delay = gates / "delay"
    if delay.exists():
        time.sleep(float(delay.read_text()))
    os.execvp(command[0], command)


if __name__ == "__main__":
    main()
