"""The import graph of qsa_cli, read from the sources (every import statement, at module level and inside
functions): the renderers and the record read no runner, and no modules import each other in a circle."""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "qsa_cli"
# What measures: a renderer or the record importing one of these (even inside a function) is output above a runner.
RUNNERS = ("stages", "launch", "engine", "model", "kernels", "catalog", "dispatch", "runs", "session", "sides",
           "inputs", "timing", "clocks", "device", "sanitize", "sanitize_child", "config")
READERS = ("output", "record")  # the packages that read only the record


def _name(path: Path) -> str:
    parts = ["qsa_cli", *path.relative_to(PACKAGE).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_name(p): p for p in PACKAGE.rglob("*.py")}


def _is_package(name: str) -> bool:
    return MODULES[name].name == "__init__.py"


def _resolved(importer: str, node: ast.ImportFrom) -> str:
    """The absolute module a ``from ... import`` reads from."""
    if not node.level:
        return node.module or ""
    base = importer.split(".") if _is_package(importer) else importer.split(".")[:-1]
    base = base[:len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


@cache
def imports(name: str) -> frozenset[str]:
    """The qsa_cli modules ``name`` imports anywhere in its source (a submodule named by ``from P import M`` too)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(MODULES[name].read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            module = _resolved(name, node)
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)
    return frozenset(m for m in found if m in MODULES and m != name)


def _with_parents(name: str) -> set[str]:
    """A module and the packages above it, whose ``__init__`` importing it runs."""
    parts = name.split(".")
    return {".".join(parts[:i]) for i in range(1, len(parts) + 1)}


@cache
def loaded(name: str) -> frozenset[str]:
    """Every qsa_cli module that importing ``name`` can load, its function-local imports' included."""
    seen: set[str] = set()
    todo = [name]
    while todo:
        for module in _with_parents(todo.pop()):
            if module not in seen:
                seen.add(module)
                todo += imports(module)
    return frozenset(seen - {name})


def _is_runner(name: str) -> bool:
    parts = name.split(".")
    return len(parts) > 1 and parts[1] in RUNNERS


def circles() -> list[list[str]]:
    """The import graph's strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(imports(v)):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for module in sorted(MODULES):
        if module not in index:
            visit(module)
    return out


def test_the_graph_is_read_from_every_module() -> None:
    assert {"qsa_cli.cli", "qsa_cli.output.rows", "qsa_cli.record.load", "qsa_cli.stages.topk"} <= set(MODULES)
    assert "qsa_cli.record.schema" in imports("qsa_cli.output.rows")
    assert "qsa_cli.runs.stages" in imports("qsa_cli.commands.select_bench")
    assert _is_runner("qsa_cli.stages.topk") and _is_runner("qsa_cli.runs") and not _is_runner("qsa_cli.output.gate")


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m.split(".")[1:2] and m.split(".")[1] in READERS))
def test_a_renderer_or_the_record_loads_no_runner(module: str) -> None:
    runners = sorted(m for m in loaded(module) if _is_runner(m))
    assert not runners, f"{module} loads {', '.join(runners)}"


def test_no_modules_import_each_other_in_a_circle() -> None:
    assert circles() == []


def test_output_and_record_are_in_no_circle() -> None:
    assert [c for c in circles() if any(m.split(".")[1] in READERS for m in c)] == []



@pytest.mark.parametrize("command", ["qsa_cli.commands.report", "qsa_cli.commands.plot"])
def test_a_command_that_reads_records_loads_no_runner(command: str) -> None:
    runners = sorted(m for m in loaded(command) if _is_runner(m))
    assert not runners, f"{command} loads {', '.join(runners)}"

# imported where used: everything else runs without them (cuda: cuda-bench's cuda.bench, for --timer nvbench)
OPTIONAL_HEAVY = ("cupy", "matplotlib", "pynvml", "cuda")


def _function_imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every import inside a function of ``path`` (a relative one with its dots)."""
    found = []
    for fn in ast.walk(ast.parse(path.read_text())):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(fn):
                if isinstance(node, ast.Import):
                    found += [(node.lineno, alias.name) for alias in node.names]
                elif isinstance(node, ast.ImportFrom):
                    found.append((node.lineno, "." * node.level + (node.module or "")))
    return found


def test_a_function_imports_only_an_optional_heavy_dependency() -> None:
    """No import circle or start-up cost needs a function-local import (cli.py loads a command's module only
    when it runs): the rest are at module level."""
    local = [f"{name}:{line} imports {module}" for name, path in sorted(MODULES.items())
             for line, module in _function_imports(path) if module.split(".")[0] not in OPTIONAL_HEAVY]
    assert local == []
    assert ("qsa_cli.device", "cupy") in {(n, m) for n, p in MODULES.items() for _, m in _function_imports(p)}


TESTS = Path(__file__).resolve().parent


def _qsa_imports_in_tests() -> list[tuple[str, str, str]]:
    """Every ``from qsa_cli... import name`` in the tests, inside functions too (a GPU test's local import runs
    only on a device, so a stale one would first fail there)."""
    found = []
    for path in sorted(TESTS.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").startswith("qsa_cli"):
                found += [(f"{path.name}:{node.lineno}", node.module, alias.name) for alias in node.names]
    return found


def test_every_name_the_tests_import_from_qsa_exists() -> None:
    import importlib

    missing = []
    for where, module, name in _qsa_imports_in_tests():
        imported = importlib.import_module(module)
        if not hasattr(imported, name) and f"{module}.{name}" not in MODULES:
            missing.append(f"{where}: {module} has no {name}")
    assert not missing, "\n".join(missing)
