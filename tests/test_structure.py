"""The structure shows the design: floors without circles, a public plugin API that our own plugins
and the tutorials use alone, private internals, small modules.  The import graph is read from the
source by tools/imports.py (every import: top level, inside functions, under TYPE_CHECKING)."""

from __future__ import annotations

import ast
import importlib
import inspect
import sys
from pathlib import Path

import pytest

from conftest import ROOT, run_process

sys.path.insert(0, str(ROOT / "tools"))
import imports  # noqa: E402

PLUGIN_SOURCES = [
    ROOT / "plugins",
    *sorted((ROOT / "docs" / "plugin-tutorial").glob("*/src")),
    ROOT / "tests" / "plugins",
]
MAX_LINES = 500
MAX_ENGINE_LINES = 400
LONGER = {"nlptasks/hookspecs.py": 600}  # the hook reference: its docstrings are the API documentation


@pytest.fixture(scope="module")
def graph():
    return imports.read_graph()


def test_the_graph_sees_every_kind_of_import(graph):
    """The reader finds imports inside functions and under TYPE_CHECKING, not only at the top."""
    found = {(i.source, i.target, i.top_level) for i in graph.imports}
    assert ("nlptasks.host", "nlptasks.engine.defaults", True) in found
    assert ("nlptasks.pipeline.run", "nlptasks.pipeline.assembly", False) in found  # inside a function
    assert ("nlptasks.context", "nlptasks.recipe", False) in found  # under TYPE_CHECKING
    assert len(graph.modules) > 50


def test_no_import_circles(graph):
    assert imports.circles(graph) == []


def test_no_import_from_a_lower_floor_to_a_higher_one(graph):
    bad = [f"{i.source}:{i.line} imports {i.target}" for i in imports.upward(graph)]
    assert bad == []


def test_the_checks_catch_what_they_look_for():
    """A circle and an upward import planted in a copy of the graph are found."""
    graph = imports.read_graph()
    graph.imports.append(imports.Import("nlptasks.errors", "nlptasks.cli", 1))
    assert imports.upward(graph)
    assert any("nlptasks.errors" in group for group in imports.circles(graph))
    graph.imports.append(imports.Import("nlptasks.engine.data.reading", "nlptasks.engine.data.rows", 1, ("_secret",)))
    assert imports.private_names(graph)


def test_every_module_is_on_a_floor(graph):
    for module in graph.modules:
        imports.layer_of(module)  # raises for a module on no floor
        imports.room_of(module)  # and, on a floor with rooms, in a room


def test_no_import_from_a_lower_room_to_a_higher_one(graph):
    """The engine's rooms (system < io < data < model < training < reports < defaults) are floors
    inside the floor."""
    assert [f"{i.source}:{i.line} imports {i.target}" for i in imports.upward_rooms(graph)] == []


def test_the_commands_server_and_python_api_never_reach_into_the_engine(graph):
    """cli/, serve/ and api.py go through the inference floor and the pipeline: 0 edges to engine/."""
    assert [f"{i.source}:{i.line} imports {i.target}" for i in imports.skipped_floors(graph)] == []


def test_the_room_and_skip_checks_catch_what_they_look_for():
    graph = imports.read_graph()
    graph.imports.append(imports.Import("nlptasks.engine.system.machine", "nlptasks.engine.training.trainer", 1))
    graph.imports.append(imports.Import("nlptasks.cli.infer", "nlptasks.engine.io.rundir", 1))
    assert [(i.source, i.target) for i in imports.upward_rooms(graph)] == [
        ("nlptasks.engine.system.machine", "nlptasks.engine.training.trainer")
    ]
    assert ("nlptasks.cli.infer", "nlptasks.engine.io.rundir") in [
        (i.source, i.target) for i in imports.skipped_floors(graph)
    ]


def test_no_module_imports_another_modules_private_name(graph):
    assert [f"{i.source}:{i.line} {i.names}" for i in imports.private_names(graph)] == []


def test_package_inits_import_no_higher_floor_eagerly(graph):
    assert [f"{i.source}:{i.line} -> {i.target}" for i in imports.eager_package_imports(graph)] == []


