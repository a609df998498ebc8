"""Which server gave a principal a link to a resource that no server lists.

A tool result's ``resource_link`` (or embedded ``resource``; a prompt's message's too) names a
URI its client may read next, and the spec does not promise that URI is in ``resources/list``
or matches a template.
Directly, the client reads it from the server that gave it; through the gateway a URI that no
listed resource or template owns went to the first server offering resources, which need not
be that one ("Unknown resource"). So the URIs of each principal's results are remembered with
their server, its newest ``MAX_LINKS`` (one principal's many never cost another its own), and
such a URI is read from the server that linked it. Only a URI nothing listed owns: a server
cannot take another's listed resources over. Only the first ``MAX_BLOCKS`` blocks of a result
are looked at, so a result of many blocks costs the loop no more than a small one.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

MAX_LINKS = 256
"""Linked URIs remembered per principal (its oldest forgotten first)."""
MAX_BLOCKS = 64
"""Content blocks of one result looked at for links."""


class Links:
    def __init__(self) -> None:
        self._by: dict[object, OrderedDict[str, str]] = {}

    def note(self, principal: object, server_id: str, result: Mapping[str, Any]) -> None:
        """Remember the URIs ``result`` (a tool result of ``server_id``) links to, for ``principal``."""
        content = result.get("content")
        if isinstance(content, list):
            self._note(principal, server_id, content[:MAX_BLOCKS])

    def note_prompt(self, principal: object, server_id: str, result: Mapping[str, Any]) -> None:
        """The same for a ``prompts/get`` result: a message's content may link to a resource too."""
        messages = result.get("messages")
        if isinstance(messages, list):
            blocks = [m.get("content") for m in messages[:MAX_BLOCKS] if isinstance(m, dict)]
            self._note(principal, server_id, blocks)

    def _note(self, principal: object, server_id: str, blocks: list[Any]) -> None:
        for block in blocks:
            if not isinstance(block, dict):
                continue
            kind = block.get("type")
            if kind == "resource_link":
                uri = block.get("uri")
            elif kind == "resource" and isinstance(resource := block.get("resource"), dict):
                uri = resource.get("uri")
            else:
                continue
            if isinstance(uri, str):
                links = self._by.setdefault(principal, OrderedDict())
                links[uri] = server_id
                links.move_to_end(uri)
                if len(links) > MAX_LINKS:
                    links.popitem(last=False)

    def forget(self, principal: object) -> None:
        """A principal gone for good (its token revoked): its links with it."""
        self._by.pop(principal, None)

    def owner(self, principal: object, uri: str) -> str | None:
        """The server whose result last linked ``principal`` to ``uri``, if one did."""
        links = self._by.get(principal)
        return links.get(uri) if links is not None else None
