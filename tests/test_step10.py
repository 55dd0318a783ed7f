"""Step 10 as a contract: every load carries its own :class:`nlptasks.LoadOptions` (no process-wide
switch decides how a model is loaded or run), backends come from one table that plugins extend,
and predictors written for the older two-argument hook still work, with a warning."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from conftest import tiny_run
from nlptasks.hookspecs import hookimpl

TEXTS = ["这家酒店服务很好，房间也干净", "太差了，再也不来", "还行吧", "早餐很丰富，位置方便", "房间有异味，隔音差"]


@pytest.fixture(scope="module")
def cls_run(runs) -> Path:
    return tiny_run(runs, "cls.toml", "run", "data.max_train_rows=300")


@pytest.fixture(scope="module")
def onnx_export(cls_run) -> Path:
    pytest.importorskip("onnxruntime")
    from nlptasks.testing import run_cli

    out = cls_run.parent / "exported"
    code, _, err = run_cli("export", cls_run, "--onnx", out, "--check-rows", "0")
    assert code == 0, err
    # These tests hold a torch run and an ONNX folder side by side; the run answering with its
    # recorded export (an auto choice measured by the export) is tests/test_deployments.py's.
    (cls_run / "deployments.json").unlink()
    return out


def answers(predictor, texts=TEXTS) -> list[dict]:
    return predictor(list(texts))


# -- explicit options, no process-wide state -------------------------------------------------------


def test_load_options_are_checked_where_they_are_made():
    from nlptasks import LoadOptions, NlptasksError

    for bad, message in (
        (dict(precision="fp64"), "precision 'fp64'"),
        (dict(batch_size=0), "batch_size 0"),
        (dict(max_length=4), "max_length 4"),
        (dict(device="tpu"), "device 'tpu'"),
        (dict(adapter="a", base_only=True), "not both"),
        (dict(threads=True), "threads True"),
    ):
        with pytest.raises(NlptasksError, match=message):
            LoadOptions(**bad)
    assert LoadOptions().but(backend="onnx").backend == "onnx"
    with pytest.raises(NlptasksError, match="precision"):
        LoadOptions().but(precision="int4")


def bf16_here() -> bool:
    """Whether ``precision="bf16"`` can load on the device ``auto`` picks (a GPU with bf16, or a
    CPU with native bf16)."""
    from nlptasks import LoadOptions, NlptasksError
    from nlptasks.inference.precision import inference_precision

    try:
        inference_precision(LoadOptions(precision="bf16"))
    except NlptasksError:
        return False
    return True


def test_one_run_loaded_twice_with_different_options_answers_as_each_alone(cls_run, onnx_export):
    """torch fp32 and the ONNX export, and (where the device has it) bf16, in one process, in
    either order: each predictor answers exactly as it does when it is the only one loaded."""
    import nlptasks

    alone = {"torch": answers(nlptasks.load(cls_run, precision="fp32")), "onnx": answers(nlptasks.load(onnx_export))}
    if bf16_here():
        alone["bf16"] = answers(nlptasks.load(cls_run, precision="bf16"))
    loaded = {"onnx": nlptasks.load(onnx_export), "torch": nlptasks.load(cls_run, precision="fp32")}
    if "bf16" in alone:
        loaded["bf16"] = nlptasks.load(cls_run, precision="bf16")
    for name, predictor in reversed(list(loaded.items())):
        assert answers(predictor) == alone[name], name
    assert type(loaded["onnx"].model).__name__ == "OnnxModel"
    assert type(nlptasks.load(cls_run).model).__name__ != "OnnxModel"  # auto: torch for the torch run again
    if "bf16" in alone:
        import torch

        assert loaded["bf16"].model.dtype == torch.bfloat16 and loaded["torch"].model.dtype == torch.float32
        assert nlptasks.load(cls_run, precision="fp32").model.dtype == torch.float32  # the bf16 load left nothing


def test_the_cli_leaves_no_setting_behind(cls_run):
    """`nlptasks infer --precision/--backend` in a process decides that call only (it used to leave
    the precision changed for every later load)."""
    import nlptasks
    from nlptasks.testing import run_cli

    before = answers(nlptasks.load(cls_run))
    flags = ["--precision", "bf16"] if bf16_here() else ["--precision", "fp32"]
    code, _, err = run_cli("infer", "--model", cls_run, *flags, "--backend", "torch", TEXTS[0])
    assert code == 0, err
    assert answers(nlptasks.load(cls_run)) == before


def test_options_reach_the_predictor(cls_run):
    import nlptasks

    predictor = nlptasks.load(cls_run, batch_size=3, max_length=16)
    assert (predictor.batch_size, predictor.max_length) == (3, 16)
    assert nlptasks.load(cls_run).batch_size == 32  # the predictor's own default again
    with pytest.raises(nlptasks.NlptasksError, match="positions for"):
        nlptasks.load(cls_run, max_length=100_000)


def test_a_server_holds_a_torch_run_and_an_onnx_export_at_once(cls_run, onnx_export):
    """`nlptasks serve RUN EXPORT`: each folder through its own backend (auto), in one process."""
    import nlptasks
    from nlptasks.serve.models import load_models

    models = load_models([cls_run, onnx_export], ["t", "o"])
    assert type(models["o"].predictor.model).__name__ == "OnnxModel"
    assert type(models["t"].predictor.model).__name__ != "OnnxModel"
    assert answers(models["t"].predictor) == answers(nlptasks.load(cls_run))
    assert answers(models["o"].predictor) == answers(nlptasks.load(onnx_export))


def test_a_backend_that_cannot_load_a_folder_says_what_to_use(cls_run, onnx_export):
    import nlptasks

    with pytest.raises(
        nlptasks.NlptasksError, match="is an export of the onnx backend; it holds no torch weights"
    ) as caught:
        nlptasks.load(onnx_export, backend="torch")
    assert "nlptasks infer --model" in caught.value.hint
    with pytest.raises(nlptasks.NlptasksError, match="has no model.onnx"):
        nlptasks.load(cls_run, backend="onnx")
    with pytest.raises(
        nlptasks.NlptasksError, match=r"no such backend \(did you mean 'onnx'\?\); backends: auto, torch, onnx"
    ):
        nlptasks.load(cls_run, backend="onx")
    with pytest.raises(nlptasks.NlptasksError, match="bf16 applies to the torch backend"):
        nlptasks.load(onnx_export, precision="bf16")


# -- a backend from a plugin -------------------------------------------------------------------------


class Float64Backend:
    """A third-party backend: the run's torch weights in float64, through the public API alone."""

    def __init__(self) -> None:
        self.loads: list[str] = []

    @hookimpl
    def register_backends(self, register):
        from nlptasks.plugin import Backend, load_trained_model

        def load(run_dir, manifest, auto_class, options):
            self.loads.append(options.backend)
            # fp32 on the CPU first: auto would round the weights to bf16 on a GPU before widening them
            fp32 = options.but(backend="torch", precision="fp32", device="cpu")
            return load_trained_model(run_dir, manifest, auto_class, fp32).double()

        def refuses(run_dir, manifest, options):
            return "float64 runs on the CPU only" if options.device.startswith("cuda") else None

        register(Backend(name="fp64", description="torch weights in float64", load_model=load, refuses=refuses))


