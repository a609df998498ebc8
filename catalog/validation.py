"""Argument validation with jsonschema-rs: compile a tool's input schema, find a violation.

jsonschema-rs never retrieves a remote ``$ref`` (our retriever refuses; python-jsonschema's
deprecated automatic retrieval fetched any URL a schema named), its regex engine is
linear-time for patterns without backreferences (and bounded by a backtrack limit for the
rest), and it is fast enough to run on every call. It holds the GIL while it validates, so
work whose cost is not bounded (a schema with references can share subschemas and cost
exponential time) must run in another process; see :func:`is_referencing`.

Pure: only jsonschema-rs, so the validation worker process starts fast.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Iterator
from typing import Any, NoReturn
from urllib.parse import quote

import jsonschema_rs

from catalog.keywords import SUBSCHEMA, SUBSCHEMA_LIST, SUBSCHEMA_MAP

JSON = Any

REFERENCE_KEYS = frozenset({"$ref", "$dynamicRef", "$recursiveRef"})

REMOTE_REFUSED = "remote references are never fetched"


class RemoteReference(Exception):
    """Raised by the retriever: a schema named a resource outside itself."""


def _refuse(uri: str) -> NoReturn:
    raise RemoteReference(REMOTE_REFUSED)


_UNKNOWN_DIALECT = "Unknown meta-schema"


_URI_CHARACTERS = re.compile(r"[A-Za-z0-9\-._~!$&'()*+,;=:@/?]*(?:#[A-Za-z0-9\-._~!$&'()*+,;=:@/?%]*)?")
"""A reference jsonschema-rs takes as it is (a stray ``%`` aside): RFC 3986 characters, one ``#``."""
_URI_SAFE = "!$&'()*+,;=:@/?"
"""What ``quote`` keeps besides letters, digits and ``_.-~``: the rest is percent-encoded."""
_LONE_PERCENT = re.compile(r"%(?![0-9A-Fa-f]{2})")


def as_uri(reference: str) -> str:
    """``reference`` as the URI-reference jsonschema-rs requires, naming the same place.

    A ``$ref`` may hold what a URI may not: zod-to-json-schema refers to a reused subschema by
    its path, so a property called ``first name`` or ``名前`` gives ``#/properties/first name``.
    python-jsonschema resolves it (and the server's own validation with it); jsonschema-rs
    refused to compile, and the tool was quarantined, though it works directly. As RFC 3987
    maps an IRI to a URI: each other character percent-encoded (UTF-8), a ``#`` after the
    first too, and a ``%`` that starts no escape, which python-jsonschema reads literally.
    """
    if _URI_CHARACTERS.fullmatch(reference) and not _LONE_PERCENT.search(reference):
        return reference
    base, hash_, fragment = reference.partition("#")
    try:
        parts = [quote(_LONE_PERCENT.sub("%25", part), safe=_URI_SAFE + "%") for part in (base, fragment)]
    except UnicodeEncodeError:  # a lone surrogate: jsonschema-rs words the refusal
        return reference
    return parts[0] + hash_ + parts[1]


def _uri_references(schema: JSON) -> JSON:
    """A copy of ``schema`` whose references are URI-references (:func:`as_uri`), keyword by
    keyword: a literal (``const``, ``enum``, ``default``) is never rewritten."""
    if not isinstance(schema, dict):
        return schema
    out = dict(schema)
    for key, value in schema.items():
        if key in REFERENCE_KEYS and isinstance(value, str):
            out[key] = as_uri(value)
        elif isinstance(value, dict) and (key in SUBSCHEMA or key == "items"):
            out[key] = _uri_references(value)
        elif isinstance(value, list) and (key in SUBSCHEMA_LIST or key == "items"):
            out[key] = [_uri_references(v) for v in value]
        elif isinstance(value, dict) and (key in SUBSCHEMA_MAP or key == "dependencies"):
            out[key] = {name: _uri_references(v) for name, v in value.items()}
    return out


def _needs_uri_references(schema: JSON) -> bool:
    return any(as_uri(ref) != ref for _, ref in references(schema))


def compile_validator(schema: JSON) -> jsonschema_rs.Validator:
    """The argument validator of a (canonical) schema; raises ``jsonschema_rs.ValidationError``.

    Formats are not asserted (python-jsonschema's default, kept so no call changes meaning).
    An unknown ``$schema`` falls back to 2020-12, as python-jsonschema's ``validator_for``
    does, instead of failing. A reference that is no URI-reference is compiled as one
    (:func:`as_uri`); the published schema is left as its server wrote it.
    """
    if _needs_uri_references(schema):
        schema = _uri_references(schema)
    try:
        return jsonschema_rs.validator_for(schema, retriever=_refuse, validate_formats=False)
    except jsonschema_rs.ValidationError as err:
        if not (isinstance(schema, dict) and err.message.startswith(_UNKNOWN_DIALECT)):
            raise
    plain = {k: v for k, v in schema.items() if k != "$schema"}
    return jsonschema_rs.validator_for(plain, retriever=_refuse, validate_formats=False)


