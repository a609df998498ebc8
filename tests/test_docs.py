"""The docs against the code, checked mechanically: what a reader follows literally exists.

Each part holds one kind of reference in the docs to what it names (a link to its heading,
a metric to the one served, ...): each had drifted once, a knob or a metric added, a test
renamed, a heading retitled, without a word in the docs.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

from gateway import config
from tests.helpers import catalog_json, demo, run_cli, write_config

ROOT = Path(__file__).resolve().parent.parent
DOCS = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "bench" / "README.md")


# --- links --------------------------------------------------------------------------------


def _anchors(path: Path) -> set[str]:
    """GitHub's heading anchors: lowercase, punctuation dropped, spaces as ``-``."""
    found, fenced = set(), False
    for line in path.read_text(encoding="utf-8").splitlines():
        fenced ^= line.startswith("```")
        if not fenced and re.match(r"#{1,6} ", line):
            found.add(re.sub(r"[^\w\- ]", "", line.lstrip("#").strip().lower()).replace(" ", "-"))
    return found


def test_links_between_the_docs_resolve() -> None:
    broken = []
    for doc in DOCS:
        for target in re.findall(r"\]\(([^)\s]+)\)", doc.read_text(encoding="utf-8")):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            linked = (doc.parent / path).resolve() if path else doc
            if not linked.exists():
                broken.append(f"{doc.relative_to(ROOT)}: {target}")
            elif anchor and linked.suffix == ".md" and anchor not in _anchors(linked):
                broken.append(f"{doc.relative_to(ROOT)}: {target} (no such heading)")
    assert not broken


# --- the code's layout --------------------------------------------------------------------


def test_how_it_works_names_every_module_of_the_gateway() -> None:
    """docs/how-it-works.md lays out ``gateway/`` room by room, module by module: 25 modules
    added since were in no room's list."""
    layout = (ROOT / "docs" / "how-it-works.md").read_text(encoding="utf-8")
    modules = {p.stem for p in (ROOT / "gateway").rglob("*.py")}
    missing = sorted(m for m in modules - {"__init__", "__main__"} if f"`{m}`" not in layout)
    assert not missing


# --- metrics ------------------------------------------------------------------------------


def _table(text: str, heading: str) -> list[list[str]]:
    """The rows (cells stripped) of the first table under ``heading``."""
    section = text.split(f"\n{heading}\n", 1)[1]
    rows = []
    for line in section.splitlines():
        if line.startswith("#"):
            break
        if line.startswith("|") and not line.startswith("| ---"):
            rows.append([c.strip() for c in line.strip().strip("|").split("|")])
    return rows[1:]


def test_every_metric_served_is_documented() -> None:
    source = (ROOT / "gateway" / "engine" / "metrics.py").read_text(encoding="utf-8")
    served = set()
    for kind, name in re.findall(r'\b(\w+)\(\s*"(prefixgate_\w+)"', source):
        suffix = {"Counter": "_total", "CounterMetricFamily": "_total", "InfoMetricFamily": "_info"}.get(kind, "")
        served.add(name + suffix)
    rows = _table((ROOT / "docs" / "telemetry.md").read_text(encoding="utf-8"), "## Metrics")
    documented = {name for row in rows for name in re.findall(r"`(prefixgate_\w+)`", row[0])}
    assert served == documented


# --- the config ---------------------------------------------------------------------------

_TABLES = {
    "gateway": config._GATEWAY_KEYS,
    "client": config._CLIENT_KEYS,
    "servers": config._SERVER_KEYS,
    "policy": config._POLICY_KEYS,
    "spill": config._SPILL_KEYS,
    "telemetry": config._TELEMETRY_KEYS,
    "profiles": config._PROFILE_KEYS,
}


def _example_keys() -> dict[str, set[str]]:
    """Per top-level table, the keys config.example.toml shows, set or commented out."""
    found: dict[str, set[str]] = {}
    table = ""
    for line in (ROOT / "config.example.toml").read_text(encoding="utf-8").splitlines():
        line = line.lstrip("# ")
        if header := re.match(r"\[(\w+)", line):
            table = header[1]
        elif key := re.match(r"(\w+) = ", line):
            found.setdefault(table, set()).add(key[1])
            if table == "profiles":  # its inline tables: ``client = { profile = "openai" }``
                found[table].update(re.findall(r"[{,] (\w+) = ", line))
    return found


def test_every_config_key_is_explained_and_shown_in_the_example() -> None:
    prose = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    example = _example_keys()
    for table, keys in _TABLES.items():
        assert f"[{table}" in prose, table
        for key in keys:
            assert re.search(f"`{key}[` ]", prose), f"[{table}] {key} is not in docs/configuration.md"
            assert key in example.get(table, ()), f"[{table}] {key} is not shown in config.example.toml"
        unknown = example.get(table, set()) - set(keys) - (set(config._CLIENT_KEYS) | set(config._POLICY_KEYS))
        assert not unknown, f"config.example.toml shows [{table}] keys the loader refuses: {sorted(unknown)}"


def test_the_rules_for_ids_and_profile_names_are_the_loaders() -> None:
    """Both must begin with a letter or digit (``_a`` is refused), which the docs left out."""
    prose = " ".join((ROOT / "docs" / "configuration.md").read_text(encoding="utf-8").split())
    assert config.SERVER_ID.pattern.startswith("^[A-Za-z0-9]") and config.PROFILE_NAME.pattern.startswith("^[a-z0-9]")
    assert "`[servers.<id>]` (id: letters, digits, `_`, `-`, the first a letter or digit)" in prose
    assert (
        "`[profiles.NAME]` (NAME: lowercase letters, digits, `_`, `-`, the first a letter or digit, at most 32;"
        in prose
    )


