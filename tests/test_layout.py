"""The import direction, checked mechanically: the layout docs/how-it-works.md describes holds.

``catalog/`` and ``spill/`` are pure (no SDK, no anyio, nothing of the gateway), the
gateway's rooms import downward only (``commands`` -> ``upstream`` -> ``engine`` ->
``downstream`` and ``state`` -> the shared top-level modules; the two lowest rooms not each
other), and no modules import each other in a cycle. Every import counts, also one inside
a function: a lazy import that only hides a cycle is still a cycle.
"""

from __future__ import annotations

import ast
import importlib
import importlib.metadata
import importlib.util
import tomllib
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("catalog", "spill", "gateway")
PURE = ("catalog", "spill")
FORBIDDEN_IN_PURE = ("mcp", "mcp_types", "anyio", "gateway")
COMMANDS = "gateway.commands"
ENTRY_POINTS = {"gateway.__main__"}
"""``python -m gateway``: the command line itself, above everything."""
ROOMS = {
    "gateway.commands": 4,
    "gateway.upstream": 3,
    "gateway.engine": 2,
    "gateway.downstream": 1,
    "gateway.state": 1,
}
"""Each room's height: a module imports from its own room or from a lower one."""
SHARED = {
    "gateway",
    "gateway.config",
    "gateway.eras",
    "gateway.fastpath",
    "gateway.jsontext",
    "gateway.launch",
    "gateway.lines",
    "gateway.logs",
    "gateway.plaintasks",
    "gateway.redact",
    "gateway.results",
    "gateway.sdk",
    "gateway.shapes",
    "gateway.spanexport",
    "gateway.published",
    "gateway.tracing",
}
"""The small modules every room may use (height 0); they import no room."""


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            found[module_name(path)] = path
    return found


def imported(path: Path, name: str, known: dict[str, Path]) -> Iterator[str]:
    """Every module ``path`` imports, anywhere in it; ``from a import b`` is ``a.b`` when
    that is a module of ours, else ``a``."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                full = f"{base}.{alias.name}"
                yield full if full in known else base


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: set(imported(path, name, known)) for name, path in known.items()}


def within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def test_catalog_and_spill_are_pure() -> None:
    bad = [
        f"{module} imports {target}"
        for module, targets in graph().items()
        if any(within(module, p) for p in PURE)
        for target in sorted(targets)
        if any(within(target, f) for f in FORBIDDEN_IN_PURE)
    ]
    assert not bad, "\n".join(bad)


def test_the_engine_never_imports_the_commands() -> None:
    bad = [
        f"{module} imports {target}"
        for module, targets in graph().items()
        if not within(module, COMMANDS) and module not in ENTRY_POINTS
        for target in sorted(targets)
        if within(target, COMMANDS)
    ]
    assert not bad, "\n".join(bad)


def room_of(name: str) -> str | None:
    return next((room for room in ROOMS if within(name, room)), None)


def height(name: str) -> int:
    room = room_of(name)
    return ROOMS[room] if room else 0


def test_the_gateway_is_rooms_and_a_few_shared_modules() -> None:
    loose = sorted(
        name
        for name in modules()
        if within(name, "gateway") and room_of(name) is None and name not in SHARED | ENTRY_POINTS
    )
    assert not loose, "modules outside a room (move them, or name them shared): " + ", ".join(loose)
    assert all(name in modules() for name in ROOMS), "every room is a package"


def test_the_rooms_import_downward() -> None:
    bad = [
        f"{module} imports {target}"
        for module, targets in graph().items()
        if within(module, "gateway") and module not in ENTRY_POINTS
        for target in sorted(targets)
        if within(target, "gateway")
        and room_of(target) != room_of(module)
        and height(target) >= height(module)
    ]
    assert not bad, "\n".join(bad)


def test_the_room_check_sees_upward_imports() -> None:
    assert height("gateway.engine.hub") > height("gateway.state.session") > height("gateway.config")
    assert height("gateway.downstream.connection") == height("gateway.state.journal")
    assert room_of("gateway.upstream") == "gateway.upstream" and room_of("gateway.published") is None


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """One cycle (as a path) per strongly connected component larger than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(edges.get(node, ())):
            if target not in edges:
                continue
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1 or node in edges.get(node, ()):
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def test_no_import_cycles() -> None:
    found = cycles(graph())
    assert not found, "modules that import each other: " + "; ".join(" <-> ".join(c) for c in found)


