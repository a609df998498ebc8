"""Schema-aware canonical form and validity check of tool schemas.

Servers emit the same schema with drifting key order or duplicated ``required``
entries; publishing those bytes as-is would end a cache epoch for nothing. The
canonical form removes only differences that cannot change what the schema accepts.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

import jsonschema_rs
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from jsonschema.validators import validator_for

from catalog.keywords import STRING_SET, SUBSCHEMA, SUBSCHEMA_LIST, SUBSCHEMA_MAP
from catalog.metaschema import certified, format_checker
from catalog.model import JSON
from catalog.text import quote
from catalog.validation import REMOTE_REFUSED, as_uri, compile_validator, references

# Sets sort by code point (plain ``sorted``), the same order canonicaljson uses for keys.


_CONTAINERS = (dict, list)


def sort_keys(value: JSON) -> JSON:
    """Copy a JSON value with object keys sorted at every depth, arrays untouched."""
    if isinstance(value, dict):
        return {k: sort_keys(v) if isinstance(v := value[k], _CONTAINERS) else v for k in sorted(value)}
    if isinstance(value, list):
        return [sort_keys(v) if isinstance(v, _CONTAINERS) else v for v in value]
    return value


def _string_set(value: JSON) -> JSON:
    """De-duplicate and sort a string array; anything else is left for ``check``."""
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return sorted(set(value))
    return sort_keys(value)


def _subschema(value: JSON) -> JSON:
    if isinstance(value, dict):
        return _schema_object(value)
    return sort_keys(value)  # booleans, and malformed values kept for check to report


def _map_values(value: JSON, each: Callable[[JSON], JSON]) -> JSON:
    if isinstance(value, dict):
        return {k: each(value[k]) for k in sorted(value)}
    return sort_keys(value)


def _list_values(value: JSON, each: Callable[[JSON], JSON]) -> JSON:
    if isinstance(value, list):
        return [each(v) for v in value]
    return sort_keys(value)


def _dependency(value: JSON) -> JSON:
    """draft-07 ``dependencies`` member: a subschema or a ``dependentRequired`` array."""
    return _string_set(value) if isinstance(value, list) else _subschema(value)


def _keyword(key: str, value: JSON) -> JSON:
    if key in SUBSCHEMA:
        return _subschema(value)
    if key in SUBSCHEMA_LIST:
        return _list_values(value, _subschema)
    if key in SUBSCHEMA_MAP:
        return _map_values(value, _subschema)
    if key in STRING_SET:
        return _string_set(value)
    if key == "items":  # draft 2020-12: a subschema; earlier drafts: also an ordered array
        return _list_values(value, _subschema) if isinstance(value, list) else _subschema(value)
    if key == "dependentRequired":
        return _map_values(value, _string_set)
    if key == "dependencies":
        return _map_values(value, _dependency)
    return sort_keys(value)  # const, default, enum, examples, vendor and unknown keys


def _schema_object(schema: dict[str, JSON]) -> dict[str, JSON]:
    # Every keyword keeps a scalar value as it is: only containers go through _keyword
    # (most keywords of a schema are scalars; the call per keyword was a third of the time).
    return {k: _keyword(k, v) if isinstance(v := schema[k], _CONTAINERS) else v for k in sorted(schema)}


def canonicalize(schema: JSON) -> JSON:
    """Return the canonical form of a JSON Schema (a new value; the input is untouched).

    Idempotent. Keys sorted at every depth (dicts are built in sorted order so any
    serialiser emits the same bytes); ``required``/``type``/``dependentRequired`` string
    arrays de-duplicated and sorted; everything order-sensitive or literal kept.
    """
    return _subschema(schema)


_IDENT = re.compile(r"[A-Za-z_$][A-Za-z0-9_$-]*")
_MAX_MESSAGE = 200


_MAX_PATH = 200


def json_path(root: str, parts: Iterable[str | int]) -> str:
    """``root.properties.x.items[0]`` style path; odd names are quoted as JSON strings.

    At most ``_MAX_PATH`` characters: the names and the depth are a peer's (a schema's, a
    call's arguments), and the path is quoted in one-line reasons and ``isError`` texts. A
    longer one keeps its start and its end (where the problem is) around an ellipsis."""
    out = root
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        elif _IDENT.fullmatch(part):
            out += "." + part
        else:
            out += "[" + _one_line(repr(part)) + "]"
    if len(out) > _MAX_PATH:
        half = (_MAX_PATH - 1) // 2
        out = out[:half] + "…" + out[-half:]
    return out


def _one_line(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _MAX_MESSAGE else text[: _MAX_MESSAGE - 1] + "…"


def check(schema: JSON, where: str = "inputSchema") -> str | None:
    """``None`` if ``schema`` is a valid object schema, else a one-line reason.

    MCP and the providers require ``"type": "object"`` at the root. The schema is
    validated against its ``$schema`` dialect (default 2020-12). Call it on the
    canonical form, so defects canonicalisation removes don't cost the tool.
    ``where`` names the root in the reason (``inputSchema``/``outputSchema``).
    Finally the schema must compile for argument validation (:func:`reference_problem`):
    a ``$ref`` that cannot be resolved locally is a reason, never a fetch.
    """
    if not isinstance(schema, dict):
        return f"{where}: root must be an object schema, got {type(schema).__name__}"
    if schema.get("type") != "object":
        got = _one_line(repr(schema.get("type"))) if "type" in schema else "no type"
        return f"{where}.type: root must have type 'object', got {got}"
    dialect = schema.get("$schema")
    if "$schema" in schema and not isinstance(dialect, str):
        return f"{where}.$schema: must be a string, got {type(dialect).__name__}"
    cls = validator_for(schema, default=Draft202012Validator)
    if not certified(schema, cls):  # microseconds; python-jsonschema (milliseconds) decides the rest
        try:
            cls.check_schema(schema, format_checker=format_checker(cls))  # type: ignore[call-arg]  # (not in its Protocol)
        except SchemaError as err:
            return f"{json_path(where, err.absolute_path)}: {_one_line(err.message)}"
        except RecursionError:
            return f"{where}: nested too deeply"
    return reference_problem(schema, where)


_RESOURCE = re.compile(r"Resource '(.*?)' is not present in a registry")
_POINTER = re.compile(r"Pointer '(.*?)' does not exist")


def _first_line(message: str) -> str:
    return message.strip().splitlines()[0] if message.strip() else "invalid schema"


def reference_problem(schema: JSON, where: str = "inputSchema") -> str | None:
    """Why the schema cannot be compiled for argument validation (a reason), or None.

    A reference that cannot be resolved inside the schema itself (a remote URL, a
    relative name without a base, a dangling pointer) is named in the reason: nothing is
    ever fetched, so such a tool could never be validated.
    """
    try:
        compile_validator(schema)
    except jsonschema_rs.ValidationError as err:
        message = _first_line(err.message)
        remote, pointer = _RESOURCE.search(message), _POINTER.search(message)
        if remote is None and pointer is None:  # e.g. a pattern the ECMA-262 engine refuses
            return f"{json_path(where, err.instance_path)}: {_one_line(message)}"
        target = remote.group(1) if remote is not None else "#" + (pointer.group(1) if pointer else "")
        why = REMOTE_REFUSED if remote is not None else "no such location in the schema"
        holder: tuple[str | int, ...] = ()
        for at, written in references(schema):
            ref = as_uri(written)  # as compiled; named as its server wrote it
            if ref == target or ref.split("#")[0] == target.split("#")[0] != "" or ref.endswith(target):
                holder, target = at, (written if ref == target else target)
                break
        return f"{json_path(where, holder)}: $ref {_quote(target)} cannot be resolved: {why}"
    except (RecursionError, ValueError, TypeError, OverflowError) as err:
        return f"{where}: cannot be compiled: {_one_line(str(err))}"
    return None


def _quote(text: str) -> str:
    """A reference as one printable quoted token (it comes from an untrusted server)."""
    return _one_line(quote(text))
