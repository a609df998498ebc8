"""``serve`` takes a changed config without a restart: the file watched, or SIGHUP over HTTP.

``[gateway] reload = "watch"`` (the default) polls the config file (its size, times and
inode, twice a second; no watcher library, no thread) and reloads once it has stopped
changing for ``SETTLE`` seconds, so an editor's save in steps is one reload; over HTTP
SIGHUP reloads too. ``"signal"``: SIGHUP only (over HTTP). ``"off"``: a change waits for a
restart. Over stdio SIGHUP keeps meaning what it means to a child of an agent (the agent
went away): the gateway stops. The mode is itself reloadable: the one the running config
holds decides what a change of the file or a SIGHUP does (``file_changed``, ``signalled``).

A reload reads the whole file again: a file that does not parse, or that changes what
cannot change while serving, is one log line and the running config keeps serving; a file
that parses to the config being served (a comment, whitespace, key order) changes nothing;
anything else is applied as a diff (``gateway.engine.reload``).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import anyio.to_thread

from gateway.config import ConfigError, Stamp, load_config, stamp
from gateway.engine.hub import Hub
from gateway.engine.reload import apply, refused, unfit

if TYPE_CHECKING:
    from gateway.commands.tokenfile import TokenFile

log = logging.getLogger("prefixgate")

POLL = 0.5
"""Seconds between looks at the config file."""
SETTLE = 0.3
"""Seconds the file must stay unchanged before it is read (an editor may write it in steps)."""


class Reloader:
    """Reloads of one gateway, one at a time; with ``token_file`` (``serve --http``), each reads
    the tokens again too, whatever becomes of the config (gateway/commands/tokenfile.py)."""

    def __init__(self, hub: Hub, path: Path, token_file: TokenFile | None = None) -> None:
        self.hub = hub
        self.path = path
        self.token_file = token_file
        self._lock = anyio.Lock()

    async def reload(self, why: str) -> None:
        async with self._lock:
            await self._reload(why)
            if self.token_file is not None:
                await self.token_file.reload(why, self.hub.config.profiles)

    async def token_file_changed(self) -> None:
        """The token file changed: read again when the running config says ``reload = "watch"``."""
        if self.token_file is None or self.hub.config.gateway.reload != "watch":
            return
        async with self._lock:
            await self.token_file.reload("the token file changed", self.hub.config.profiles)

    async def file_changed(self) -> None:
        """The file changed: reloaded when the running config says ``reload = "watch"``
        (a reload may have changed it since the start, either way)."""
        mode = self.hub.config.gateway.reload
        if mode != "watch":
            log.debug("the config file changed: not reloaded ([gateway] reload = %r)", mode)
            return
        await self.reload("the file changed")

    async def signalled(self) -> None:
        """SIGHUP over HTTP: a reload, unless a reload set ``reload = "off"`` (a change then
        waits for a restart; the gateway goes on serving, as it did when it was told that)."""
        if self.hub.config.gateway.reload == "off":
            log.warning('SIGHUP: the config is not reloaded: [gateway] reload = "off" (a restart takes a change)')
            return
        await self.reload("SIGHUP")

    async def _reload(self, why: str) -> None:
        hub = self.hub
        try:
            new = await anyio.to_thread.run_sync(load_config, self.path)
        except ConfigError as exc:
            log.error("config reload (%s) refused: %s; the running config keeps serving", why, exc)
            return
        served = [each.config.profile for each in hub.family]
        blocked = refused(hub.config, new, served)
        if blocked:
            log.error(
                "config reload (%s) refused: %s cannot change while serving (restart prefixgate to change it); "
                "the running config keeps serving, nothing of the new file is applied",
                why,
                ", ".join(blocked),
            )
            return
        if all(each.config == new.view(profile) for each, profile in zip(hub.family, served, strict=True)):
            log.info("config reload (%s): nothing to apply (the file means what the running config means)", why)
            return
        misfits = await unfit(hub, new)
        if misfits:
            log.error(
                "config reload (%s) refused: %s; the running config keeps serving, nothing of the new file is applied",
                why,
                "; ".join(misfits),
            )
            return
        changes = await apply(hub, new)
        log.info("config reloaded (%s): %s", why, changes.summary())


async def watch(path: Path, changed: Callable[[], Awaitable[None]], seen: Stamp | None) -> None:
    """Call ``changed`` after each change of ``path`` once it has settled (until cancelled).
    ``seen``: its ``stamp`` as the config served was read (``Config.read``), so an edit made
    as soon as the gateway answers is a change."""
    while True:
        await anyio.sleep(POLL)
        now = stamp(path)
        if now == seen or now is None:  # unchanged, or gone for a moment (an editor's rename)
            continue
        while True:  # settled: the same for SETTLE seconds
            await anyio.sleep(SETTLE)
            later = stamp(path)
            if later == now:
                break
            now = later
        seen = now
        await changed()
