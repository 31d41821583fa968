"""The SDK's public API says what it does (issue 31): every public module of stampsdk, every
public class and function in it, and every public method and property of a public class has
a docstring — the contract `make docs` (pdoc) publishes in docs/api/. And `make docs`'s pdoc
run builds.

Public: a module of stampsdk whose name does not start with "_" (stampsdk._proto is the
generated protocol code); in it, every name in its `__all__` and every name not starting
with "_", of the classes and functions it defines (a name it imports is checked where it is
defined; constants and type aliases carry no docstring at run time); in a public class,
every attribute of its own that does not start with "_" and is a function, classmethod,
staticmethod or property."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
import shlex
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import stampsdk

ROOT = Path(__file__).resolve().parents[2]
PDOC_TIMEOUT_S = 120
MAKE_TIMEOUT_S = 30


def public_modules() -> list[ModuleType]:
    found = [stampsdk]
    for info in pkgutil.walk_packages(stampsdk.__path__, "stampsdk."):
        if not any(part.startswith("_") for part in info.name.split(".")):
            found.append(importlib.import_module(info.name))
    return found


def public_names(module: ModuleType) -> list[str]:
    names = set(getattr(module, "__all__", ()))
    names |= {name for name in vars(module) if not name.startswith("_")}
    return sorted(names)


def checked_names(module: ModuleType) -> list[tuple[str, object]]:
    """The classes and functions among `module`'s public names that it defines, and every
    one its `__all__` re-exports (a name it merely imports is checked where it is defined)."""
    exported = set(getattr(module, "__all__", ()))
    found = []
    for name in public_names(module):
        obj = getattr(module, name)
        if not (inspect.isclass(obj) or inspect.isfunction(obj)):
            continue  # a constant, a type alias, a module: no docstring of its own
        if obj.__module__ == module.__name__ or name in exported:
            found.append((name, obj))
    return found


def public_members(cls: type) -> list[tuple[str, object]]:
    """A class's own public methods and properties (inherited ones are checked where they
    are defined)."""
    return [(name, member) for name, member in vars(cls).items()
            if not name.startswith("_") and (
                inspect.isfunction(member)
                or isinstance(member, (staticmethod, classmethod, property)))]


def docstring_of(obj: object) -> str | None:
    if isinstance(obj, (staticmethod, classmethod)):
        obj = obj.__func__
    doc = obj.__doc__
    return doc if doc and doc.strip() else None


def missing_docstrings() -> list[str]:
    missing = []
    for module in public_modules():
        if docstring_of(module) is None:
            missing.append(module.__name__)
        for _, obj in checked_names(module):
            where = f"{obj.__module__}.{obj.__qualname__}"  # once, where it is defined
            if docstring_of(obj) is None or (inspect.isclass(obj) and _generated_doc(obj)):
                missing.append(where)
            if inspect.isclass(obj):
                missing.extend(f"{where}.{member_name}"
                               for member_name, member in public_members(obj)
                               if docstring_of(member) is None)
    return sorted(set(missing))


def _generated_doc(cls: type) -> bool:
    """Whether a class's docstring is only what dataclass or NamedTuple made of its fields
    (`Entity(pname, row, value, etag)`): a signature, not a contract."""
    doc = (cls.__doc__ or "").strip()
    return re.fullmatch(rf"{re.escape(cls.__name__)}\(.*\)", doc, re.DOTALL) is not None


def test_every_public_name_of_the_sdk_has_a_docstring() -> None:
    missing = missing_docstrings()
    assert not missing, "public names of stampsdk without a docstring:\n" + "\n".join(missing)


def test_the_checker_sees_the_public_api() -> None:
    """The walk finds what a user imports (a checker that checks nothing passes too)."""
    names = {module.__name__ for module in public_modules()}
    assert {"stampsdk", "stampsdk.client", "stampsdk.aio", "stampsdk.errors",
            "stampsdk.retry", "stampsdk.limits", "stampsdk.scan", "stampsdk.sas",
            "stampsdk.connection_string"} <= names
    assert not any(name.startswith("stampsdk._") for name in names)
    client = dict(public_members(stampsdk.Client))
    assert {"append", "read", "scan", "account", "from_connection_string"} <= client.keys()

    class Undocumented:
        """A class with a method of no docstring."""

        def method(self) -> None:
            pass

        @property
        def value(self) -> int:
            return 1

    assert [name for name, member in public_members(Undocumented)
            if docstring_of(member) is None] == ["method", "value"]


def test_make_docs_pdoc_command_builds_the_reference(tmp_path: Path) -> None:
    """The pdoc command `make docs` runs (as `make -n` prints it, into a directory of the
    test's own) builds the reference of every public module, without an error."""
    pytest.importorskip("pdoc")
    out = tmp_path / "api"
    planned = subprocess.run(["make", "--no-print-directory", "-n", "docs", f"DOCS_API={out}"],
                             cwd=ROOT, capture_output=True, text=True, timeout=MAKE_TIMEOUT_S)
    assert planned.returncode == 0, planned.stderr
    (command,) = [line for line in planned.stdout.splitlines() if "/pdoc " in line]
    program, *args = shlex.split(command)
    if not (ROOT / program).exists():  # a checkout without its own venv (a worktree)
        program = str(Path(sys.executable).parent / "pdoc")
    done = subprocess.run([program, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=PDOC_TIMEOUT_S)
    assert done.returncode == 0, done.stderr
    assert (out / "index.html").exists()
    documented = {path.relative_to(out).as_posix() for path in out.rglob("*.html")}
    for module in public_modules():
        assert module.__name__.replace(".", "/") + ".html" in documented, module.__name__
    assert not any("_proto" in path for path in documented)
