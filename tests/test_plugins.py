"""The plugin host: entry points, check_pending, broken plugins, the env allow/block lists."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest

from conftest import RECIPES, ROOT, nlptasks
from nlptasks import NoOptions, PluginError, TaskSpec, hookimpl
from nlptasks.host import Host


def run_cli(*args: str, env: dict[str, str] | None = None, extra_path: str | None = None):
    """The real command in a fresh process, finding plugins through the entry points (what these
    tests are about): without the test session's NLPTASKS_PLUGINS restriction."""
    full_env = {k: v for k, v in os.environ.items() if k != "NLPTASKS_PLUGINS"}
    full_env.update(env or {})
    if extra_path:
        full_env["PYTHONPATH"] = os.pathsep.join(filter(None, [extra_path, full_env.get("PYTHONPATH")]))
    return nlptasks(*args, env=full_env)


def test_builtin_cls_comes_through_the_entry_point_group():
    from importlib.metadata import entry_points

    names = {ep.name: ep.value for ep in entry_points(group="nlptasks")}
    assert names.get("cls") == "nlptasks_plugins.cls"
    host = Host()
    assert host.tasks["cls"].plugin == "cls"
    assert host.dist_of("cls")[0] == "nlptasks"


def test_misspelt_hook_fails_loudly():
    class Typo:
        @hookimpl
        def nlptasks_preproces(self, ctx, data):  # missing an "s"
            return data

    host = Host(load_entrypoints=False)
    with pytest.raises(PluginError) as info:
        host.register(Typo(), name="typo")
    assert "typo" in str(info.value) and "nlptasks_preproces" in str(info.value)
    assert host.pm.get_plugin("typo") is None


def test_two_plugins_cannot_provide_the_same_task():
    class Other:
        @hookimpl
        def register_tasks(self, register):
            register(TaskSpec(name="cls", description="another cls"))

    host = Host()
    with pytest.raises(PluginError, match="task 'cls' is provided by two plugins: 'cls' and 'other'"):
        host.register(Other(), name="other")


def test_other_task_plugins_are_left_out_but_cross_cutting_ones_run():
    calls: list[str] = []

    class OtherTask:
        @hookimpl
        def register_tasks(self, register):
            register(TaskSpec(name="other", description="x", options=NoOptions))

        @hookimpl
        def nlptasks_metrics(self, ctx):
            calls.append("other-task")
            return lambda p: {}

    class Logger:
        @hookimpl(wrapper=True)
        def nlptasks_metrics(self, ctx):
            calls.append("logger")
            return (yield)

    host = Host()
    host.register(OtherTask(), name="other")
    host.register(Logger(), name="logger")
    hooks = host.hooks_for(host.task("cls"))

    class Ctx:
        labels = ["a", "b"]
        options = types.SimpleNamespace(multi_label=False)

    fn = hooks.nlptasks_metrics(ctx=Ctx())
    assert calls == ["logger"]
    assert "accuracy" in fn(_pred())  # the cls plugin's metrics
    host.hooks_for(host.task("other")).nlptasks_metrics(ctx=Ctx())
    assert calls == ["logger", "logger", "other-task"]


def _pred():
    import numpy as np
    from transformers import EvalPrediction

    return EvalPrediction(predictions=np.array([[1.0, 0.0], [0.0, 1.0]]), label_ids=np.array([0, 0]))


def installed(tmp_path: Path, source: str) -> str:
    """A really installed (on PYTHONPATH) distribution ``broken-plugin 0.3`` with ``source`` as its
    plugin module; the site folder to put on the path."""
    site = tmp_path / "site"
    info = site / "broken_plugin-0.3.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-plugin\nVersion: 0.3\n", encoding="utf-8")
    (info / "entry_points.txt").write_text("[nlptasks]\nbroken = broken_plugin\n", encoding="utf-8")
    (site / "broken_plugin.py").write_text(source, encoding="utf-8")
    return str(site)


@pytest.fixture
def broken_dist(tmp_path):
    """A distribution whose plugin module fails to import."""
    return installed(tmp_path, "import not_a_module_anywhere\n")


EXITING = {
    "import": "import sys\nsys.exit('broken-plugin needs a GPU')\n",
    "register": "import sys\nfrom nlptasks.plugin import hookimpl\n\n\n@hookimpl\ndef register_tasks(register):\n"
    "    raise SystemExit(3)\n",
    "bare exit": "raise SystemExit\n",
}