def test_the_cycle_check_sees_cycles() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_graph_sees_lazy_and_from_imports() -> None:
    edges = graph()
    assert "gateway.commands.startup" in edges["gateway.commands.doctor"]
    assert "gateway.config" in edges["gateway.commands.importer.names"]
    assert "gateway.upstream.server" in edges["gateway.commands.serve"]  # imported inside a function
    assert "gateway.logs" in edges["gateway.commands.cli"]  # from gateway import logs


def _sdk_internals(path: Path) -> list[str]:
    """The SDK internals ``path`` imports: private modules or names, and names a module of
    mcp leaves out of its ``__all__`` (a submodule is not a name)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if not isinstance(node, ast.ImportFrom) or not node.module or node.level:
            continue
        if node.module.split(".")[0] not in ("mcp", "mcp_types"):
            continue
        if any(part.startswith("_") for part in node.module.split(".")):
            found.append(f"the private module {node.module}")
            continue
        exported = getattr(importlib.import_module(node.module), "__all__", None)
        for alias in node.names:
            if alias.name.startswith("_"):
                found.append(f"the private name {node.module}.{alias.name}")
            elif exported is not None and alias.name not in exported:
                if importlib.util.find_spec(f"{node.module}.{alias.name}") is None:
                    found.append(f"{node.module}.{alias.name}, not in its __all__")
    return found


def test_sdk_internals_are_reached_only_in_gateway_sdk() -> None:
    """mcp's private modules and unexported names break without notice on an SDK release:
    each use sits in gateway/sdk.py, behind one function (its private attributes are
    ruff's SLF rule, on everywhere but the tests)."""
    bad = []
    for room in ("gateway", "catalog", "spill", "bench"):
        for path in sorted((ROOT / room).rglob("*.py")):
            if path == ROOT / "gateway" / "sdk.py":
                continue
            bad += [f"{path.relative_to(ROOT)}: imports {what}" for what in _sdk_internals(path)]
    assert not bad, "\n".join(bad)


def test_the_installed_sdk_is_the_release_gateway_sdk_was_checked_against() -> None:
    """gateway/sdk.py names the mcp minor release it was checked against; the installed one
    and the pin in pyproject.toml must be that release."""
    from gateway.sdk import CHECKED

    major, minor = (int(part) for part in CHECKED.split("."))
    assert importlib.metadata.version("mcp").startswith(f"{CHECKED}."), importlib.metadata.version("mcp")
    pins = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["dependencies"]
    assert f"mcp>={CHECKED},<{major}.{minor + 1}" in pins, pins
    assert f"mcp-types>={CHECKED},<{major}.{minor + 1}" in pins, pins


# The classes where new features land (a server's record, the hub that composes the engine):
# each keeps one job, and its other jobs live in modules of their own beside it.
SMALL_CLASSES = {
    ("gateway/downstream/connection.py", "Downstream"): 260,
    ("gateway/engine/hub.py", "Hub"): 260,
}


def _class_lines(path: Path, name: str) -> int:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            assert node.end_lineno is not None
            return node.end_lineno - node.lineno + 1
    raise AssertionError(f"{path.relative_to(ROOT)} has no class {name}")


def test_the_classes_features_land_in_stay_small() -> None:
    """Downstream is a server's record (status, lists, the request gate); a connection is
    link.py's Link, running them one after another supervisor.py, a tool call and its
    failures toolcall.py; Hub only composes the engine's parts. A class grown past its
    bound has taken on another job."""
    grown = [
        f"{path}: class {name} is {lines} lines (bound {bound})"
        for (path, name), bound in SMALL_CLASSES.items()
        if (lines := _class_lines(ROOT / path, name)) > bound
    ]
    assert not grown, "\n".join(grown)