def test_no_module_over_the_size_limit():
    """Modules small enough to read in one sitting: 500 lines, 400 in the engine."""
    files = [*(ROOT / "nlptasks").rglob("*.py"), *(ROOT / "plugins").rglob("*.py")]  # our plugins too
    engine = ROOT / "nlptasks" / "engine"
    long = {
        str(p.relative_to(ROOT)): n
        for p in files
        if (n := len(p.read_text(encoding="utf-8").splitlines()))
        > LONGER.get(str(p.relative_to(ROOT)), MAX_ENGINE_LINES if engine in p.parents else MAX_LINES)
    }
    assert long == {}


def _public_names(path: Path) -> list[str] | None:
    """A module's ``__all__`` as written (``None`` when it is not a literal list)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in tree.body:
        targets = (
            node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        )
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets) and node.value is not None:
            try:
                return list(ast.literal_eval(node.value))
            except ValueError:
                return None
    return []


def _package_of(module: str) -> str:
    return module.rpartition(".")[0]


def test_every_name_imported_from_another_module_is_in_its_all(graph):
    """``from nlptasks.x import name``: ``name`` is in ``x.__all__``, or is private to ``x``'s own
    package and imported from inside it (a module's ``__all__`` says what others may use)."""
    bad = []
    for imp in graph.imports:
        if not imp.names or imp.source == imp.target:
            continue
        public = _public_names(graph.modules[imp.target])
        if public is None:  # computed: the facade's lazy exports
            continue
        same_package = _package_of(imp.source) == _package_of(imp.target) or imp.source.startswith(imp.target + ".")
        for name in imp.names:
            if name in public or name == "*" or (same_package and name.startswith("_")):
                continue
            bad.append(f"{imp.source}:{imp.line} imports {name} from {imp.target}, not in its __all__")
    assert bad == []


def test_no_name_is_public_twice():
    """A name listed twice in a module's ``__all__`` is a merge slip (nlptasks.plugin once listed
    ``choose_thresholds`` and ``multilabel_report`` twice; docs/plugin-api.md is generated from it)."""
    twice = {}
    for path in [*(ROOT / "nlptasks").rglob("*.py"), *(ROOT / "plugins").rglob("*.py")]:
        names = _public_names(path) or []
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            twice[str(path.relative_to(ROOT))] = repeated
    assert twice == {}


def test_every_module_says_what_is_public():
    missing = []
    for path in (ROOT / "nlptasks").rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        names = {
            t.id
            for node in tree.body
            if isinstance(node, (ast.Assign, ast.AnnAssign))
            for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
            if isinstance(t, ast.Name)
        }
        if "__all__" not in names:
            missing.append(str(path.relative_to(ROOT)))
    assert missing == []


def _plugin_imports() -> list[tuple[str, int, str, tuple[str, ...]]]:
    """``(file, line, module, names)`` of every import of nlptasks in the plugins we ship."""
    found = []
    for root in PLUGIN_SOURCES:
        for path in root.rglob("*.py"):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if isinstance(node, ast.Import):
                    found += [
                        (str(path.relative_to(ROOT)), node.lineno, a.name, ())
                        for a in node.names
                        if a.name.split(".")[0] == "nlptasks"
                    ]
                elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                    if node.module.split(".")[0] == "nlptasks":
                        found.append(
                            (str(path.relative_to(ROOT)), node.lineno, node.module, tuple(a.name for a in node.names))
                        )
    return found


def test_plugins_and_tutorials_import_only_the_public_surface():
    """plugins/ and docs/plugin-tutorial/*/src import ``nlptasks.plugin`` and the names of
    ``nlptasks`` itself, nothing else of nlptasks (so a third party can do everything they do)."""
    import nlptasks

    found = _plugin_imports()
    assert len({f for f, *_ in found}) >= 8  # every plugin file that uses nlptasks was read
    bad = []
    for file, line, module, names in found:
        if module == "nlptasks.plugin":
            bad += [f"{file}:{line} nlptasks.plugin has no {n}" for n in names if n not in nlptasks.plugin.__all__]
        elif module == "nlptasks":
            bad += [f"{file}:{line} nlptasks.{n} is not public" for n in names if n not in nlptasks.__all__]
        else:
            bad.append(f"{file}:{line} imports {module}")
    assert bad == []


def test_the_plugin_import_scan_catches_an_internal_import(tmp_path, monkeypatch):
    bad = tmp_path / "plugins"
    bad.mkdir()
    (bad / "x.py").write_text("def f():\n    from nlptasks.engine.training.trainer import _strip\n", encoding="utf-8")
    monkeypatch.setattr(sys.modules[__name__], "PLUGIN_SOURCES", [bad])
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert _plugin_imports() == [("plugins/x.py", 2, "nlptasks.engine.training.trainer", ("_strip",))]


def test_the_public_plugin_api_is_complete_and_documented():
    plugin = importlib.import_module("nlptasks.plugin")
    grouped = [name for names in plugin.API_GROUPS.values() for name in names]
    assert sorted(grouped) == sorted(set(plugin.__all__) - {"API_GROUPS"})
    assert len(grouped) == len(set(grouped))
    for name in grouped:
        value = getattr(plugin, name)
        if inspect.isfunction(value) or inspect.isclass(value):
            assert (value.__doc__ or "").strip(), f"nlptasks.plugin.{name} has no docstring"
            if inspect.isfunction(value):
                assert all(
                    p.annotation is not inspect.Parameter.empty
                    for p in inspect.signature(value).parameters.values()
                    if p.name not in ("self",)
                ), f"nlptasks.plugin.{name}: untyped parameter"


def test_importing_the_plugin_api_loads_no_heavy_library():
    code = (
        "import sys, nlptasks.plugin; "
        "print([m for m in ('torch', 'transformers', 'datasets', 'peft') if m in sys.modules])"
    )
    out = run_process([sys.executable, "-c", code])
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_the_old_engine_helpers_still_import_with_a_warning():
    import warnings

    import nlptasks.engine as engine
    from nlptasks.plugin import get_tokenizer

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert engine.get_tokenizer is get_tokenizer
    assert any("nlptasks.plugin" in str(w.message) for w in caught)


def test_tools_imports_runs_clean():
    proc = run_process([sys.executable, str(ROOT / "tools" / "imports.py")])
    assert proc.returncode == 0, proc.stdout
    assert "import circles: 0" in proc.stdout and "imports from a lower floor to a higher one: 0" in proc.stdout


def test_floor_list_names_real_modules():
    for _, prefixes in imports.LAYERS:
        for prefix in prefixes:
            path = ROOT / Path(*prefix.split("."))
            assert path.with_suffix(".py").exists() or (path / "__init__.py").exists(), prefix


def test_the_wheel_holds_every_module_and_file(tmp_path):
    """A plain `pip install` (not editable) gets every module: pyproject.toml lists packages by name,
    and a package folder missing from the list (engine.io, inference: it happened) was absent from
    the wheel while editable installs and the tests saw it.  Built without isolation (offline)."""
    import zipfile

    code = run_process(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            str(ROOT),
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
        ]
    )
    assert code.returncode == 0, code.stderr
    (wheel,) = tmp_path.glob("nlptasks-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    wanted = {
        ("nlptasks_plugins" / path.relative_to(ROOT / "plugins")).as_posix()
        if path.is_relative_to(ROOT / "plugins")
        else path.relative_to(ROOT).as_posix()
        for top in ("nlptasks", "plugins")
        for path in (ROOT / top).rglob("*")
        if path.is_file() and "__pycache__" not in path.parts
    }
    assert wanted - names == set()


DEPENDENCY_MODULES: dict[str, str] = {}
"""Distribution name → import name where they differ beyond ``-`` → ``_`` (none today)."""


def test_every_installed_dependency_is_imported_by_the_package():
    """No package is installed for nothing: every entry of ``dependencies`` in pyproject.toml is
    imported somewhere in nlptasks/ or plugins/ (``evaluate`` was declared and imported nowhere)."""
    import re
    import tomllib

    declared = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["dependencies"]
    sources = [p.read_text(encoding="utf-8") for top in ("nlptasks", "plugins") for p in (ROOT / top).rglob("*.py")]
    unused = []
    for requirement in declared:
        name = re.match(r"[A-Za-z0-9_.-]+", requirement).group(0).lower()
        module = DEPENDENCY_MODULES.get(name, name.replace("-", "_"))
        pattern = re.compile(rf"^\s*(import|from) {re.escape(module)}\b", re.MULTILINE)
        if not any(pattern.search(text) for text in sources):
            unused.append(name)
    assert unused == [], f"declared in pyproject.toml, imported nowhere: {unused}"
