"""Start the demo server only once N servers of a test have all been started.

``python -m tests.rendezvous DIR N DEMO-ARGS...`` marks its own start in DIR, waits until N
marks are there, then becomes ``prefixgate demo-server DEMO-ARGS...``. A gateway that started
its servers one after another (waiting for each to be ready) would never get the first one
ready: the rendezvous proves start-up is concurrent without measuring any time.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path


def main() -> None:
    directory, count, demo_args = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
    directory.mkdir(parents=True, exist_ok=True)
    (directory / str(os.getpid())).touch()
    give_up = time.monotonic() + 120
    while len(os.listdir(directory)) < count:
        if time.monotonic() > give_up:
            sys.exit(f"rendezvous: only {len(os.listdir(directory))} of {count} servers started")
        time.sleep(0.02)
    os.execv(sys.executable, [sys.executable, "-m", "gateway", "demo-server", *demo_args])


if __name__ == "__main__":
    main()
