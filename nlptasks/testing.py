"""What a plugin author needs to test a plugin, in-process and without installing it.

::

    import my_plugin
    from nlptasks.testing import TINY, plugin_host, run_recipe

    def test_my_task_trains(tmp_path):
        host = plugin_host(my_task=my_plugin)                 # only this plugin: no entry points
        result = run_recipe("recipe.toml", *TINY, "train.epochs=1", host=host, folder=tmp_path)
        assert result.metrics["validation"]["accuracy"] > 0.8
        assert result.predict(["some text"])[0]["label"] in result.manifest["labels"]

:func:`plugin_host` builds a host that loads only the plugins given (and, with ``builtins=True``,
nlptasks' own task plugins), never the ``nlptasks`` entry points of whatever else is installed.
:func:`run_recipe` validates and runs a recipe with that host in a folder of its own and returns
the run; :func:`using_host` makes a host the process's own for a while (the CLI then uses it), and
:func:`run_cli` runs ``nlptasks ...`` in-process with captured output.  Our own test suite uses
these.
"""

from __future__ import annotations

import contextlib
import io
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from nlptasks.host import ENTRY_POINT_GROUP, Host, current_host, get_host, reset_host
from nlptasks.pipeline import RunResult, load_predictor, load_recipe, run

__all__ = ["TINY", "TestRun", "builtin_plugins", "plugin_host", "run_cli", "run_recipe", "using_host"]

TINY = (
    "model.scratch.layers=1",
    "model.scratch.hidden=32",
    "model.scratch.heads=2",
    "model.scratch.intermediate=64",
    "model.max_length=64",
)
"""``--set`` overrides that shrink a from-scratch recipe's model so that a run takes seconds."""


def builtin_plugins() -> dict[str, Any]:
    """nlptasks' own task plugins (``cls``, ``ner``, ``pair``, ``sft``), by plugin name, from the
    entry points of the nlptasks distribution alone."""
    found = {}
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        dist = getattr(ep, "dist", None)
        if dist is not None and dist.metadata["Name"] == "nlptasks":
            found[ep.name] = ep.load()
    return dict(sorted(found.items()))


def plugin_host(*plugins: Any, builtins: bool = False, **named: Any) -> Host:
    """A plugin host with only the given plugins (modules or objects), registered as a plugin
    author's package would be, and no entry-point autoload.

    :param plugins: plugins named after their module (``nlptasks_qa`` → ``qa`` when the module
        name starts with ``nlptasks_``).
    :param builtins: also register nlptasks' own task plugins.
    :param named: plugins under the given names (``plugin_host(qa=nlptasks_qa)``).
    """
    host = Host(load_entrypoints=False)
    chosen: dict[str, Any] = dict(builtin_plugins()) if builtins else {}
    for plugin in plugins:
        name = getattr(plugin, "__name__", type(plugin).__name__).rsplit(".", 1)[-1]
        chosen[name.removeprefix("nlptasks_")] = plugin
    chosen.update(named)
    for name, plugin in chosen.items():
        host.register(plugin, name=name)
    return host


@contextlib.contextmanager
def using_host(host: Host) -> Iterator[Host]:
    """Make ``host`` the process's plugin host inside the block (what the CLI and ``nlptasks.load``
    use), then put the previous one back."""
    before = current_host()
    reset_host(host)
    try:
        yield host
    finally:
        reset_host(before)


@dataclass
class TestRun:
    """A finished run: its folder, metrics, manifest, and a predictor on demand."""

    __test__ = False  # not a pytest test class

    output_dir: Path
    metrics: dict[str, Any]
    manifest: dict[str, Any]
    seconds: float
    host: Host = field(repr=False)

    def predict(self, inputs: list[Any]) -> list[dict[str, Any]]:
        """Step 10 on ``inputs``: what ``nlptasks infer --model OUTPUT_DIR`` prints, as dicts."""
        return load_predictor(self.output_dir, host=self.host)(list(inputs))


def run_recipe(
    recipe: str | Path,
    *overrides: str,
    host: Host | None = None,
    folder: str | Path | None = None,
    name: str = "run",
) -> TestRun:
    """Validate and run ``recipe`` with ``--set``-style ``overrides``, writing the run to
    ``<folder>/<task>/<name>`` (``folder``: a new temporary folder when not given); progress bars
    off.  Raises the errors ``nlptasks run`` would print (:class:`nlptasks.plugin.DataError` ...)."""
    host = host or get_host()
    root = Path(folder) if folder is not None else Path(tempfile.mkdtemp(prefix="nlptasks-test-"))
    sets = [*overrides, f"output.dir={root}", f"output.run_name={name}", "output.overwrite=true"]
    loaded = load_recipe(recipe, sets, host=host)
    result: RunResult = run(loaded, host=host, progress=False)
    return TestRun(result.output_dir, result.metrics, result.manifest, result.seconds, host)


def run_cli(*argv: Any, host: Host | None = None) -> tuple[int, str, str]:
    """``nlptasks ARGV...`` in this process (with ``host`` as the plugin host when given):
    ``(exit code, stdout, stderr)``."""
    from nlptasks.cli import main

    out, err = io.StringIO(), io.StringIO()
    scope = using_host(host) if host is not None else contextlib.nullcontext()
    with scope, contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in argv])
    return code, out.getvalue(), err.getvalue()
