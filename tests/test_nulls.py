"""``null`` for an optional argument: what a model sends for a field it leaves out (strict
structured-output modes make optional fields nullable). Taken out before validation and
forwarding when the schema makes the argument optional and not nullable; kept (and validated)
when it is required or may be null."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from catalog.validation import unset_nulls
from tests.helpers import ERAS, demo, sdk_client, text, write_config

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "verbose": {"type": "boolean"},
        "level": {"type": ["integer", "string"]},
        "mode": {"enum": ["a", "b"]},
        "fixed": {"const": 1},
        "maybe": {"type": ["string", "null"]},
        "either": {"anyOf": [{"type": "string"}, {"type": "null"}]},
        "ref": {"$ref": "#/$defs/x"},
        "loose": {},
        "nullable_enum": {"enum": ["a", None]},
        "name": {"type": "string"},
    },
    "required": ["name"],
}


def test_only_optional_arguments_that_cannot_be_null_are_taken_out() -> None:
    given = {key: None for key in SCHEMA["properties"]} | {"undeclared": None, "kept": 1}
    assert sorted(unset_nulls(SCHEMA, given)) == ["fixed", "level", "mode", "verbose"]


@pytest.mark.parametrize("schema", [None, {"type": "object"}, {"properties": []}, []])
def test_a_schema_without_properties_takes_nothing_out(schema: Any) -> None:
    assert unset_nulls(schema, {"verbose": None}) == []


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ERAS)
async def test_a_null_optional_argument_reaches_the_server_as_left_out(tmp_path: Path, mode: str) -> None:
    config = write_config(tmp_path, {"demo": demo("--tools", 1)})
    async with sdk_client(config, mode) as client:
        result = await client.call_tool("demo__payload", {"bytes": 5, "kind": None})
        left_out = await client.call_tool("demo__payload", {"bytes": 5})
        assert not result.is_error and text(result) == text(left_out) == "01234"  # its default kind
        required = await client.call_tool("demo__echo", {"text": None})
        assert required.is_error and "arguments.text" in text(required)
