"""The Python package's modules import each other without loops (a module's imports, at
the top or inside functions, never lead back to it), so that its layers point one way:
a loop is a layer that points up. Imports only for type checking (``if TYPE_CHECKING:``)
do not run and do not count; nor does a package's ``__init__`` re-exporting its children.
"""

from __future__ import annotations

import ast
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "python" / "shmcoll"


def _modules() -> dict[str, Path]:
    out = {}
    for f in PACKAGE.rglob("*.py"):
        parts = f.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = f
    return out


def _type_checking_only(tree: ast.Module) -> set[ast.AST]:
    """Import nodes under ``if TYPE_CHECKING:``."""
    skip: set[ast.AST] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for inner in node.body:
                skip.update(ast.walk(inner))
    return skip


def import_graph() -> dict[str, set[str]]:
    """Module -> the package's modules it imports."""
    mods = _modules()
    g: dict[str, set[str]] = {}
    for name, f in mods.items():
        g[name] = set()
        is_pkg = f.name == "__init__.py"
        tree = ast.parse(f.read_text())
        skip = _type_checking_only(tree)
        for node in ast.walk(tree):
            if node in skip:
                continue
            targets: list[str] = []
            if isinstance(node, ast.ImportFrom):
                base = name.split(".") if is_pkg else name.split(".")[:-1]
                if node.level:
                    base = base[: len(base) - (node.level - 1)]
                    module = ".".join(base + ([node.module] if node.module else []))
                else:
                    module = node.module or ""
                for alias in node.names:
                    full = f"{module}.{alias.name}"
                    targets.append(full if full in mods else module)
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            for t in targets:
                if t not in mods or t == name:
                    continue
                # A package's __init__ re-exports its children, and a child that imports
                # its package's __init__ gets the same objects: not layers.
                if (is_pkg and t.startswith(name + ".")) or name.startswith(t + "."):
                    continue
                g[name].add(t)
    return g


def test_the_checker_sees_imports() -> None:
    g = import_graph()
    assert "shmcoll.comm" in g["shmcoll.hierarchy"]
    assert "shmcoll.mpiexec" in g["shmcoll.tuning.tuner"]
    assert len(g) > 50
    # and a loop, when there is one
    with pytest.raises(CycleError):
        TopologicalSorter({**g, "shmcoll.comm": g["shmcoll.comm"] | {"shmcoll.hierarchy"}}).prepare()


def test_no_import_loops_in_the_package() -> None:
    try:
        TopologicalSorter(import_graph()).prepare()
    except CycleError as e:
        pytest.fail(f"modules that import each other (a layer pointing up): {' -> '.join(e.args[1])}")
