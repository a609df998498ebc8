"""Everything else the servers offer, aggregated: resources, templates, prompts, and the
capabilities the gateway advertises for them.

Resource URIs pass through unchanged; a URI offered by two servers goes to the first
in code-unit id order (and a warning says so). A template the SDK cannot match (an explode
``{q*}`` or a prefix ``{v:3}`` modifier, which RFC 6570 has and its parser refuses) still
routes its URIs: its literal text in order, anything where its expressions are, after every
template the SDK can match. Prompt names are qualified and
sanitised exactly like tool names. Every list is sorted in code-unit order, so its
bytes depend only on what the servers offer.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from mcp.shared.uri_template import InvalidUriTemplate, UriTemplate

from catalog.names import Profile, assign_names, code_unit_key
from catalog.schema import sort_keys
from gateway.downstream.connection import Downstream

SurfaceInputs = tuple[Profile, str, tuple[tuple[str, str, tuple[Any, ...], tuple[Any, ...], tuple[Any, ...]], ...]]
"""(naming profile, separator, (server id, prefix, resources, templates, prompts) per listed
server in code-unit id order)."""


@dataclass
class Surface:
    resources: list[dict[str, Any]] = field(default_factory=list)
    templates: list[dict[str, Any]] = field(default_factory=list)
    prompts: list[dict[str, Any]] = field(default_factory=list)
    resource_owner: dict[str, str] = field(default_factory=dict)
    template_owner: list[tuple[UriTemplate | None, str, str]] = field(default_factory=list)
    """(parsed template or None, template string, server) in code-unit order of server id."""
    loose_owner: list[tuple[tuple[str, ...], str]] = field(default_factory=list)
    """(literal pieces, server) of the templates the SDK cannot parse, in the same order."""
    template_server: dict[str, str] = field(default_factory=dict)
    """template string -> server."""
    matchers: list[tuple[UriTemplate | tuple[str, ...], str]] = field(default_factory=list)
    """Each template (parsed, or its literal pieces) and server in matching order: those the
    SDK parses, then the loose ones."""
    by_head: dict[str, list[int]] = field(default_factory=dict)
    """A template's literal text before its first expression -> its places in the matching
    order (``matchers``): a URI is tried only against the templates whose head it starts
    with, not all of them (20,000 templates tried one by one cost ~65 ms a read, on the loop)."""
    head_lengths: tuple[int, ...] = ()
    prompt_route: dict[str, tuple[str, str]] = field(default_factory=dict)
    """qualified prompt name -> (server, original name)."""
    warnings: list[str] = field(default_factory=list)

    def owner_of_uri(self, uri: str) -> str | None:
        """The server a URI belongs to: a listed resource, else a matching template."""
        owner = self.resource_owner.get(uri)
        if owner is not None:
            return owner
        places = sorted(p for n in self.head_lengths if n <= len(uri) for p in self.by_head.get(uri[:n], ()))
        for place in places:
            template, server = self.matchers[place]
            if _fits(template, uri) if isinstance(template, tuple) else template.match(uri) is not None:
                return server
        return None

    def owner_of_template(self, template: str) -> str | None:
        return self.template_server.get(template)

    def index_templates(self) -> None:
        """Fill ``matchers``, ``by_head`` and ``head_lengths`` from ``template_owner`` and ``loose_owner``."""
        self.matchers = [(t, server) for t, _, server in self.template_owner if t is not None]
        self.matchers += self.loose_owner
        heads = [text.partition("{")[0] for t, text, _ in self.template_owner if t is not None]
        heads += [pieces[0] for pieces, _ in self.loose_owner]
        self.by_head = {}
        for place, head in enumerate(heads):
            self.by_head.setdefault(head, []).append(place)
        self.head_lengths = tuple(sorted({len(h) for h in heads}))


def _first_owner(
    items: Sequence[tuple[str, dict[str, Any]]], key: str, kind: str, warnings: list[str]
) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """Keep each ``key`` value once (first server in code-unit id order wins)."""
    owner: dict[str, str] = {}
    kept: list[dict[str, Any]] = []
    for server, item in items:
        value = item.get(key)
        if not isinstance(value, str):
            warnings.append(f"ignored {kind} without a string {key} from server {server!r}")
            continue
        if value in owner:
            if owner[value] != server:
                warnings.append(
                    f"{kind} {value!r} is offered by {owner[value]!r} and {server!r}: served by {owner[value]!r}"
                )
            continue
        owner[value] = server
        kept.append(sort_keys(item))
    kept.sort(key=lambda item: code_unit_key(item[key]))
    return kept, owner


def surface_inputs(downstreams: Sequence[Downstream], profile: Profile, separator: str) -> SurfaceInputs:
    """Everything a surface is built from (``surface_of``), taken from the servers on the loop:
    equal inputs build an equal surface. Each server's lists are tuples replaced whole when it
    re-lists, so unchanged ones compare by identity, in no time, and a build from them may run
    in a worker thread while the servers change."""
    listed = sorted((d for d in downstreams if d.listed), key=lambda d: code_unit_key(d.id))
    return (profile, separator, tuple((d.id, d.config.prefix, d.resources, d.templates, d.prompts) for d in listed))


def build_surface(downstreams: Sequence[Downstream], profile: Profile, separator: str) -> Surface:
    return surface_of(surface_inputs(downstreams, profile, separator))


def surface_of(inputs: SurfaceInputs) -> Surface:
    """The surface of the servers' lists (``surface_inputs``): pure."""
    profile, separator, listed = inputs
    surface = Surface()
    resources = [(sid, r) for sid, _, found, _, _ in listed for r in found if isinstance(r, dict)]
    surface.resources, surface.resource_owner = _first_owner(resources, "uri", "resource", surface.warnings)
    templates = [(sid, t) for sid, _, _, found, _ in listed for t in found if isinstance(t, dict)]
    surface.templates, template_owner = _first_owner(templates, "uriTemplate", "resource template", surface.warnings)
    surface.template_server = template_owner
    for sid, *_ in listed:  # matching order: the first server in code-unit id order wins
        for text, server in template_owner.items():
            if server == sid:
                parsed = _parse(text)
                surface.template_owner.append((parsed, text, server))
                if parsed is None:
                    surface.loose_owner.append((tuple(_EXPRESSION.split(text)), server))
    surface.index_templates()

    raw_prompts = [
        (sid, prefix, p)
        for sid, prefix, _, _, found in listed
        for p in found
        if isinstance(p, dict) and isinstance(p.get("name"), str)
    ]
    names, renames = assign_names([(sid, prefix, p["name"]) for sid, prefix, p in raw_prompts], profile, separator)
    surface.warnings += [f"prompt {w.line()}" for w in renames]
    seen: set[str] = set()
    for sid, _, prompt in raw_prompts:
        qualified = names[(sid, prompt["name"])]
        if qualified in seen:
            continue
        seen.add(qualified)
        surface.prompt_route[qualified] = (sid, prompt["name"])
        surface.prompts.append(sort_keys({**prompt, "name": qualified}))
    surface.prompts.sort(key=lambda p: code_unit_key(p["name"]))
    return surface


