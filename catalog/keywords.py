"""The JSON Schema keywords that hold subschemas: one table for every walk over a schema.

Canonicalisation (``catalog.schema``) and the search index (``catalog.search``) both walk
into subschemas; with two tables, one of them missed ``contains``, ``propertyNames`` and
``dependentSchemas``. The tables are the union of drafts 4 to 2020-12, so one walk serves
every dialect.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

SUBSCHEMA = frozenset(
    {
        "additionalItems",
        "additionalProperties",
        "contains",
        "contentSchema",
        "else",
        "if",
        "not",
        "propertyNames",
        "then",
        "unevaluatedItems",
        "unevaluatedProperties",
    }
)
"""Keywords whose value is one subschema."""

SUBSCHEMA_LIST = frozenset({"allOf", "anyOf", "oneOf", "prefixItems"})
"""Keywords whose value is an ordered array of subschemas (order is kept)."""

SUBSCHEMA_MAP = frozenset({"properties", "patternProperties", "$defs", "definitions", "dependentSchemas"})
"""Keywords whose value maps *names* (not keywords) to subschemas."""

STRING_SET = frozenset({"required", "type"})
"""Keywords whose string-array value is a set: de-duplicated and sorted."""

# Besides these: ``items`` (draft 2020-12: one subschema; earlier drafts: also an array of
# them), ``dependencies`` (draft 7: each member a subschema or a ``dependentRequired``
# array) and ``dependentRequired`` (names to string sets).


def subschemas(key: str, value: Any) -> Iterator[dict[str, Any]]:
    """The object subschemas directly under one keyword (booleans and malformed values skipped)."""
    if key in SUBSCHEMA or key == "items":
        members: list[Any] = value if key == "items" and isinstance(value, list) else [value]
    elif key in SUBSCHEMA_LIST:
        members = value if isinstance(value, list) else []
    elif key in SUBSCHEMA_MAP or key == "dependencies":
        members = list(value.values()) if isinstance(value, dict) else []
    else:
        members = []
    yield from (m for m in members if isinstance(m, dict))