def references(schema: JSON, path: tuple[str | int, ...] = ()) -> Iterator[tuple[tuple[str | int, ...], str]]:
    """Every ``$ref``-like keyword in a schema: (path of the object holding it, reference)."""
    stack: list[tuple[tuple[str | int, ...], JSON]] = [(path, schema)]
    while stack:
        where, value = stack.pop()
        if isinstance(value, dict):
            for key, item in value.items():
                if key in REFERENCE_KEYS and isinstance(item, str):
                    yield where, item
                stack.append(((*where, key), item))
        elif isinstance(value, list):
            stack.extend(((*where, i), item) for i, item in enumerate(value))


def is_referencing(schema: JSON) -> bool:
    """Whether a schema uses references (else it is a tree: validation is linear)."""
    return next(references(schema), None) is not None


MAX_ERRORS = 64
"""Errors looked at to pick the most relevant one (each can carry a large context)."""


def violation(validator: jsonschema_rs.Validator, instance: JSON) -> tuple[list[str | int], str] | None:
    """The most relevant violation (instance path, message), like python-jsonschema's
    ``best_match``: the shallowest error, ``anyOf``/``oneOf`` last; None if valid.

    ``is_valid`` first: it short-circuits and collects no error context.
    """
    if validator.is_valid(instance):
        return None
    errors = []
    for error in validator.iter_errors(instance):
        errors.append(error)
        if len(errors) >= MAX_ERRORS:
            break
    if not errors:
        return None
    best = min(errors, key=lambda e: (len(e.instance_path), e.kind.name in _UNIONS))
    said = ""
    nearest = _nearest(best)
    if nearest is not None:
        best, said = nearest
    return list(best.instance_path), _infinite(instance, best.instance_path) + best.message + _condition(
        best.schema_path
    ) + said


def _infinite(instance: JSON, path: Iterable[str | int]) -> str:
    """What to say first when the value refused is a number no double holds (``1e400`` reads
    as infinity; a peer's ``NaN``): the validator sees it as ``null``, as the server would be
    sent it, and '"null" is not of type "number"' named a value the caller never sent."""
    value = instance
    for part in path:
        try:
            value = value[part]
        except (KeyError, IndexError, TypeError):
            return ""
    if isinstance(value, float) and not math.isfinite(value):
        shown = "NaN" if math.isnan(value) else "-infinity" if value < 0 else "infinity"
        return f"{shown}, a number no double holds, reads as null: "
    return ""


_UNIONS = ("anyOf", "oneOf")


def _nearest(error: Any, depth: int = 0) -> tuple[Any, str] | None:
    """For an ``anyOf``/``oneOf`` no branch of which matched: the shallowest error of the one
    branch nearest to the value, and the words that say so; None when no branch is nearest.

    '{...} is not valid under any of the schemas listed' names neither the argument inside
    nor the rule (a discriminated union of objects: zod, pydantic). A branch is farther the
    more it disagrees at the union's own level: a ``const``/``enum`` of a direct property
    (the discriminator), then a ``type`` of the value itself; then the more errors it has.
    Two branches equally near: the union's own message stands (nothing is guessed)."""
    context = getattr(error.kind, "context", None)
    if error.kind.name not in _UNIONS or not context or depth >= 8:
        return None
    level = len(error.instance_path)

    def distance(branch: list[Any]) -> tuple[bool, bool, int]:
        tag = any(e.kind.name in ("const", "enum") and len(e.instance_path) == level + 1 for e in branch)
        kind = any(e.kind.name == "type" and len(e.instance_path) == level for e in branch)
        return tag, kind, len(branch)

    ranked = sorted((distance(branch), index) for index, branch in enumerate(context) if branch)
    if not ranked or (len(ranked) > 1 and ranked[0][0] == ranked[1][0]):
        return None
    index = ranked[0][1]
    inner = min(context[index], key=lambda e: (len(e.instance_path), e.kind.name in _UNIONS))
    said = f" (no {error.kind.name} branch matched; nearest: branch {index + 1} of {len(context)})"
    return _nearest(inner, depth + 1) or (inner, said)


_CONDITIONS = {
    "dependentRequired": "dependentRequired",
    "dependencies": "dependencies",
    "dependentSchemas": "dependentSchemas",
    "then": "if/then",
    "else": "if/else",
}
"""Keywords that make a rule hold only for some arguments: a violation under one says so."""


