"""Layers point one way: no file imports from a file that imports it back, directly or
through others, in the Python package or in any Rust crate (a loop is a layer pointing
up). Python: imports at the top or inside functions count; imports only for type checking
(``if TYPE_CHECKING:``) do not run and do not count, nor does a package's ``__init__``
re-exporting its children. Rust: every `crate::`, `super::` and `self::` path in a file's
code (not its comments) names a file it uses; test-only modules do not count.
"""

from __future__ import annotations

import ast
import re
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "python" / "shmcoll"
CRATES = sorted((ROOT / "rust").glob("*/src"))


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


def _rust_modules(src: Path) -> dict[str, Path]:
    """Module path ("collectives::select", "" for the crate root) -> file."""
    out = {}
    for f in src.rglob("*.rs"):
        parts = list(f.relative_to(src).with_suffix("").parts)
        if parts[-1] in ("mod", "lib"):
            parts = parts[:-1]
        out["::".join(parts)] = f
    return out


def _code(text: str) -> str:
    """A Rust file without its comments and its `#[cfg(test)] mod tests { ... }` (last)."""
    text = re.sub(r"//[^\n]*", "", text)
    cut = re.search(r"#\[cfg\(test\)\]\s*mod tests\s*\{", text)
    return text[: cut.start()] if cut else text


def rust_graph(src: Path) -> dict[str, set[str]]:
    mods = _rust_modules(src)
    root = _code(mods[""].read_text())
    test_only = set(re.findall(r"#\[cfg\(test\)\]\s*(?:pub(?:\(crate\))? )?mod (\w+);", root))
    g: dict[str, set[str]] = {m: set() for m in mods if m.split("::")[0] not in test_only}

    def target(cur: str, is_dir: bool, path: list[str]) -> str | None:
        head, rest = path[0], path[1:]
        here = cur.split("::") if cur else []
        if head == "crate":
            base: list[str] = []
        elif head == "self":
            base = here if is_dir else here[:-1]
        else:  # super
            base = (here if is_dir else here[:-1])[:-1]
            while rest and rest[0] == "super":
                base, rest = base[:-1], rest[1:]
        for k in range(len(rest), 0, -1):
            cand = "::".join(base + rest[:k])
            if cand in mods:
                return cand
        return None

    for m, uses in g.items():
        f = mods[m]
        is_dir = f.name in ("mod.rs", "lib.rs")
        code = _code(f.read_text())
        paths = [p.split("::") for p in re.findall(r"\b(?:crate|super|self)(?:::\w+)+", code)]
        for head, group in re.findall(r"\b(crate|super|self)::\{([^}]*)\}", code):
            paths += [[head, *item.strip().split("::")] for item in group.split(",") if item.strip()]
        for p in paths:
            t = target(m, is_dir, p)
            # a module's own children, and its ancestors (re-exports), are not layers
            if t is None or t == m or t not in g or t.startswith(m + "::") or m.startswith(t + "::"):
                continue
            if m == "" or t == "":
                continue
            uses.add(t)
    return g


def test_the_rust_checker_sees_uses() -> None:
    g = rust_graph(ROOT / "rust" / "shmcoll-coll" / "src")
    assert "comm" in g["collectives::direct"]
    assert "tables" in g["comm"] and "op" in g["comm"]
    assert "corrupt" not in g  # test-only


@pytest.mark.parametrize("src", CRATES, ids=lambda p: p.parent.name)
def test_no_use_loops_in_a_crate(src: Path) -> None:
    try:
        TopologicalSorter(rust_graph(src)).prepare()
    except CycleError as e:
        pytest.fail(
            f"{src.parent.name}: files that use each other (a layer pointing up): {' -> '.join(e.args[1])}"
        )
