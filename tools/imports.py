"""The import graph of a Python package, read from the source (every import: top level, inside
functions, under ``TYPE_CHECKING``), for the structure tests and for a look by hand::

    python tools/imports.py            # nlptasks: layers, circles, upward imports, private names

``from package import name`` counts as an import of ``package.name`` when that is a module, else
of ``package``.  Importing a submodule runs its parent packages' ``__init__`` too; those edges
are not counted, and :func:`eager_package_imports` checks instead that no package ``__init__``
imports eagerly from a floor above its lowest module (the ``nlptasks`` facade: only the ground).
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

LAYERS: list[tuple[str, tuple[str, ...]]] = [
    (
        "ground",
        (
            "nlptasks.errors",
            "nlptasks.deprecations",
            "nlptasks.version",
            "nlptasks.labels",
            "nlptasks.metrics",
            "nlptasks.peft_support",
        ),
    ),
    ("task types", ("nlptasks.types",)),
    ("recipe", ("nlptasks.recipe",)),
    ("run context", ("nlptasks.context",)),
    ("hook specs", ("nlptasks.hookspecs",)),
    ("engine", ("nlptasks.engine",)),
    ("plugin host", ("nlptasks.host",)),
    ("inference", ("nlptasks.inference",)),
    ("public plugin API", ("nlptasks.plugin",)),
    ("pipeline", ("nlptasks.pipeline",)),
    ("plan", ("nlptasks.plan",)),
    ("python API", ("nlptasks.api",)),
    ("hyperparameter search", ("nlptasks.tune",)),
    ("HTTP server", ("nlptasks.serve",)),
    ("dashboard", ("nlptasks.ui",)),
    ("CLI", ("nlptasks.cli",)),
    ("testing", ("nlptasks.testing",)),
    ("facade", ("nlptasks.__main__", "nlptasks")),
]
"""The floors of the house, ground first: a module may import its own floor and those below."""

ROOMS: dict[str, list[tuple[str, tuple[str, ...]]]] = {
    "nlptasks.engine": [
        ("system", ("nlptasks.engine.system",)),
        ("io", ("nlptasks.engine.io",)),
        ("data", ("nlptasks.engine.data",)),
        ("model", ("nlptasks.engine.model",)),
        ("training", ("nlptasks.engine.training",)),
        ("reports", ("nlptasks.engine.reports",)),
        ("defaults", ("nlptasks.engine.defaults", "nlptasks.engine")),
    ],
}
"""The rooms of a floor, lowest first: inside the floor, a module may import its own room and those
below (the engine's package ``__init__`` sits with its defaults, at the top)."""

SKIPS: dict[str, tuple[str, ...]] = {
    "nlptasks.cli": ("nlptasks.engine",),
    "nlptasks.serve": ("nlptasks.engine",),
    "nlptasks.ui": ("nlptasks.engine",),
    "nlptasks.api": ("nlptasks.engine",),
}
"""Floors a floor does not reach past: the commands, the server and the Python API go through the
floors between them and the engine (the inference floor, the pipeline), never into the engine."""


@dataclass
class Import:
    source: str
    target: str
    line: int
    names: tuple[str, ...] = ()
    top_level: bool = True


@dataclass
class Graph:
    modules: dict[str, Path]
    imports: list[Import] = field(default_factory=list)

    def edges(self) -> dict[str, set[str]]:
        out: dict[str, set[str]] = defaultdict(set)
        for imp in self.imports:
            if imp.target != imp.source:
                out[imp.source].add(imp.target)
        return out


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def read_graph(package: str = "nlptasks", root: Path = ROOT) -> Graph:
    """Every import between the modules of ``package`` (a folder under ``root``)."""
    modules = {module_name(p, root): p for p in sorted((root / package).rglob("*.py"))}
    graph = Graph(modules)
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        top = {id(node) for node in tree.body}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    target = _known(alias.name, modules)
                    if target:
                        graph.imports.append(Import(name, target, node.lineno, (), id(node) in top))
            elif isinstance(node, ast.ImportFrom):
                base = _absolute(node, name, is_package)
                if not base or not base.split(".")[0] == package:
                    continue
                plain = []
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    if sub in modules:
                        graph.imports.append(Import(name, sub, node.lineno, (), id(node) in top))
                    else:
                        plain.append(alias.name)
                if plain:
                    target = _known(base, modules)
                    if target:
                        graph.imports.append(Import(name, target, node.lineno, tuple(plain), id(node) in top))
    return graph


def _absolute(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    parts = module.split(".")
    keep = len(parts) - node.level + (1 if is_package else 0)
    return ".".join(parts[:keep] + ([node.module] if node.module else []))


def _known(name: str, modules: dict[str, Path]) -> str | None:
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def layer_of(module: str) -> int:
    """The floor of ``module`` (the longest matching prefix wins)."""
    best, index = -1, -1
    for i, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best:
                best, index = len(prefix), i
    if index < 0:
        raise KeyError(f"{module}: on no floor of tools/imports.py LAYERS")
    return index


def room_of(module: str) -> tuple[str, int] | None:
    """``(floor prefix, room index)`` of a module on a floor with rooms, else ``None``."""
    for floor, rooms in ROOMS.items():
        if module != floor and not module.startswith(floor + "."):
            continue
        best, index = -1, -1
        for i, (_, prefixes) in enumerate(rooms):
            for prefix in prefixes:
                if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best:
                    best, index = len(prefix), i
        if index < 0:
            raise KeyError(f"{module}: in no room of {floor} (tools/imports.py ROOMS)")
        return floor, index
    return None


def upward_rooms(graph: Graph) -> list[Import]:
    """Imports from a lower room of a floor to a higher room of the same floor."""
    bad = []
    for imp in graph.imports:
        a, b = room_of(imp.source), room_of(imp.target)
        if a is not None and b is not None and a[0] == b[0] and b[1] > a[1]:
            bad.append(imp)
    return bad


def skipped_floors(graph: Graph) -> list[Import]:
    """Imports that reach past the floors in between (:data:`SKIPS`)."""
    bad = []
    for imp in graph.imports:
        for source, targets in SKIPS.items():
            if (imp.source == source or imp.source.startswith(source + ".")) and any(
                imp.target == t or imp.target.startswith(t + ".") for t in targets
            ):
                bad.append(imp)
    return bad


def circles(graph: Graph) -> list[list[str]]:
    """Strongly connected groups of more than one module (import circles), each sorted."""
    edges = graph.edges()
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []
    counter = [0]
    sys.setrecursionlimit(10_000)

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return found


def upward(graph: Graph) -> list[Import]:
    """Imports from a lower floor to a higher one."""
    return [imp for imp in graph.imports if layer_of(imp.target) > layer_of(imp.source)]


def private_names(graph: Graph) -> list[Import]:
    """``from our.module import _name``: a private name of another module."""
    return [imp for imp in graph.imports if any(n.startswith("_") and not n.startswith("__") for n in imp.names)]


def eager_package_imports(graph: Graph) -> list[Import]:
    """Top-level imports in a package ``__init__`` of a module on a higher floor than the lowest of
    the package's modules.  Importing any submodule runs its parents' ``__init__``, so such an
    import would pull a higher floor into a lower one (the ``nlptasks`` facade may thus import
    only the ground floor eagerly; everything else it names loads on first use)."""
    bad = []
    for imp in graph.imports:
        if not imp.top_level or graph.modules[imp.source].name != "__init__.py":
            continue
        inside = [m for m in graph.modules if m.startswith(imp.source + ".")]
        lowest = min(layer_of(m) for m in inside) if inside else layer_of(imp.source)
        if layer_of(imp.target) > lowest:
            bad.append(imp)
    return bad


def _print(title: str, items: Iterable[object]) -> int:
    items = list(items)
    print(f"{title}: {len(items)}")
    for item in items:
        print(f"  {item}")
    return len(items)


def main() -> int:
    graph = read_graph()
    print(f"{len(graph.modules)} modules, {len(graph.imports)} imports between them")
    for i, (name, prefixes) in enumerate(LAYERS):
        print(f"  floor {i:2d} {name}: {', '.join(prefixes)}")
    bad = _print("import circles", circles(graph))
    bad += _print(
        "imports from a lower floor to a higher one", (f"{i.source}:{i.line} -> {i.target}" for i in upward(graph))
    )
    for floor, rooms in ROOMS.items():
        print(f"  rooms of {floor}: {' < '.join(name for name, _ in rooms)}")
    bad += _print(
        "imports from a lower room to a higher one", (f"{i.source}:{i.line} -> {i.target}" for i in upward_rooms(graph))
    )
    bad += _print(
        "imports past the floors in between", (f"{i.source}:{i.line} -> {i.target}" for i in skipped_floors(graph))
    )
    bad += _print(
        "imports of another module's private name",
        (f"{i.source}:{i.line} -> {i.target} {i.names}" for i in private_names(graph)),
    )
    bad += _print(
        "eager imports in package __init__ files",
        (f"{i.source}:{i.line} -> {i.target}" for i in eager_package_imports(graph)),
    )
    return 1 if bad else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except BrokenPipeError:  # `python tools/imports.py | head`
        sys.exit(0)
