"""A number or boolean given as a string (``"2"`` for an integer): what models often send, and
what most servers take (pydantic's lax mode, which Python servers validate with, reads it).
The gate read such a call as invalid and refused it where the server would have run it; now a
top-level argument whose schema asks for that scalar is read as the literal it holds, when the
call is then valid, and forwarded so (a strict server, such as one validating with zod, takes
it too). Anything else is refused as before, the message about the arguments as given.
tests/test_transparency.py compares the same call directly and through the gateway."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from catalog.validation import scalars_in_strings
from tests.helpers import ERAS, demo, sdk_client, text, write_config

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "count": {"type": "integer"},
        "ratio": {"type": "number"},
        "flag": {"type": "boolean"},
        "maybe": {"type": ["integer", "null"]},
        "either": {"type": ["integer", "string"]},
        "name": {"type": "string"},
        "choice": {"anyOf": [{"type": "integer"}]},
        "ref": {"$ref": "#/$defs/n"},
        "loose": {},
    },
}


def test_only_a_quoted_literal_of_the_scalar_the_schema_asks_for_is_read() -> None:
    given = {
        "count": "-12",
        "ratio": "2.5e3",
        "flag": "false",
        "maybe": "7",
        "either": "3",  # a string is valid there as it is
        "name": "4",
        "choice": "5",
        "ref": "6",
        "loose": "8",
        "undeclared": "9",
    }
    assert scalars_in_strings(SCHEMA, given) == {"count": -12, "ratio": 2500.0, "flag": False, "maybe": 7}


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("count", "2.0"),  # not an integer's spelling
        ("count", " 2"),
        ("count", "02"),
        ("count", "0x10"),
        ("count", "1" * 65),  # longer than any number a model meant
        ("ratio", "1e999"),  # not finite
        ("ratio", "NaN"),
        ("ratio", ".5"),
        ("flag", "True"),
        ("flag", "1"),
        ("count", 2),  # not a string: nothing to read
    ],
)
def test_anything_else_is_left_as_given(key: str, value: Any) -> None:
    assert scalars_in_strings(SCHEMA, {key: value}) == {}


@pytest.mark.parametrize("schema", [None, {"type": "object"}, {"properties": []}, []])
def test_a_schema_without_properties_reads_nothing(schema: Any) -> None:
    assert scalars_in_strings(schema, {"count": "2"}) == {}


@pytest.mark.anyio
@pytest.mark.parametrize("mode", ERAS)
async def test_a_quoted_number_reaches_the_server_as_the_number(tmp_path: Path, mode: str) -> None:
    config = write_config(tmp_path, {"demo": demo("--tools", 1)})
    async with sdk_client(config, mode) as client:
        quoted = await client.call_tool("demo__payload", {"bytes": "5"})
        assert not quoted.is_error and text(quoted) == "01234"
        assert text(await client.call_tool("demo__echo", {"text": "2"})) == "2"  # a string where one is asked
        for bad, why in (("five", '"five" is not of type "integer"'), ("5.0", '"5.0" is not of type "integer"')):
            refused = await client.call_tool("demo__payload", {"bytes": bad})
            assert refused.is_error and text(refused) == f"Invalid arguments for demo__payload: arguments.bytes: {why}"
        # read as -1, still invalid (minimum 0): refused, naming the argument as it was given
        below = await client.call_tool("demo__payload", {"bytes": "-1"})
        assert below.is_error and text(below) == (
            'Invalid arguments for demo__payload: arguments.bytes: "-1" is not of type "integer"'
        )