# --- how to run the benchmarks and the tests ----------------------------------------------


def test_the_benchmarks_how_to_run_names_every_benchmark() -> None:
    from bench.run import BENCHMARKS

    how = " ".join((ROOT / "bench" / "README.md").read_text(encoding="utf-8").split("## Method")[0].split())
    assert f"`--only {','.join(BENCHMARKS)}`" in how


def test_the_readme_names_the_npm_packages_the_tests_install() -> None:
    """It named the Inspector too, which no test installs (tests/conformance/npm pins what they do)."""
    pinned = json.loads((ROOT / "tests" / "conformance" / "npm" / "package.json").read_text(encoding="utf-8"))
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    bullet = readme.split("- **npm and the npm registry.**", 1)[1].split("\n- ", 1)[0]
    assert set(re.findall(r"`(@[\w-]+/[\w-]+)`", bullet)) == set(pinned["dependencies"])
    assert "Inspector" not in bullet


# --- catalog --json -----------------------------------------------------------------------


def test_every_field_catalog_json_prints_is_documented(tmp_path: Path) -> None:
    """docs/commands.md lists ``catalog --json``'s fields: a server's ``transport`` and
    ``required``, ``policy_unmatched`` and a tool's ``lock`` (printed without a lock too) were not."""
    path = write_config(tmp_path, {"demo": demo("--tools", "2")}, policy={"deny": ["nothing"]})
    assert run_cli("catalog", "lock", "--config", str(path)).returncode == 0
    report = catalog_json(path)
    text = (ROOT / "docs" / "commands.md").read_text(encoding="utf-8")
    paragraph = " ".join(text.split("`catalog --json` prints one object", 1)[1].split("\n\n", 1)[0].split())
    named = set(re.findall(r"\w+", " ".join(re.findall(r"`([^`]+)`", paragraph))))
    printed = set(report) | set(report["servers"][0]) | set(report["tools"][0]) | set(report["lock"])
    assert printed - named == set()


# --- environment variables ----------------------------------------------------------------

CODE = ("gateway", "catalog", "spill")


def _sources() -> dict[Path, str]:
    return {p: p.read_text(encoding="utf-8") for package in CODE for p in sorted((ROOT / package).rglob("*.py"))}


_ENV_DEFAULT = re.compile(
    r'(?:os\.environ\.get\(|env_(?:number|count)\()"(PREFIXGATE_\w+)"(?:\)\s*or\s*|,\s*)([^)\n]+)\)'
)


def test_every_environment_variable_the_code_reads_is_documented_with_its_default() -> None:
    read: dict[str, str | None] = {}
    for text in _sources().values():
        for name in re.findall(r'"(PREFIXGATE_[A-Z0-9_]+)"', text):
            read.setdefault(name, None)
        for name, default in _ENV_DEFAULT.findall(text):
            read[name] = default
    rows = _table((ROOT / "docs" / "commands.md").read_text(encoding="utf-8"), "## Environment variables")
    documented = {row[0].strip("`$"): row[1] for row in rows}
    assert sorted(read) == sorted(documented), "docs/commands.md#environment-variables lists what the code reads"
    for name, expression in read.items():
        if expression is None:
            continue
        value = math.prod(float(factor) for factor in expression.split("*"))  # ``30 * 60``
        shown = documented[name].strip("`").split()[0].replace(",", "")
        assert float(shown) == float(value), f"{name}: documented {documented[name]!r}, the code's default {value}"


# --- the fault matrix ---------------------------------------------------------------------


def _defined() -> dict[str, set[str]]:
    return {
        str(p.relative_to(ROOT)): set(re.findall(r"^\s*(?:async\s+)?def\s+(\w+)", p.read_text(encoding="utf-8"), re.M))
        for p in (ROOT / "tests").rglob("*.py")
    }


def test_every_fault_matrix_row_names_a_test_that_exists() -> None:
    defined = _defined()
    everywhere = set().union(*defined.values())
    text = (ROOT / "docs" / "fault-matrix.md").read_text(encoding="utf-8")
    paragraphs = text.split("\n\n")
    shared: dict[str, str] = {}
    letters: dict[str, str] = {}
    problems = []
    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith("## "):
            letters = dict(shared)
        if line.startswith("Test file"):  # the legend: `W` = `tests/test_hardening_wire.py`, ...
            legend = next(p for p in paragraphs if line in p)
            letters.update(re.findall(r"`([A-Z]{1,2})` =\s*`(tests/[\w/.]+)`", legend))
            shared = shared or dict(letters)
        if not line.startswith("| ") or line.startswith(("| ---", "| fault ")):
            continue
        cell = line.strip().strip("|").rsplit("|", 1)[-1]
        if not re.search(r"test_|tests/|same test|(?<![`\w])[A-Z]{1,2} ", cell):  # a letter: its legend's file
            problems.append(f"line {number}: names no test")
        current = None
        for match in re.finditer(r"(?<![`\w])([A-Z]{1,2})(?= `)|`([^`]+)`", cell):
            if match[1]:
                current = letters.get(match[1])
                if current is None:
                    problems.append(f"line {number}: no legend for {match[1]}")
                continue
            if match[2].startswith("tests/"):
                current = match[2]
                if current not in defined:
                    problems.append(f"line {number}: no file {current}")
                continue
            for name in re.findall(r"\btest_\w+", match[2]):
                if name not in (defined.get(current, ()) if current else everywhere):
                    problems.append(f"line {number}: no {name} in {current or 'tests/'}")
    assert not problems