def test_a_plugin_adds_a_backend_that_infer_load_and_serve_use(cls_run, capsys):
    import torch

    from nlptasks.testing import plugin_host, run_cli, using_host

    backend = Float64Backend()
    host = plugin_host(builtins=True)
    host.register(backend, name="fp64-backend")
    assert host.backends["fp64"].plugin == "fp64-backend"
    with using_host(host):
        import nlptasks
        from nlptasks.serve.models import load_models

        wide = nlptasks.load(cls_run, backend="fp64")
        assert wide.model.dtype == torch.float64 and backend.loads == ["fp64"]
        plain = answers(nlptasks.load(cls_run, precision="fp32", device="cpu"))  # where fp64 runs too
        assert [r["label"] for r in answers(wide)] == [r["label"] for r in plain]
        assert max(abs(a["score"] - b["score"]) for a, b in zip(answers(wide), plain, strict=True)) < 1e-5
        code, out, err = run_cli("infer", "--model", cls_run, "--backend", "fp64", TEXTS[0], host=host)
        assert code == 0, err
        assert json.loads(out)["label"] == plain[0]["label"]
        served = load_models([cls_run], ["wide"], nlptasks.LoadOptions(backend="fp64"))
        assert served["wide"].predictor.model.dtype == torch.float64
        code, out, _ = run_cli("plugins", "--json", host=host)
        listed = {p["name"]: p for p in json.loads(out)["plugins"]}
        assert listed["fp64-backend"]["backends"] == ["fp64"]
    with pytest.raises(nlptasks.NlptasksError, match="--backend fp64: no such backend"):
        nlptasks.load(cls_run, backend="fp64")  # the process's own host has no such plugin