@pytest.mark.parametrize("when", list(EXITING))
def test_a_plugin_that_exits_is_a_failure_not_the_end_of_the_cli(tmp_path, when):
    """``sys.exit()`` in a plugin (at import, or while it registers its tasks) is a SystemExit, not
    an Exception: it used to end every command, ``nlptasks plugins`` included, with its code."""
    site = installed(tmp_path, EXITING[when])
    proc = run_cli("plugins", extra_path=site)
    assert proc.returncode == 0, proc.stderr
    assert "FAILED plugin 'broken'" in proc.stdout and "SystemExit" in proc.stdout, proc.stdout
    assert "task cls" in proc.stdout


def test_broken_plugin_is_reported_and_does_not_break_other_commands(broken_dist):
    proc = run_cli("plugins", extra_path=broken_dist)
    assert proc.returncode == 0, proc.stderr
    assert (
        "FAILED plugin 'broken' (broken_plugin, from broken-plugin 0.3) failed to load: ModuleNotFoundError"
        in proc.stdout
    )
    assert "task cls" in proc.stdout
    proc = run_cli("validate", str(RECIPES / "cls.toml"), extra_path=broken_dist)
    assert proc.returncode == 0 and proc.stdout.startswith("ok:")
    proc = run_cli("plugins", "--json", extra_path=broken_dist)
    failures = json.loads(proc.stdout)["failures"]
    assert failures[0]["dist"] == "broken-plugin 0.3"


def test_a_task_of_a_broken_plugin_names_the_failure(broken_dist, tmp_path):
    recipe = tmp_path / "r.toml"
    recipe.write_text(
        (RECIPES / "cls.toml")
        .read_text(encoding="utf-8")
        .replace('task = "cls"', 'task = "broken"')
        .replace('"data/cls/', f'"{RECIPES}/data/cls/'),
        encoding="utf-8",
    )
    proc = run_cli("validate", str(recipe), extra_path=broken_dist)
    assert proc.returncode == 2
    assert "task: no plugin provides task 'broken'" in proc.stderr


def builtin_plugins() -> list[str]:
    """The built-ins, as pyproject.toml registers them (so a new built-in needs no edit here)."""
    import tomllib

    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return sorted(pyproject["project"]["entry-points"]["nlptasks"])


@pytest.mark.parametrize(
    "env",
    [
        {"NLPTASKS_PLUGINS": ""},
        {"NLPTASKS_PLUGINS": "something-else"},
        {"NLPTASKS_BLOCK_PLUGINS": ",".join(builtin_plugins())},
    ],
)
def test_environment_limits_which_plugins_load(env):
    proc = run_cli("plugins", "--json", env=env)
    assert "cls" not in json.loads(proc.stdout)["tasks"]
    proc = run_cli("validate", str(RECIPES / "cls.toml"), env=env)
    assert proc.returncode == 2 and "no plugin provides task 'cls'; available: none" in proc.stderr


def test_allow_list_keeps_the_named_plugin():
    proc = run_cli("plugins", "--json", env={"NLPTASKS_PLUGINS": "cls"})
    assert "cls" in json.loads(proc.stdout)["tasks"]


def test_trace_logs_hook_calls():
    code = textwrap.dedent(
        """
        from nlptasks.host import Host
        host = Host()
        import types
        class Ctx: labels = ["a", "b"]; options = types.SimpleNamespace(multi_label=False)
        host.hooks_for(host.task("cls")).nlptasks_metrics(ctx=Ctx())
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env={**os.environ, "NLPTASKS_TRACE": "1"}
    )
    assert proc.returncode == 0, proc.stderr
    assert "[trace]" in proc.stderr and "nlptasks_metrics" in proc.stderr


def test_listing_says_each_tasks_best_metric_and_peft_type():
    tasks = json.loads(run_cli("plugins", "--json").stdout)["tasks"]
    assert (
        tasks["cls"]["peft_task_type"] == "SEQ_CLS"
        and tasks["cls"]["best_metric"] == "accuracy (multi-label: f1_macro)"
    )
    assert tasks["ner"]["peft_task_type"] == "TOKEN_CLS"
    assert tasks["sft"]["peft_task_type"] == "CAUSAL_LM"
    assert "FEATURE_EXTRACTION" in tasks["pair"]["peft_task_type"]  # depends on options.mode: its docstring
    text = run_cli("plugins").stdout
    assert "best metric: accuracy (multi-label: f1_macro); peft: SEQ_CLS" in text
