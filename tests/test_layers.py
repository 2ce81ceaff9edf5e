"""The package's layers, checked by parsing every import of every module.

Layers, lowest first (a module may import its own layer and the ones below):

==========  ===============================================================
rank        subpackages
==========  ===============================================================
0 base      ``exceptions``, ``_columns``, ``_threads``, ``_distribution``
1 kernels   ``items``, ``tokens``, ``governance``, ``retrieval``
2 engine    ``engine`` (plan nodes, optimizer rules, lowering)
3 packing   ``packing`` (phases, pack, manifest)
4 frame     ``frame`` (the user's handle on a plan)
5 services  ``formats``, ``strategies``, ``continuity``
6 app       ``app`` (batch, command line, LoCoMo adapter), ``__main__``
7 testing   ``testing``
==========  ===============================================================

Among the kernels, ``items`` is the data model every other kernel reads:
kernels may import ``items`` but no other kernel may be imported by ``items``.
The engine reaches kernels other than ``items`` only lazily, inside the
handler that needs them. The top-level ``cognoxium/__init__.py`` is the
public facade and may import anything.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "python" / "cognoxium"

LAYERS: dict[str, int] = {
    "exceptions": 0,
    "_columns": 0,
    "_threads": 0,
    "_distribution": 0,
    "_lazy": 0,
    "items": 1,
    "tokens": 1,
    "governance": 1,
    "retrieval": 1,
    "engine": 2,
    "packing": 3,
    "frame": 4,
    "formats": 5,
    "strategies": 5,
    "continuity": 5,
    "app": 6,
    "__main__": 6,  # python -m cognoxium: the command line
    "testing": 7,
}
KERNELS = ("items", "tokens", "governance", "retrieval")
ABOVE_KERNELS = ("engine", "packing", "frame", "formats", "strategies", "continuity", "app")

# Upward imports that are allowed, each made lazily inside one function, with why.
LAZY_UPWARD: dict[tuple[str, str], str] = {
    ("engine", "strategies"): "the lowering of rank('strategies') imports its scorer on first "
    "use, so that the strategy registry and its backends load only for the plans that use them",
}


@dataclass(frozen=True)
class Import:
    source: str  # dotted module importing
    target: str  # dotted module imported
    line: int
    lazy: bool  # inside a function
    typing_only: bool  # under `if TYPE_CHECKING:`


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _targets(node: ast.Import | ast.ImportFrom, module: str, is_package: bool) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        anchor = module.split(".")
        anchor = anchor if is_package else anchor[:-1]
        anchor = anchor[: len(anchor) - node.level + 1]
        base = ".".join([*anchor, base] if base else anchor)
    # `from cognoxium.items import io` imports the module cognoxium.items.io
    out = []
    for alias in node.names:
        candidate = f"{base}.{alias.name}"
        path = PACKAGE.parent / candidate.replace(".", "/")
        out.append(candidate if path.with_suffix(".py").is_file() or path.is_dir() else base)
    return out


def _imports() -> list[Import]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = _module_name(path)
        tree = ast.parse(path.read_text(encoding="utf-8"))
        found += _walk(tree, module, path.name == "__init__.py", lazy=False, typing_only=False)
    return [i for i in found if i.target.split(".")[0] == "cognoxium"]


def _walk(
    node: ast.AST, module: str, is_package: bool, *, lazy: bool, typing_only: bool
) -> list[Import]:
    out: list[Import] = []
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.Import | ast.ImportFrom):
            out += [
                Import(module, target, child.lineno, lazy, typing_only)
                for target in _targets(child, module, is_package)
            ]
            continue
        child_lazy = lazy or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef)
        child_typing = typing_only or (
            isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test)
        )
        out += _walk(child, module, is_package, lazy=child_lazy, typing_only=child_typing)
    return out


def _layer(module: str) -> str | None:
    """The first-level subpackage or module of a dotted name, None for the root package."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


