r"""A fast certificate that a schema passes python-jsonschema's metaschema check.

``cls.check_schema`` costs ~3 ms a schema (the cost is per subschema, so building the
meta-validator once does not help): 14 s for a first-ever catalog of 5,000 tools.
jsonschema-rs validates a schema against the *same* metaschema documents (python-jsonschema's
own, from ``jsonschema_specifications``) in microseconds, but asserts no formats, and the only
format python-jsonschema asserts in a metaschema is ``regex`` (``pattern``, the keys of
``patternProperties``), which the caller has it check as JSON Schema means it, ECMA-262, with
jsonschema-rs's engine (:func:`ecma_regex`, the one arguments are validated with), not Python's
``re`` (which refuses ``\p{L}``, ``(?<name>...)``, zod's ``.emoji()``, tools a direct client
lists). So a schema is certified when:

* its dialect is one jsonschema-rs implements (draft 4, 6, 7, 2019-09, 2020-12; the dialect is
  the class ``validator_for`` picked, so an unknown ``$schema`` is 2020-12 as today, and
  jsonschema-rs never resolves the ``$schema`` URL itself);
* it is no deeper than :data:`MAX_DEPTH` containers (python-jsonschema recurses ~8 frames a
  level and reports a deeper schema as nested too deeply; jsonschema-rs would not);
* every string that could be checked as a ``regex`` is one (every ``pattern``
  string and ``patternProperties`` key anywhere: more than the metaschema checks, which only
  costs a fallback);
* jsonschema-rs finds it valid.

Anything else (not certified, an error, a format python-jsonschema would check that is not
emulated here) is not a verdict: the caller runs ``check_schema`` as before, which decides and
words the rejection. So verdicts and messages are exactly python-jsonschema's.
"""

from __future__ import annotations

import functools
from typing import Any, NoReturn

import jsonschema_rs
from jsonschema import (
    Draft4Validator,
    Draft6Validator,
    Draft7Validator,
    Draft201909Validator,
    Draft202012Validator,
    FormatChecker,
)
from jsonschema.validators import validator_for

# python-jsonschema's own metaschema documents (its dependency; untyped).
from jsonschema_specifications import REGISTRY  # type: ignore[import-untyped]

MAX_DEPTH = 32
"""Deepest container nesting certified (python-jsonschema fails from ~125 at a shallow stack)."""

_DIALECTS = (Draft4Validator, Draft6Validator, Draft7Validator, Draft201909Validator, Draft202012Validator)
_EMULATED_FORMATS = frozenset({"regex"})


def certified(schema: dict[str, Any], cls: Any) -> bool:
    """True only if ``cls.check_schema(schema)`` would pass; False means "ask it"."""
    meta = _meta_validator(cls)
    if meta is None or not _regexes_compile_within_depth(schema):
        return False
    try:
        return bool(meta.is_valid(schema))
    except Exception:  # noqa: BLE001 - e.g. a lone surrogate: python-jsonschema decides
        return False


def _regexes_compile_within_depth(schema: Any) -> bool:
    stack: list[tuple[Any, int]] = [(schema, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict):
            if depth > MAX_DEPTH:
                return False
            pattern = value.get("pattern")
            if isinstance(pattern, str) and not ecma_regex(pattern):
                return False
            keys = value.get("patternProperties")
            if isinstance(keys, dict) and not all(ecma_regex(k) for k in keys if isinstance(k, str)):
                return False
            stack.extend((item, depth + 1) for item in value.values())
        elif isinstance(value, list):
            if depth > MAX_DEPTH:
                return False
            stack.extend((item, depth + 1) for item in value)
    return True


def ecma_regex(pattern: object) -> bool:
    """The ``regex`` format: whether jsonschema-rs's ECMA-262 engine compiles ``pattern`` (a
    non-string is not this format's to judge). Never raises."""
    if not isinstance(pattern, str):
        return True
    try:
        jsonschema_rs.validator_for({"pattern": pattern}, validate_formats=False)
    except Exception:  # noqa: BLE001 - jsonschema_rs.ValidationError (the engine refuses it), a lone surrogate
        return False
    return True


@functools.cache
def format_checker(cls: Any) -> FormatChecker:
    """The format checker ``cls.check_schema`` uses by default, with ``regex`` as ECMA-262 (``ecma_regex``)."""
    checker = FormatChecker(formats=())
    checker.checkers = {
        **validator_for(cls.META_SCHEMA, default=cls).FORMAT_CHECKER.checkers,
        "regex": (ecma_regex, ()),
    }
    return checker


def _refuse(uri: str) -> NoReturn:
    raise LookupError(f"{uri}: not a metaschema resource")


@functools.cache
def _meta_validator(cls: Any) -> jsonschema_rs.Validator | None:
    """jsonschema-rs compiled from ``cls``'s own metaschema, or None when this dialect cannot be
    certified (not implemented by jsonschema-rs, or python-jsonschema asserts a metaschema
    format other than ``regex``, e.g. ``uri`` once ``rfc3987`` is installed)."""
    if cls not in _DIALECTS:
        return None
    checked = set(validator_for(cls.META_SCHEMA, default=cls).FORMAT_CHECKER.checkers)
    if (checked & _metaschema_formats()) - _EMULATED_FORMATS:
        return None
    try:
        registry = jsonschema_rs.Registry([(uri, REGISTRY.contents(uri)) for uri in REGISTRY])
        meta = cls.META_SCHEMA
        return jsonschema_rs.validator_for(meta, registry=registry, retriever=_refuse, validate_formats=False)
    except Exception:  # noqa: BLE001 - never certify rather than fail: check_schema decides
        return None


@functools.cache
def _metaschema_formats() -> frozenset[str]:
    """Every ``format`` any metaschema document names (all dialects: more than needed is safe)."""
    found: set[str] = set()
    stack: list[Any] = [REGISTRY.contents(uri) for uri in REGISTRY]
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            if isinstance(value.get("format"), str):
                found.add(value["format"])
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
    return frozenset(found)
