"""No import circles among Stamp's modules (issue 31): a module that imports another which
imports it back (directly or round a longer loop) is two halves of one thing, or one thing
in the wrong file. Every import counts, also one inside a function (it only postpones the
loop); an `if TYPE_CHECKING:` import does not (it never runs)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("common", "erasure", "frontend", "location", "lock_service", "partition_layer",
            "spark", "stream_layer", "tools")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _type_checking_only(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def imported(tree: ast.AST, modules: set[str], package: str) -> set[str]:
    """The project modules `tree` imports (a `from X import name` counts X.name when that is
    a module, else X)."""
    found: set[str] = set()
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _type_checking_only(node):
            stack.extend(node.orelse)
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, base] if base else parent)
            for alias in node.names:
                full = f"{base}.{alias.name}"
                found.add(full if full in modules else base)
        stack.extend(ast.iter_child_nodes(node))
    return {name for name in found if name in modules}


def import_graph() -> dict[str, set[str]]:
    paths = [p for package in PACKAGES for p in (ROOT / package).rglob("*.py")
             if "proto" not in p.relative_to(ROOT).parts]
    modules = {module_name(p): p for p in paths}
    graph = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        graph[name] = imported(ast.parse(path.read_text()), set(modules), package) - {name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_cycle_finder_finds_a_loop_and_nothing_else() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "e": set()}
    assert cycles(graph) == [["a", "b", "c"]]


def test_no_module_imports_itself_round_a_loop() -> None:
    found = cycles(import_graph())
    assert not found, "import circles: " + "; ".join(" <-> ".join(c) for c in found)