IMPORTS = _imports()


def test_every_first_level_name_has_a_layer() -> None:
    names = {p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__"}
    names |= {p.parent.name for p in PACKAGE.glob("*/__init__.py")}
    assert sorted(names - set(LAYERS)) == []
    assert len(IMPORTS) > 100  # the parser sees the package's imports


def test_no_import_reaches_a_higher_layer() -> None:
    bad = []
    for imp in IMPORTS:
        source, target = _layer(imp.source), _layer(imp.target)
        if source is None or target is None or LAYERS[target] <= LAYERS[source]:
            continue
        if imp.lazy and (source, target) in LAZY_UPWARD:
            continue
        bad.append(f"{imp.source}:{imp.line} imports {imp.target}")
    assert bad == []


def test_every_allowed_upward_import_is_used() -> None:
    used = {
        (_layer(imp.source), _layer(imp.target))
        for imp in IMPORTS
        if imp.lazy and _layer(imp.source) and _layer(imp.target)
    }
    assert sorted(set(LAZY_UPWARD) - used) == []


def test_kernels_never_import_the_layers_above_them_even_lazily() -> None:
    bad = [
        f"{imp.source}:{imp.line} imports {imp.target}"
        for imp in IMPORTS
        if _layer(imp.source) in KERNELS and _layer(imp.target) in ABOVE_KERNELS
    ]
    assert bad == []
    assert not any(source in KERNELS for source, _ in LAZY_UPWARD)


def test_items_import_no_other_kernel() -> None:
    bad = [
        f"{imp.source}:{imp.line} imports {imp.target}"
        for imp in IMPORTS
        if _layer(imp.source) == "items" and _layer(imp.target) in KERNELS[1:]
    ]
    assert bad == []


def test_the_engine_reaches_kernels_other_than_items_lazily() -> None:
    bad = [
        f"{imp.source}:{imp.line} imports {imp.target} at module level"
        for imp in IMPORTS
        if _layer(imp.source) == "engine"
        and _layer(imp.target) in KERNELS[1:]
        and not imp.lazy
        and not imp.typing_only
    ]
    assert bad == []


def test_no_private_name_is_imported_from_another_module() -> None:
    bad = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("cognoxium"):
                bad += [
                    f"{_module_name(path)}:{node.lineno} imports {node.module}.{alias.name}"
                    for alias in node.names
                    if alias.name.startswith("_") and alias.name != "__version__"
                ]
    assert bad == []


def _module_graph() -> dict[str, set[str]]:
    """Module-level (run-time) imports between modules, package facades left out."""
    graph: dict[str, set[str]] = {}
    for imp in IMPORTS:
        if imp.lazy or imp.typing_only or imp.target == "cognoxium":
            continue
        # A subpackage's __init__ re-exports its own modules: an edge from a
        # module to its own package's facade is not a dependency of its code.
        if imp.source.startswith(imp.target + "."):
            continue
        graph.setdefault(imp.source, set()).add(imp.target)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every cycle closed by a back edge of a depth-first search, as a path."""
    state: dict[str, int] = {}
    cycles: list[list[str]] = []

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                cycles.append([*stack[stack.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt, [*stack, nxt])
        state[node] = 2

    for start in sorted(graph):
        if start not in state:
            visit(start, [start])
    return cycles


def test_module_level_imports_have_no_cycle() -> None:
    assert _cycles(_module_graph()) == []


def test_the_cycle_search_finds_cycles() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_every_module_imports_first() -> None:
    """Each module imports with no other module of the package loaded before it."""
    modules = sorted(_module_name(p) for p in PACKAGE.rglob("*.py") if "presidio" not in p.name)
    code = (
        "import importlib, sys\n"
        f"for name in {modules!r}:\n"
        "    for loaded in [m for m in sys.modules if m.startswith('cognoxium')]:\n"
        "        del sys.modules[loaded]\n"
        "    importlib.import_module(name)\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stderr
