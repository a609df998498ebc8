"""``python -m MODULE``, with the cyclic garbage it leaves counted (for the gateway: its calls').

Usage: ``python tests/gc_probe.py REPORT MODULE ARGS...``. The first SIGUSR1 collects
everything so far, switches automatic collection off and keeps what later collections
find (``gc.DEBUG_SAVEALL``), then writes ``armed`` to REPORT; the second collects and
writes to REPORT a JSON object: ``garbage`` (how many objects were unreachable only
through reference cycles since the first signal), ``types`` (the commonest ones) and
``live`` (how many objects of each of the gateway's own classes are alive then: what a
structure that grows with cycles holds). Objects that reference counting frees never show
up in ``garbage``.
"""

from __future__ import annotations

import collections
import gc
import json
import runpy
import signal
import sys
from pathlib import Path
from typing import Any

_report = Path(sys.argv[1])
_signals = 0


def _on_signal(signum: int, frame: Any) -> None:
    global _signals
    _signals += 1
    if _signals == 1:
        gc.collect()
        gc.disable()
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.garbage.clear()
        _report.write_text("armed", encoding="utf-8")
        return
    gc.collect()
    found = collections.Counter(f"{type(o).__module__}.{type(o).__qualname__}" for o in gc.garbage)
    gc.garbage.clear()
    gc.set_debug(0)
    gc.collect()  # (what was garbage is not alive)
    names = (f"{type(o).__module__}.{type(o).__qualname__}" for o in gc.get_objects())
    live = collections.Counter(name for name in names if name.startswith("gateway."))
    report = {"garbage": sum(found.values()), "types": found.most_common(12), "live": dict(live)}
    _report.write_text(json.dumps(report), encoding="utf-8")


signal.signal(signal.SIGUSR1, _on_signal)
_module = sys.argv[2]
sys.argv = [_module, *sys.argv[3:]]
runpy.run_module(_module, run_name="__main__", alter_sys=True)