def _condition(schema_path: Iterable[str | int]) -> str:
    """`` (under the schema's KEYWORD)`` for the deepest conditional keyword on the violated
    rule's schema path, else "": '"b" is a required property' where the schema's ``required``
    lists no ``b`` (``dependentRequired`` asked for it) names no rule the caller can find."""
    found = ""
    before: str | int | None = None
    for part in schema_path:
        if isinstance(part, str) and part in _CONDITIONS and before not in SUBSCHEMA_MAP:
            found = f" (under the schema's {_CONDITIONS[part]})"
        before = part
    return found


def unset_nulls(schema: JSON, arguments: dict[str, JSON]) -> list[str]:
    """The top-level arguments that are ``null`` where the schema makes them optional and not
    nullable: what a model means by leaving them out (strict structured-output modes give an
    optional field a nullable type and send ``null``). Left in, such a call would be refused
    for an argument the model did not mean to give; taken out, the server sees it omitted.

    Only a property whose own ``type``, ``enum`` or ``const`` excludes ``null`` and that has no
    keyword that could admit it otherwise (``anyOf``, ``oneOf``, a reference, ...) is taken out;
    a required one never is (it stays, and validation names it).
    """
    if not isinstance(schema, dict):
        return []
    properties = schema.get("properties")
    required = schema.get("required")
    if not isinstance(properties, dict):
        return []
    needed = set(required) if isinstance(required, list) else set()
    return [
        key
        for key, value in arguments.items()
        if value is None and key not in needed and _excludes_null(properties.get(key))
    ]


_ADMITTING = frozenset({"anyOf", "oneOf", "allOf", "not", "if", "nullable", *REFERENCE_KEYS})
"""Keywords that could make ``null`` valid for a property in ways not read here: leave it alone then."""


def _excludes_null(subschema: JSON) -> bool:
    """Whether the property's own ``type``, ``enum`` or ``const`` make ``null`` invalid."""
    if not isinstance(subschema, dict) or _ADMITTING & subschema.keys():
        return False
    excluded = False
    if "enum" in subschema:
        enum = subschema["enum"]
        if not isinstance(enum, list) or None in enum:
            return False
        excluded = True
    if "const" in subschema:
        if subschema["const"] is None:
            return False
        excluded = True
    kind = subschema.get("type", None)
    if isinstance(kind, str):
        return kind != "null"
    if isinstance(kind, list) and kind and all(isinstance(k, str) for k in kind):
        return "null" not in kind
    return excluded and "type" not in subschema


_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_INTEGER = re.compile(r"-?(?:0|[1-9][0-9]*)")
MAX_LITERAL = 64
"""Longest string read as a number here: longer is not a number a model meant."""
_SCALARS = frozenset({"integer", "number", "boolean"})


def scalars_in_strings(schema: JSON, arguments: dict[str, JSON]) -> dict[str, JSON]:
    """The top-level arguments given as a string holding a JSON literal (``"2"``, ``"2.5"``,
    ``"true"``) where the schema asks for that scalar, each with its value: what a model
    means by quoting it, and what most servers take (pydantic's lax mode, which Python
    servers validate with, reads ``"2"`` as 2). Refused as given, such a call would fail
    through the gateway where it succeeds directly.

    Only a property whose own ``type`` is ``integer``, ``number`` or ``boolean`` (or a list
    of these and ``null``) and that has no keyword that could admit a string otherwise
    (``anyOf``, a reference, ...) is read; the caller validates the result, and keeps the
    arguments as given if that still fails.
    """
    if not isinstance(schema, dict) or not isinstance(properties := schema.get("properties"), dict):
        return {}
    found: dict[str, JSON] = {}
    for key, value in arguments.items():
        if type(value) is not str or len(value) > MAX_LITERAL:
            continue
        subschema = properties.get(key)
        if not isinstance(subschema, dict) or _ADMITTING & subschema.keys():
            continue
        kind = subschema.get("type")
        kinds = {kind} if isinstance(kind, str) else set(kind) if isinstance(kind, list) else set()
        if not kinds & _SCALARS or not kinds <= _SCALARS | {"null"}:
            continue
        literal = _literal(value, kinds)
        if literal is not None:
            found[key] = literal
    return found


def _literal(text: str, kinds: set[str]) -> JSON:
    """``text`` read as a value of one of ``kinds`` (JSON's own spelling only), else None."""
    if "boolean" in kinds and text in ("true", "false"):
        return text == "true"
    if "integer" in kinds and _INTEGER.fullmatch(text):
        return int(text)
    if "number" in kinds and _NUMBER.fullmatch(text):
        value = json.loads(text)
        return value if not isinstance(value, float) or math.isfinite(value) else None
    return None
