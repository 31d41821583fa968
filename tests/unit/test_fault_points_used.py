"""Every fault point in the production code is armed by some test (issue 15).

A fault point no test arms guards nothing: the crash or delay it stands for is never tried.
This test reads the code, not a list kept by hand, so a new point fails it until a test arms
it:

- the points: every name given to `faults.point/apoint/hit/crash/flipped`, to a parameter
  whose name says it is a fault point (`fault_point=`, `fault_name=`, positionally or by
  keyword, and its default), or built in an f-string for one
  (`en.forward.before_send@{address}` is the family `en.forward.before_send@*`), in the
  server packages below;
- the armed ones: every `name=action` spec in a string of a test (STAMP_FAULTS, `arm_remote`,
  `stamp fault`), every `arm("name", ...)`, and the names a parametrized test puts into a
  spec through a placeholder (`f"{point}=crash"` with `parametrize("point", [...])`, or
  `point = "name"` in the test).

A point whose name this scan cannot work out (a name computed at run time) fails the test
too: it cannot be proved armed.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from common.faults import ACTIONS

ROOT = Path(__file__).resolve().parents[2]
PRODUCTION_PACKAGES = ("common", "stream_layer", "partition_layer", "lock_service",
                       "frontend", "erasure", "spark", "tools")
FAULT_CALLS = {"point", "apoint", "hit", "crash", "flipped"}
# Parameters that carry a fault point's name into the code that fires it.
FAULT_PARAMETERS = {"fault_point", "fault_name"}
# The tests of the fault mechanism itself arm made-up names; they arm no production point.
NOT_ARMING = {"tests/unit/test_faults.py", "tests/unit/test_fault_points_used.py"}
PLACEHOLDER = "{}"
SPEC = re.compile(r"([A-Za-z_{][\w.{}]*(?:@[^=;,\s\"']*)?)=(?:" + "|".join(ACTIONS) + r")\b")


@dataclass(frozen=True)
class Point:
    name: str  # "family@*" for a point named per peer
    where: str

    def armed_by(self, armed: set[str]) -> bool:
        if self.name.endswith("@*"):
            return any(a.startswith(self.name[:-1]) for a in armed)
        return self.name in armed


def _python_files(*roots: str) -> Iterator[tuple[str, ast.Module]]:
    for root in roots:
        for path in sorted((ROOT / root).rglob("*.py")):
            relative = path.relative_to(ROOT).as_posix()
            if "/proto/" in relative or relative.endswith("_pb2.py"):
                continue
            yield relative, ast.parse(path.read_text(), relative)


def _render(node: ast.expr) -> str | None:
    """A string constant as is; an f-string with each placeholder as `{}`; else None."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else PLACEHOLDER
                       for v in node.values)
    return None