def test_two_plugins_cannot_register_one_backend_name():
    from nlptasks.errors import PluginError
    from nlptasks.testing import plugin_host

    class A:
        @hookimpl
        def register_backends(self, register):
            from nlptasks.plugin import Backend

            register(Backend(name="same", description="a", load_model=lambda *a: None))

    host = plugin_host()
    host.register(A(), name="a")
    with pytest.raises(PluginError, match="backend 'same' is provided by two plugins: 'a' and 'b'"):
        host.register(A(), name="b")
    from nlptasks.types import Backend

    with pytest.raises(PluginError, match="not 'auto'"):
        Backend(name="auto", description="x", load_model=lambda *a: None)


# -- the older hook form -----------------------------------------------------------------------------


class OldStyle:
    """A predictor plugin written for ``nlptasks_load_predictor(run_dir, manifest)``."""

    @staticmethod
    def hook(run_dir, manifest):
        from nlptasks.plugin import load_run, predict_logits, softmax

        class Predictor:
            def __init__(self):
                self.tokenizer, self.model = load_run(run_dir, manifest, "AutoModelForSequenceClassification")
                self.batch_size, self.max_length = 32, None

            def __call__(self, inputs):
                probs = softmax(predict_logits(self.model, self.tokenizer, inputs, self.batch_size, self.max_length))
                return [{"p": [round(float(x), 6) for x in p]} for p in probs]

        return Predictor()


def test_an_old_two_argument_predictor_hook_works_with_a_warning(cls_run):
    import torch

    from nlptasks import LoadOptions
    from nlptasks.inference.loading import load_predictor
    from nlptasks.testing import plugin_host

    plugin = type("Old", (), {"nlptasks_load_predictor": staticmethod(hookimpl(tryfirst=True)(OldStyle.hook))})
    host = plugin_host(builtins=True)
    host.register(plugin, name="old-style")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        predictor = load_predictor(cls_run, LoadOptions(batch_size=4, precision="fp32"), host=host)
    assert any(issubclass(w.category, DeprecationWarning) and "old-style" in str(w.message) for w in caught)
    assert predictor.batch_size == 4  # set as an attribute for the old form
    assert predictor.model.dtype == torch.float32
    assert len(predictor(TEXTS)[0]["p"]) == 2


def _old_plugin():
    return type("Old", (), {"nlptasks_load_predictor": staticmethod(hookimpl(tryfirst=True)(OldStyle.hook))})


def test_an_old_form_hook_is_said_once_on_stderr_in_a_fresh_process_and_marked_by_plugins(tmp_path):
    """Python's default filters hide a DeprecationWarning raised in a library: the line on stderr is
    what a user of the command line sees, once per process however often the plugin registers."""
    import subprocess
    import sys

    script = tmp_path / "old.py"
    script.write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
        "from test_step10 import _old_plugin\n"
        "from nlptasks.testing import plugin_host\n"
        "from nlptasks.host import reset_host\n"
        "from nlptasks.cli import main\n"
        "for _ in range(2):\n"
        "    host = plugin_host(builtins=True)\n"
        "    host.register(_old_plugin(), name='old-form')\n"
        "reset_host(host)\n"
        "sys.exit(main(['plugins']))\n",
        encoding="utf-8",
    )
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    line = (
        "nlptasks: deprecated: plugin 'old-form' implements nlptasks_load_predictor without its argument(s) "
        "options: add options to its signature (docs/hooks.md#nlptasks-load-predictor); the old form stops "
        "working in nlptasks 0.3.0"
    )
    said = [x for x in done.stderr.splitlines() if x.startswith("nlptasks: deprecated:")]
    assert said == [line], done.stderr  # (Python itself shows the warning too here: raised in __main__)
    listing = done.stdout.split("old-form  (", 1)[1]
    assert "OLD FORM nlptasks_load_predictor: deprecated, stops working in nlptasks 0.3.0" in listing
    current = done.stdout.split("old-form  (", 1)[0]
    assert "OLD FORM" not in current  # our own plugins take the current forms


def test_quiet_deprecations_keep_stderr_clean_but_still_raise_the_warning(monkeypatch, capsys):
    from nlptasks.deprecations import deprecated

    monkeypatch.setenv("NLPTASKS_DEPRECATIONS", "quiet")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        deprecated("test:quiet", "a thing", "do the other thing")
    assert capsys.readouterr().err == ""
    assert [str(w.message) for w in caught] == [
        "nlptasks: deprecated: a thing: do the other thing; the old form stops working in nlptasks 0.3.0"
    ]
