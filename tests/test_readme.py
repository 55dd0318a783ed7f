"""The README's plugin example is real code: register it and run it on a tiny regression task."""

from __future__ import annotations

import re

from conftest import RECIPES, ROOT, TINY, write_csv
from nlptasks.pipeline import load_predictor, run
from nlptasks.testing import plugin_host
from nlptasks.pipeline import load_recipe


def readme_block(marker: str) -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    for block in re.findall(r"```python\n(.*?)```", text, flags=re.S):
        if block.startswith(marker):
            return block
    raise AssertionError(f"no python block starting with {marker!r} in README.md")


def test_readme_plugin_runs(tmp_path, monkeypatch):
    source = readme_block("# my_regression.py")
    assert len(source.strip().splitlines()) <= 45
    (tmp_path / "my_regression.py").write_text(source, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    import my_regression

    host = plugin_host(textreg=my_regression)
    assert host.task("textreg").plugin == "textreg"

    rows = [("很好" * n, str(n)) for n in range(1, 11)] * 6
    train = write_csv(tmp_path / "train.csv", rows, header="text,score")
    loaded = load_recipe(
        RECIPES / "cls.toml",
        ["task=textreg", f"data.train={train}", "data.validation=''", "data.test=''", "options={}",
         *TINY, "train.epochs=2", f"output.dir={tmp_path / 'runs'}", "output.run_name=r"],
        host=host,
    )
    result = run(loaded, host=host, progress=False)
    assert result.metrics["validation"]["loss"] >= 0
    assert (result.output_dir / "COMPLETE").exists()
    out = load_predictor(result.output_dir, host=host)(["很好", "很好很好很好很好很好很好"])
    assert [set(r) for r in out] == [{"text", "score"}] * 2
    assert all(isinstance(r["score"], float) for r in out)