def _callee(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def _target_key(node: ast.expr) -> str | None:
    """`x` or `self.x` as a key for the assignments of a module."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        return f"{node.value.id}.{node.attr}"
    return None


def _family(text: str) -> str:
    return text.split("@")[0] + "@*" if PLACEHOLDER in text else text


# ---- the production code's fault points -------------------------------------------------------

def _fault_parameters(modules: list[tuple[str, ast.Module]]) -> dict[str, int]:
    """Functions with a parameter named for a fault point -> its position (self excluded)."""
    found: dict[str, int] = {}
    for _, module in modules:
        for node in ast.walk(module):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                names = [a.arg for a in node.args.args if a.arg not in ("self", "cls")]
                for index, name in enumerate(names):
                    if name in FAULT_PARAMETERS:
                        found[node.name] = index
    return found


def production_points() -> tuple[set[Point], list[str]]:
    """(the points, the places a point's name could not be worked out)."""
    modules = [m for m in _python_files(*PRODUCTION_PACKAGES) if m[0] != "common/faults.py"]
    parameters = _fault_parameters(modules)
    points: set[Point] = set()
    unresolved: list[str] = []
    for relative, module in modules:
        assigned: dict[str, list[ast.expr]] = {}
        for node in ast.walk(module):
            if isinstance(node, ast.Assign):
                for target in node.targets:
                    if (key := _target_key(target)) is not None:
                        assigned.setdefault(key, []).append(node.value)
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                args = node.args.args
                defaults = dict(zip([a.arg for a in args[len(args) - len(node.args.defaults):]],
                                    node.args.defaults, strict=True))
                defaults |= {a.arg: d for a, d in zip(node.args.kwonlyargs,
                                                      node.args.kw_defaults, strict=True) if d}
                for name, default in defaults.items():
                    text = _render(default)
                    if name in FAULT_PARAMETERS and text:
                        points.add(Point(_family(text), f"{relative}:{default.lineno}"))

        def resolve(arg: ast.expr, where: str, assigned: dict[str, list[ast.expr]] = assigned,
                    relative: str = relative) -> None:
            if isinstance(arg, ast.Name) and arg.id in FAULT_PARAMETERS:
                return  # the parameter itself, where it fires: counted at its callers
            text = _render(arg)
            if text is not None:
                if text:
                    points.add(Point(_family(text), where))
                return
            key = _target_key(arg)
            values = assigned.get(key or "", [])
            texts = [_render(v) for v in values]
            if not values or any(t is None for t in texts):
                # A name held in a parameter (the journal's fault_name) is counted at its
                # default; anything else cannot be proved armed.
                if key not in ("self._fault_name",):
                    unresolved.append(f"{where}: {ast.unparse(arg)}")
                return
            for value, t in zip(values, texts, strict=True):
                points.add(Point(_family(t or ""), f"{relative}:{value.lineno}"))

        for node in ast.walk(module):
            if not isinstance(node, ast.Call):
                continue
            where = f"{relative}:{node.lineno}"
            callee = _callee(node)
            is_faults = (isinstance(node.func, ast.Attribute)
                         and isinstance(node.func.value, ast.Name)
                         and node.func.value.id == "faults")
            if is_faults and callee in FAULT_CALLS and node.args:
                resolve(node.args[0], where)
            if callee in parameters:
                index = parameters[callee]
                # Called as a method: the servicer's own `self` is not in node.args.
                if index < len(node.args):
                    resolve(node.args[index], where)
            for keyword in node.keywords:
                if keyword.arg in FAULT_PARAMETERS:
                    resolve(keyword.value, where)
    return points, unresolved


# ---- what the tests arm -----------------------------------------------------------------------

def _parametrized(function: ast.FunctionDef | ast.AsyncFunctionDef) -> dict[str, list[str]]:
    """The parametrize decorators of a test -> {argument name: its string values}: from
    parametrize("point", ["a", "b"]) and parametrize(("point", "n"), [("a", 1), ...])."""
    found: dict[str, list[str]] = {}
    for decorator in function.decorator_list:
        if not (isinstance(decorator, ast.Call) and _callee(decorator) == "parametrize"
                and len(decorator.args) >= 2
                and isinstance(decorator.args[1], ast.List | ast.Tuple)):
            continue
        names_node, values = decorator.args
        if isinstance(names_node, ast.Tuple | ast.List):
            names = [_render(n) or "" for n in names_node.elts]
        else:
            names = [n.strip() for n in (_render(names_node) or "").split(",")]
        for value in values.elts:
            items = value.elts if len(names) > 1 and isinstance(value, ast.Tuple) else [value]
            for name, item in zip(names, items, strict=False):
                if (text := _render(item)) is not None:
                    found.setdefault(name, []).append(text)
    return found


def armed_names() -> set[str]:
    armed: set[str] = set()
    for relative, module in _python_files("tests"):
        if relative in NOT_ARMING:
            continue
        for node in ast.walk(module):
            if (isinstance(node, ast.Call) and _callee(node) == "arm" and node.args
                    and (text := _render(node.args[0])) is not None):
                armed.add(text)
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                params = _parametrized(node)
                for inner in ast.walk(node):  # and `point = "name"` in the test's body
                    if (isinstance(inner, ast.Assign) and len(inner.targets) == 1
                            and isinstance(inner.targets[0], ast.Name)
                            and (text := _render(inner.value)) is not None):
                        params.setdefault(inner.targets[0].id, []).append(text)
                for inner in ast.walk(node):
                    if (isinstance(inner, ast.JoinedStr) and inner.values
                            and isinstance(inner.values[0], ast.FormattedValue)
                            and isinstance(inner.values[0].value, ast.Name)
                            and SPEC.match(_render(inner) or "")):
                        armed.update(params.get(inner.values[0].value.id, []))
            text = _render(node) if isinstance(node, ast.Constant | ast.JoinedStr) else None
            if text:
                armed.update(m.group(1) for m in SPEC.finditer(text)
                             if not m.group(1).startswith(PLACEHOLDER))
    return armed


# ---- the tests --------------------------------------------------------------------------------

def test_the_scan_finds_the_points_it_must() -> None:
    """The scan itself: the kinds of point it claims to find are found (a scan that finds
    nothing would pass the real test vacuously)."""
    names = {p.name for p in production_points()[0]}
    assert {"journal.before_fsync",             # faults.point("...")
            "ps.commit.before_append",          # faults.apoint("...")
            "journal.torn_write",               # faults.hit("...")
            "raft_journal.sync",                # a fault_name= parameter's default
            "en.primary.before_ack",            # positional, to a fault_point parameter
            "en.forward.before_send@*",         # an f-string held in an attribute
            } <= names
    assert len(names) >= 20


def test_the_scan_reads_every_way_a_test_arms() -> None:
    armed = armed_names()
    assert {"ps.commit.before_append",          # arm_remote(..., "name=delay:...; ...")
            "ec.convert.after_encode",          # parametrize + f"{point}=crash"
            "raft_journal.sync",                # f"...=torn,after={n}" in STAMP_FAULTS
            "en.secondary.before_ack",          # parametrize(("point", "victim_index"), ...)
            "en.seal.before_record",            # point = "..."; f"{point}=crash"
            } <= armed
    assert any(a.startswith("en.forward.before_send@") for a in armed)


def test_every_fault_point_is_armed_by_some_test() -> None:
    points, unresolved = production_points()
    assert not unresolved, ("fault points whose names cannot be worked out from the code "
                            "(use a literal or an f-string): " + "; ".join(unresolved))
    armed = armed_names()
    never = sorted({f"{p.name} ({p.where})" for p in points if not p.armed_by(armed)})
    assert not never, f"{len(never)} fault point(s) armed by no test: " + ", ".join(never)
