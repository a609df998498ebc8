"""``prefixgate import``'s options, its run (stdout or ``--out``) and its exit status."""

from __future__ import annotations

import argparse
import contextlib
import errno
import os
import shlex
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from gateway.commands.arguments import CLIENTS
from gateway.commands.importer.merge import import_sources
from gateway.commands.importer.sources import (
    FORMATS,
    GEMINI_NOT_TRUSTED,
    NOT_APPROVED,
    NOT_TRUSTED,
    PROG,
    InputError,
    Source,
    collect_sources,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of ``prefixgate import`` (dests: paths, source, out, force, approve_project_servers)."""
    parser.add_argument(
        "paths",
        nargs="*",
        metavar="PATH",
        help="client config files (or project directories) to import, merged in order; "
        "the format is detected from the name and content unless --from is given",
    )
    parser.add_argument(
        "--from",
        dest="source",
        choices=FORMATS,
        metavar="CLIENT",
        help="the client that wrote the files: " + ", ".join(FORMATS) + "; without PATH, read its usual locations",
    )
    parser.add_argument("--out", metavar="FILE", help="write the config to FILE (mode 0600) instead of stdout")
    parser.add_argument("--force", action="store_true", help="let --out overwrite an existing file")
    parser.add_argument(
        "--approve-project-servers",
        action="store_true",
        help="import a project .mcp.json's servers enabled though Claude Code has not approved them "
        "(those it rejected stay disabled), and a project .codex/config.toml's or .gemini/settings.json's though "
        "Codex or Gemini CLI does not trust the project",
    )


def _write_out(path: str, text: str, force: bool) -> None:
    """Write the config whole or not at all: into a temporary file beside ``path`` first
    (a full disk fails there, leaving nothing), then renamed over it (``force``) or linked
    to it, which fails if it exists (no overwrite, even by a file made meanwhile). A symbolic
    link (a config kept in a dotfiles repository) is written through: the file it names is
    replaced, the link stays."""
    if force and os.path.islink(path):
        path = os.path.realpath(path)
    directory = os.path.dirname(os.path.abspath(path))
    try:
        fd, tmp = tempfile.mkstemp(prefix=".prefixgate-import-", dir=directory)
    except OSError as exc:
        raise InputError(f"{path}: cannot write: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(text.encode("utf-8"))
        if force:
            os.replace(tmp, path)
            return
        try:
            os.link(tmp, path)
        except FileExistsError:
            raise InputError(f"{path} already exists; pass --force to overwrite it") from None
        except OSError as exc:
            if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EXDEV, errno.EMLINK):
                raise
            if os.path.lexists(path):  # no hard links here: checked, then renamed
                raise InputError(f"{path} already exists; pass --force to overwrite it") from None
            os.replace(tmp, path)
    except OSError as exc:
        raise InputError(f"{path}: cannot write: {exc.strerror or exc}") from None
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def next_step(out: str | None, sources: Sequence[Source]) -> str:
    """The line that ends an import: the client keeps running every server it imported, so once
    prefixgate is registered too, each runs twice and every tool is offered twice (the very
    function count and prompt prefix prefixgate is there to keep down) unless they go."""
    clients = {source.fmt for source in sources}
    client = next(iter(clients)) if len(clients) == 1 else None
    doctor = f"prefixgate doctor --config {shlex.quote(out) if out else 'FILE'}"
    if client in CLIENTS:
        doctor += f" --client {client}"
    files = ", ".join(dict.fromkeys(source.path for source in sources))
    return (
        f"{PROG}: next: {doctor} prints how to register prefixgate; once it is, remove or disable "
        f"the imported servers where they came from ({files}): else each runs twice, directly and through prefixgate"
    )


def run(args: argparse.Namespace, *, env: Mapping[str, str] | None = None, cwd: Path | None = None) -> int:
    """Run ``prefixgate import``: 0 success, 2 bad input or a refused --out."""
    env = os.environ if env is None else env
    cwd = Path.cwd() if cwd is None else cwd
    to_file = bool(args.out) and args.out != "-"
    try:
        if to_file and not args.force and os.path.lexists(args.out):
            raise InputError(f"{args.out} already exists; pass --force to overwrite it")
        sources, notes = collect_sources(args.paths, args.source, env=env, cwd=cwd)
        if args.approve_project_servers:
            for entry in (entry for source in sources for entry in source.entries):
                if entry.scope_disabled in (NOT_APPROVED, NOT_TRUSTED, GEMINI_NOT_TRUSTED):
                    entry.scope_disabled = None
        result = import_sources(sources)
        if result.servers == 0:
            for line in [*notes, *result.messages[:-1]]:
                print(line, file=sys.stderr)
            raise InputError(
                "no server could be imported from " + ", ".join(s.path for s in sources)
                if any(s.entries for s in sources)
                else "no MCP servers found in " + ", ".join(s.path for s in sources)
            )
        if to_file:
            _write_out(args.out, result.text, args.force)
        else:
            sys.stdout.flush()
            buffer = getattr(sys.stdout, "buffer", None)
            if buffer is not None:
                buffer.write(result.text.encode("utf-8"))
                buffer.flush()
            else:
                sys.stdout.write(result.text)
        for line in [*notes, *result.messages]:
            print(line, file=sys.stderr)
        if to_file:
            print(f"{PROG}: wrote {args.out}", file=sys.stderr)
        print(next_step(args.out if to_file else None, sources), file=sys.stderr)
        return 0
    except InputError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="Print a prefixgate config holding the MCP servers configured in other clients.",
    )
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