def capability_union(downstreams: Sequence[Downstream]) -> dict[str, Any]:
    """The union of what the servers offer (tools are always served), everything the gateway
    may relay for one whose offer is not known yet (late, still starting, failing to start):
    a client keeps what it was told at ``initialize`` for its session, so one told less while
    a server was late never asked for the prompts and resources that server brought."""
    caps: dict[str, Any] = {"tools": {"listChanged": True}}
    for d in downstreams:
        offered = d.capabilities or _ANY
        if "resources" in offered:
            resources = caps.setdefault("resources", {"listChanged": True})
            if isinstance(offered["resources"], dict) and offered["resources"].get("subscribe"):
                resources["subscribe"] = True
        if "prompts" in offered:
            caps["prompts"] = {"listChanged": True}
        if "completions" in offered:
            caps["completions"] = {}
        if "logging" in offered:
            caps["logging"] = {}
    return caps


_ANY: dict[str, Any] = {"resources": {"subscribe": True}, "prompts": {}, "completions": {}, "logging": {}}
"""What a server not known yet may offer, as ``capability_union`` reads a server's capabilities."""

_EXPRESSION = re.compile(r"\{[^{}]*\}")
"""An RFC 6570 expression in a URI template."""


def _fits(pieces: tuple[str, ...], uri: str) -> bool:
    """Whether ``uri`` is ``pieces`` (a template's literal text) in order with any text between
    them: a glob with a wildcard per expression, matched left to right in linear time (a
    regular expression of many wildcards backtracks for long on a long URI that does not fit)."""
    first, last = pieces[0], pieces[-1]
    if len(pieces) < 2 or len(uri) < len(first) + len(last) or not uri.startswith(first) or not uri.endswith(last):
        return False
    at, end = len(first), len(uri) - len(last)
    for piece in pieces[1:-1]:
        found = uri.find(piece, at, end)
        if found < 0:
            return False
        at = found + len(piece)
    return True


def _parse(template: str) -> UriTemplate | None:
    try:
        return UriTemplate.parse(template)
    except (InvalidUriTemplate, ValueError):
        return None
