"""The README's plugin example is real code: register it and run it on a tiny regression task."""

from __future__ import annotations

import re

from conftest import RECIPES, ROOT, TINY, write_csv
from nlptasks.pipeline import load_predictor, load_recipe, run
from nlptasks.testing import plugin_host


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
    common = [
        "task=textreg",
        f"data.train={train}",
        "data.validation=''",
        "data.test=''",
        "options={}",
        *TINY,
        "train.learning_rate=3e-3",
        "train.batch_size=8",
        f"output.dir={tmp_path / 'runs'}",
    ]
    loaded = load_recipe(RECIPES / "cls.toml", [*common, "train.epochs=80", "output.run_name=r"], host=host)
    result = run(loaded, host=host, progress=False)
    # Measured 2026-11-25: validation MSE 0.004 (predicting the mean scores 8.25); predictions
    # 1.1, 2.0, 3.1 ... 9.4 for 1 to 10 repetitions.  The plugin learns what it should.
    assert result.metrics["validation"]["loss"] < 0.5
    texts = ["很好" * n for n in (1, 4, 7, 10)]
    out = load_predictor(result.output_dir, host=host)(texts)
    assert [r["text"] for r in out] == texts and all(isinstance(r["score"], float) for r in out)
    scores = [r["score"] for r in out]
    assert scores == sorted(scores) and scores[-1] - scores[0] > 5
    # [peft] works too: the predictor loads the adapter on its base through load_run
    loaded = load_recipe(
        RECIPES / "cls.toml",
        [*common, "train.max_steps=2", "peft.method=lora", "peft.r=4", "output.run_name=lora"],
        host=host,
    )
    adapter_run = run(loaded, host=host, progress=False).output_dir
    assert (adapter_run / "adapter_config.json").exists()
    assert len(load_predictor(adapter_run, host=host)([{"text": "很好"}])) == 1  # a file row, by its column
