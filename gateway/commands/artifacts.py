"""``prefixgate artifacts list|read|gc``: the owner's view of spilled outputs.

The model reads artifacts only through ``artifact_read`` and only its own session's;
the person who owns the state (the directory, or the Redis store of ``[gateway] store``)
may list and read all of them here.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import sys
from collections.abc import Callable

import anyio
import anyio.to_thread

from catalog.text import plural
from gateway.commands.base import unwritable
from gateway.config import Config
from gateway.state.backend import state_store
from gateway.state.store import StateStore, StoreUnavailable
from spill import ArtifactNotFound, StoreError


def add_arguments(parser: argparse.ArgumentParser, common: Callable[[argparse.ArgumentParser], None]) -> None:
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    listing = sub.add_parser(
        "list",
        help="list artifacts, oldest first",
        description="List every artifact of every session, oldest first: id, size, time and session. "
        "Without a config file, those under the default state directory.",
    )
    common(listing)
    listing.add_argument("--json", action="store_true", help="print a JSON array")
    read = sub.add_parser(
        "read",
        help="write an artifact's bytes to stdout",
        description="Write an artifact's bytes (all of them, or a byte range) to stdout, exactly as stored.",
    )
    common(read)
    read.add_argument("id", help="artifact id, as shown to the model (one that begins with '-': after --)")
    read.add_argument("--offset", type=int, default=0, help="first byte (default 0)")
    read.add_argument("--limit", type=int, default=None, help="bytes to read (default: to the end)")
    common(
        sub.add_parser(
            "gc",
            help="apply retention now (max_age_days, max_total_bytes)",
            description="Remove the artifacts [spill] max_age_days and max_total_bytes no longer keep, as a "
            "running gateway does at start and after each spill, and say how many went.",
        )
    )


def run(config: Config, args: argparse.Namespace) -> int:
    return anyio.run(_run, config, args)


async def _run(config: Config, args: argparse.Namespace) -> int:
    store = state_store(config)
    try:
        if args.action == "list":
            return await _list(store, args.json)
        if args.action == "read":
            return await _read(store, args.id, args.offset, args.limit)
        removed = await store.collect(
            max_age_seconds=config.spill.max_age_days * 86400,
            max_total_bytes=config.spill.max_total_bytes,
        )
        sys.stdout.write(f"removed {plural(len(removed), 'artifact')} ({sum(a.size for a in removed)} bytes)\n")
        return 0
    except (StoreError, StoreUnavailable) as exc:
        sys.stderr.write(f"prefixgate: {exc}\n")
        return 1
    finally:
        await store.aclose()


async def _list(store: StateStore, as_json: bool) -> int:
    items = await store.list_artifacts()
    if as_json:
        rows = [{"id": a.id, "session": a.session, "size": a.size, "mtime": a.mtime} for a in items]
        sys.stdout.write(json.dumps(rows, indent=2) + "\n")
        return 0
    for a in items:
        when = datetime.datetime.fromtimestamp(a.mtime).isoformat(timespec="seconds")
        sys.stdout.write(f"{a.id}  {a.size:>10}  {when}  session {a.session[:12]}\n")
    sys.stdout.write(f"{plural(len(items), 'artifact')}, {sum(a.size for a in items)} bytes\n")
    return 0


async def _read(state: StateStore, artifact_id: str, offset: int, limit: int | None) -> int:
    if offset < 0 or (limit is not None and limit < 0):
        sys.stderr.write("prefixgate: --offset and --limit must be >= 0\n")
        return 2
    try:
        store = await state.find_artifact(artifact_id)
    except ArtifactNotFound:
        sys.stderr.write(f"prefixgate: no artifact with id {artifact_id!r}\n")
        return 1

    def copy() -> int:
        try:
            size = store.size(artifact_id)
            length = size - offset if limit is None else limit
            position, out = offset, sys.stdout.buffer
            while length > 0 and position < size:
                chunk = store.read(artifact_id, position, min(length, 1 << 20))
                if not chunk:
                    break
                _output(functools.partial(out.write, chunk))
                position += len(chunk)
                length -= len(chunk)
            _output(out.flush)
        except ArtifactNotFound:
            sys.stderr.write(f"prefixgate: no artifact with id {artifact_id!r}\n")
            return 1
        return 0

    return await anyio.to_thread.run_sync(copy)


def _output(action: Callable[[], object]) -> None:
    """A write (or flush) of the artifact to stdout; one that fails (``> /dev/full``, ``| head``)
    is the command's end in one line, as the text commands' output is (``base.unwritable``)."""
    try:
        action()
    except OSError as exc:
        raise unwritable(exc) from None
