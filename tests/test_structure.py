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

from conftest import ROOT

sys.path.insert(0, str(ROOT / "tools"))
import imports  # noqa: E402

PLUGIN_SOURCES = [ROOT / "plugins", *sorted((ROOT / "docs" / "plugin-tutorial").glob("*/src"))]
MAX_LINES = 500


@pytest.fixture(scope="module")
def graph():
    return imports.read_graph()


def test_the_graph_sees_every_kind_of_import(graph):
    """The reader finds imports inside functions and under TYPE_CHECKING, not only at the top."""
    found = {(i.source, i.target, i.top_level) for i in graph.imports}
    assert ("nlptasks.host", "nlptasks.engine.defaults", True) in found
    assert ("nlptasks.pipeline.run", "nlptasks.engine.peft", False) in found  # inside a function
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
    graph.imports.append(imports.Import("nlptasks.engine.data", "nlptasks.engine.rows", 1, ("_secret",)))
    assert imports.private_names(graph)


def test_every_module_is_on_a_floor(graph):
    for module in graph.modules:
        imports.layer_of(module)  # raises for a module on no floor


def test_no_module_imports_another_modules_private_name(graph):
    assert [f"{i.source}:{i.line} {i.names}" for i in imports.private_names(graph)] == []


def test_package_inits_import_no_higher_floor_eagerly(graph):
    assert [f"{i.source}:{i.line} -> {i.target}" for i in imports.eager_package_imports(graph)] == []


def test_no_module_over_the_size_limit():
    files = [*(ROOT / "nlptasks").rglob("*.py"), *(ROOT / "plugins").rglob("*.py")]  # our plugins too
    long = {str(p.relative_to(ROOT)): n for p in files
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert long == {}


def test_every_module_says_what_is_public():
    missing = []
    for path in (ROOT / "nlptasks").rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        names = {t.id for node in tree.body if isinstance(node, (ast.Assign, ast.AnnAssign))
                 for t in (node.targets if isinstance(node, ast.Assign) else [node.target]) if isinstance(t, ast.Name)}
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
                    found += [(str(path.relative_to(ROOT)), node.lineno, a.name, ()) for a in node.names
                              if a.name.split(".")[0] == "nlptasks"]
                elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                    if node.module.split(".")[0] == "nlptasks":
                        found.append((str(path.relative_to(ROOT)), node.lineno, node.module,
                                      tuple(a.name for a in node.names)))
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
    (bad / "x.py").write_text("def f():\n    from nlptasks.engine.training import _strip\n", encoding="utf-8")
    monkeypatch.setattr(sys.modules[__name__], "PLUGIN_SOURCES", [bad])
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert _plugin_imports() == [("plugins/x.py", 2, "nlptasks.engine.training", ("_strip",))]


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
                assert all(p.annotation is not inspect.Parameter.empty for p in inspect.signature(value).parameters.values()
                           if p.name not in ("self",)), f"nlptasks.plugin.{name}: untyped parameter"


def test_importing_the_plugin_api_loads_no_heavy_library():
    import subprocess

    code = ("import sys, nlptasks.plugin; "
            "print([m for m in ('torch', 'transformers', 'datasets', 'peft') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
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
    import subprocess

    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "imports.py")], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stdout
    assert "import circles: 0" in proc.stdout and "imports from a lower floor to a higher one: 0" in proc.stdout


def test_floor_list_names_real_modules():
    for _, prefixes in imports.LAYERS:
        for prefix in prefixes:
            path = ROOT / Path(*prefix.split("."))
            assert path.with_suffix(".py").exists() or (path / "__init__.py").exists(), prefix
