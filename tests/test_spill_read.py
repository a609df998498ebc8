"""spill.read: artifact_read pages, line ranges, find, limits and refusals."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from spill.bound import text_result_size
from spill.read import (
    ARTIFACT_READ_SCHEMA,
    MAX_LIMIT,
    artifact_read,
    artifact_read_declaration,
)
from spill.store import ArtifactNotFound, ArtifactStore, gc
from tests.helpers import keys_sorted_everywhere

SESSION = "d" * 64
HEADER = re.compile(r"\[artifact (?P<id>[A-Za-z0-9_-]+)\] bytes (?P<a>\d+) to (?P<b>\d+) of (?P<size>\d+)"
                    r"(?: \(offset \d+ moved to \d+: character boundary\))?; (?:next offset (?P<next>\d+)|end reached)")


@pytest.fixture
def store(tmp_path: Path) -> ArtifactStore:
    return ArtifactStore(tmp_path / "artifacts", SESSION)


def split(answer: str) -> tuple[str, str]:
    header, _, body = answer.partition("\n")
    return header, body


def read_all_pages(store: ArtifactStore, aid: str, limit: int, ceiling: int = 65536) -> tuple[bytes, int]:
    out, offset, pages = [], 0, 0
    while True:
        answer = artifact_read(store, {"id": aid, "offset": offset, "limit": limit}, max_visible_bytes=ceiling)
        assert text_result_size(answer) <= ceiling
        header, body = split(answer)
        m = HEADER.fullmatch(header)
        assert m and m["id"] == aid and int(m["a"]) == offset
        out.append(body.encode())
        assert len(body.encode()) == int(m["b"]) - int(m["a"])
        pages += 1
        if m["next"] is None:
            return b"".join(out), pages
        assert int(m["next"]) == int(m["b"]) > offset  # always progresses
        offset = int(m["next"])


# --------------------------------------------------------------------------- bytes


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(min_size=0, max_size=400), limit=st.integers(-3, 40), ceiling=st.sampled_from([1024, 65536]))
def test_property_pages_reproduce_the_artifact(store: ArtifactStore, text: str, limit: int, ceiling: int) -> None:
    data = text.encode()
    aid = store.put(data)
    got, _ = read_all_pages(store, aid, limit, ceiling)
    assert got == data


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(min_size=1, max_size=300), offset=st.integers(0, 10**4), limit=st.integers(1, 50))
def test_property_any_offset_lands_on_a_boundary(store: ArtifactStore, text: str, offset: int, limit: int) -> None:
    data = text.encode()
    offset %= len(data) + 1
    aid = store.put(data)
    header, body = split(artifact_read(store, {"id": aid, "offset": offset, "limit": limit}))
    m = HEADER.fullmatch(header)
    assert m and offset <= int(m["a"]) <= offset + 3
    assert body.encode() == data[int(m["a"]) : int(m["b"])]
    assert body == "" or text.endswith(data[int(m["a"]) :].decode())  # started on a character


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    lines=st.lists(
        st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\n")), max_size=30
    ),
    count=st.integers(1, 7),
    trailing=st.booleans(),
)
def test_property_line_pages_reproduce_the_artifact(store: ArtifactStore, lines: list[str], count: int,
                                                     trailing: bool) -> None:
    data = ("\n".join(lines) + ("\n" if trailing and lines else "")).encode()
    aid = store.put(data)
    out, line = [], 1
    while data:
        header, body = split(artifact_read(store, {"id": aid, "line": line, "lines": count}))
        out.append(body.encode())
        m = re.search(r"lines (\d+) to (\d+) .*; (?:next line (\d+)|end reached)", header)
        assert m and int(m[1]) == line and int(m[2]) - line + 1 <= count
        if m[3] is None:
            break
        line = int(m[3])
    assert b"".join(out) == data


def test_pages_of_a_large_artifact(store: ArtifactStore) -> None:
    data = ("日本語 \"quoted\" \\ line\n" * 60_000).encode()
    aid = store.put(data)
    got, pages = read_all_pages(store, aid, MAX_LIMIT)
    assert got == data and pages > len(data) // MAX_LIMIT


def test_default_page_and_header(store: ArtifactStore) -> None:
    aid = store.put(b"x" * 40_000)
    header, body = split(artifact_read(store, {"id": aid}))
    assert header == f"[artifact {aid}] bytes 0 to 16384 of 40000; next offset 16384"
    assert body == "x" * 16384
    header, body = split(artifact_read(store, {"id": aid, "offset": 32768, "limit": 10**9}))
    assert header == f"[artifact {aid}] bytes 32768 to 40000 of 40000; end reached"
    header, body = split(artifact_read(store, {"id": aid, "offset": 40_000}))
    assert header == f"[artifact {aid}] bytes 40000 to 40000 of 40000; end reached" and body == ""


def test_limit_is_clamped(store: ArtifactStore) -> None:
    aid = store.put(b"y" * 200_000)
    body = split(artifact_read(store, {"id": aid, "limit": 10**9}))[1]
    assert 60_000 < len(body) <= MAX_LIMIT
    assert split(artifact_read(store, {"id": aid, "limit": 0}))[1] == "y"


def test_page_never_splits_a_character(store: ArtifactStore) -> None:
    aid = store.put("😀".encode() * 10)  # 4 bytes each
    header, body = split(artifact_read(store, {"id": aid, "limit": 6}))
    assert body == "😀" and header.endswith("bytes 0 to 4 of 40; next offset 4")
    header, body = split(artifact_read(store, {"id": aid, "limit": 1}))
    assert body == "😀"  # at least one whole character
    header, body = split(artifact_read(store, {"id": aid, "offset": 5, "limit": 8}))
    assert header == f"[artifact {aid}] bytes 8 to 16 of 40 (offset 5 moved to 8: character boundary); next offset 16"
    assert body == "😀😀"


def test_escaping_heavy_page_is_capped_to_the_ceiling(store: ArtifactStore) -> None:
    aid = store.put(b'"' * 100_000 + b"\x01" * 100_000)
    for offset in (0, 90_000, 100_000):
        answer = artifact_read(store, {"id": aid, "offset": offset, "limit": MAX_LIMIT})
        assert 60_000 < text_result_size(answer) <= 65536
    answer = artifact_read(store, {"id": aid, "limit": MAX_LIMIT}, max_visible_bytes=1024)
    assert text_result_size(answer) <= 1024


def test_offset_past_end_is_an_error(store: ArtifactStore) -> None:
    aid = store.put(b"abc")
    with pytest.raises(ValueError, match="past the end"):
        artifact_read(store, {"id": aid, "offset": 4})
    with pytest.raises(ValueError, match="offset must be >= 0"):
        artifact_read(store, {"id": aid, "offset": -1})


def test_a_line_past_the_end_counts_the_lines_in_words_the_model_reads(store: ArtifactStore) -> None:
    """It said "the artifact has 1 lines"."""
    one = store.put(b"only line")
    with pytest.raises(ValueError, match=r"^line 2 is past the end \(the artifact has 1 line\)$"):
        artifact_read(store, {"id": one, "line": 2})
    with pytest.raises(ValueError, match=r"^line 9 is past the end \(the artifact has 2 lines\)$"):
        artifact_read(store, {"id": store.put(b"a\nb"), "line": 9, "find": "a"})


def test_empty_artifact(store: ArtifactStore) -> None:
    aid = store.put(b"")
    assert split(artifact_read(store, {"id": aid}))[0].endswith("bytes 0 to 0 of 0; end reached")
    assert "empty" in artifact_read(store, {"id": aid, "line": 1})
    assert artifact_read(store, {"id": aid, "find": "x"}).startswith(f"[artifact {aid}] 0 matching lines")


# --------------------------------------------------------------------------- refusals


@pytest.mark.parametrize("bad", ["../x", "/etc/passwd", "", "..", "x" * 32 + "\x00"])
def test_path_like_and_malformed_ids_are_not_found(store: ArtifactStore, bad: str) -> None:
    store.put(b"x")
    for args in ({"id": bad}, {"id": bad, "line": 1}, {"id": bad, "find": "x"}):
        with pytest.raises(ArtifactNotFound, match="in this session"):
            artifact_read(store, args)


def test_other_session_and_expired_ids_are_not_found(tmp_path: Path) -> None:
    root = tmp_path / "artifacts"
    theirs = ArtifactStore(root, "e" * 64).put(b"secret")
    mine = ArtifactStore(root, SESSION)
    old = mine.put(b"old")
    with pytest.raises(ArtifactNotFound) as info:
        artifact_read(mine, {"id": theirs})
    assert "e" * 64 not in str(info.value) and "secret" not in str(info.value)
    gc(root, max_age_seconds=0, max_total_bytes=0, now=time.time() + 3600, protect_session=SESSION)
    with pytest.raises(ArtifactNotFound):
        artifact_read(mine, {"id": old})


@pytest.mark.parametrize("args,message", [
    ({}, "id is required"),
    ({"id": 5}, "id is required"),
    ({"id": "x" * 32, "path": "/etc/passwd"}, "unknown argument"),
    ({"id": "x" * 32, "offset": 1, "line": 2}, "cannot be combined"),
    ({"id": "x" * 32, "find": "a", "lines": 2}, "cannot be combined"),
    ({"id": "x" * 32, "limit": "ten"}, "^arguments.limit must be an integer$"),
    ({"id": "x" * 32, "limit": 2.5}, "^arguments.limit must be an integer$"),
    ({"id": "x" * 32, "offset": True}, "^arguments.offset must be an integer$"),
    ({"id": "x" * 32, "line": 10**4000}, "^arguments.line must be an integer of at most 18 digits$"),
    ({"id": "x" * 32, "offset": -(10**18)}, "^arguments.offset must be an integer of at most 18 digits$"),
    ({"id": "x" * 32, "p" * 100_000: 1}, "^unknown argument\\(s\\): 'p{198}…$"),
    # One line whatever the names hold: each quoted, its newline escaped.
    ({"id": "x" * 32, "a\nb": 1, "c": 2}, "^unknown argument\\(s\\): 'a\\\\nb', 'c'$"),
    ({"id": "x" * 32, "max_matches": 3}, "find is required"),
])
def test_bad_arguments(store: ArtifactStore, args: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        artifact_read(store, args)


def test_an_integer_is_read_as_json_schema_and_the_gate_read_it(store: ArtifactStore) -> None:
    aid = store.put(b"abcdef")
    assert split(artifact_read(store, {"id": aid, "offset": "2", "limit": 2.0}))[1] == "cd"


def test_null_arguments_count_as_absent(store: ArtifactStore) -> None:
    aid = store.put(b"abc")
    assert split(artifact_read(store, {"id": aid, "offset": None, "line": None, "find": None}))[1] == "abc"


# --------------------------------------------------------------------------- lines


@pytest.fixture
def big(store: ArtifactStore) -> tuple[str, list[str]]:
    """A ~5 MB artifact of numbered lines, with a marker every 10,000 lines."""
    lines = [f"row {i:07d} {'needle' if i % 10_000 == 0 else 'hay'} {'x' * 30}" for i in range(1, 120_001)]
    return store.put("\n".join(lines).encode()), lines


def test_line_ranges_on_a_multi_megabyte_artifact(store: ArtifactStore, big: tuple[str, list[str]]) -> None:
    aid, lines = big
    header, body = split(artifact_read(store, {"id": aid, "line": 100_000, "lines": 3}))
    assert body == "\n".join(lines[99_999:100_002]) + "\n"
    start = sum(len(x) + 1 for x in lines[:99_999])
    assert header == (f"[artifact {aid}] lines 100000 to 100002 (bytes {start} to {start + len(body)}) of "
                      f"{store.size(aid)} bytes; next line 100003 (offset {start + len(body)})")
    header, body = split(artifact_read(store, {"id": aid, "line": 119_999, "lines": 50}))
    assert body == lines[119_998] + "\n" + lines[119_999] and header.endswith("end reached")
    header, body = split(artifact_read(store, {"id": aid, "lines": 100_000}))
    assert body == "\n".join(lines[: body.count("\n")]) + "\n" and text_result_size(header + "\n" + body) <= 65536
    with pytest.raises(ValueError, match="line 120001 is past the end \\(the artifact has 120000 lines\\)"):
        artifact_read(store, {"id": aid, "line": 120_001})


def test_line_longer_than_a_page_comes_in_parts(store: ArtifactStore) -> None:
    long_line = "é" * 100_000
    data = f"first\n{long_line}\nlast".encode()
    aid = store.put(data)
    header, body = split(artifact_read(store, {"id": aid, "line": 2, "lines": 2}))
    m = re.fullmatch(rf"\[artifact {aid}\] line 2, part \(bytes 6 to (\d+)\) of {len(data)} bytes; "
                     r"next offset (\d+) \(rest of line 2\)", header)
    assert m and m[1] == m[2] and body == "é" * len(body) and len(body) > 20_000
    rest = split(artifact_read(store, {"id": aid, "offset": int(m[2]), "limit": MAX_LIMIT}))[1]
    assert long_line.startswith(body + rest[: len(long_line) - len(body)])


def test_lines_default_and_crlf(store: ArtifactStore) -> None:
    aid = store.put(b"".join(b"l%d\r\n" % i for i in range(300)))
    header, body = split(artifact_read(store, {"id": aid, "lines": 2}))
    assert body == "l0\r\nl1\r\n" and "lines 1 to 2" in header
    header, body = split(artifact_read(store, {"id": aid, "line": 1}))
    assert "lines 1 to 100 " in header and body.count("\n") == 100


# --------------------------------------------------------------------------- find


def test_find_on_a_multi_megabyte_artifact(store: ArtifactStore, big: tuple[str, list[str]]) -> None:
    aid, lines = big
    header, body = split(artifact_read(store, {"id": aid, "find": "needle"}))
    expected = [f"{i}: {lines[i - 1]}" for i in range(10_000, 120_001, 10_000)]
    assert body.split("\n") == expected
    size = store.size(aid)
    assert header == f'[artifact {aid}] 12 matching lines for "needle" from line 1 of {size} bytes; end reached'


def test_find_stops_at_max_matches_and_continues(store: ArtifactStore, big: tuple[str, list[str]]) -> None:
    aid, _ = big
    header, body = split(artifact_read(store, {"id": aid, "find": "needle", "max_matches": 5}))
    assert body.split("\n")[-1].startswith("50000: ") and header.endswith("; next line 60000 to search on")
    header, body = split(artifact_read(store, {"id": aid, "find": "needle", "max_matches": 5, "line": 60_000}))
    assert body.split("\n")[0].startswith("60000: ") and "from line 60000" in header
    header, body = split(artifact_read(store, {"id": aid, "find": "hay", "max_matches": 1000}))
    assert body.count("\n") + 1 == 50  # clamped to 50
    header, body = split(artifact_read(store, {"id": aid, "find": "no such text"}))
    assert body == "" and header.startswith(f"[artifact {aid}] 0 matching lines")


def test_find_budget_and_long_lines(store: ArtifactStore) -> None:
    line = '"' * 5000 + "TARGET" + '"' * 5000
    aid = store.put("\n".join([line] * 60).encode())
    answer = artifact_read(store, {"id": aid, "find": "TARGET", "max_matches": 50}, max_visible_bytes=4096)
    assert text_result_size(answer) <= 4096
    header, body = split(answer)
    first = body.split("\n")[0]
    assert re.fullmatch(r'1 \(excerpt at offset 4800\): …"{200}TARGET"{400}…', first)
    assert "next line" in header


def test_a_match_too_long_for_the_page_is_cut_to_fit_and_the_search_moves_on(store: ArtifactStore) -> None:
    line = "\x1b[0m" * 160 + "TARGET"  # each escape is 6 bytes in the JSON answer
    aid = store.put("\n".join(["x", line, line]).encode())
    answer = artifact_read(store, {"id": aid, "find": "TARGET"}, max_visible_bytes=1024)
    assert text_result_size(answer) <= 1024
    header, body = split(answer)
    assert header.endswith("; next line 3 to search on") and body == "2 (excerpt at offset 642): …TARGET"
    header, body = split(artifact_read(store, {"id": aid, "find": "TARGET", "line": 3}, max_visible_bytes=1024))
    assert header.endswith("; end reached") and body.startswith("3 (excerpt at offset ")


def test_find_rejects_multiline_text(store: ArtifactStore) -> None:
    aid = store.put(b"a\nb")
    with pytest.raises(ValueError, match="single line"):
        artifact_read(store, {"id": aid, "find": "a\nb"})


def test_find_unicode(store: ArtifactStore) -> None:
    aid = store.put("α\nβγ\nγ😀\n".encode())
    assert split(artifact_read(store, {"id": aid, "find": "γ"}))[1] == "2: βγ\n3: γ😀"


# --------------------------------------------------------------------------- declaration


def test_declaration_is_sorted_and_valid() -> None:
    decl = artifact_read_declaration()
    assert list(decl) == ["annotations", "description", "inputSchema", "name"] and decl["name"] == "artifact_read"
    assert decl["annotations"] == {"readOnlyHint": True}  # run without asking (Codex asks before any other)
    assert keys_sorted_everywhere(decl)
    jsonschema.Draft202012Validator.check_schema(decl["inputSchema"])
    v = jsonschema.Draft202012Validator(ARTIFACT_READ_SCHEMA)
    assert v.is_valid({"id": "abc", "offset": 0, "limit": 10})
    assert not v.is_valid({"offset": 0}) and not v.is_valid({"id": "a", "path": "/x"})
    assert artifact_read_declaration() == decl
