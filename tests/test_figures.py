"""Every shipped recipe keeps its published figure (docs/figures.toml, tools/figures.py).

The default suite checks that the table accounts for every shipped recipe (measured here, or the
reason it cannot be) and that its rows make sense; the figures tier (``pytest --figures -m figures``,
run by .ci/run) trains each measured recipe once, at its check seed, pinned to one thread, and fails
when its figure leaves the tolerance recorded for it (three seed-to-seed standard deviations, at least
a point).  A change meant to move a figure re-records it: ``python tools/figures.py record RECIPE``.
"""

from __future__ import annotations

import sys

import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "tools"))
import figures  # noqa: E402

TABLE = figures.load_table()
MEASURED = sorted(r for r, f in TABLE.items() if not f.skip)


def test_every_shipped_recipe_is_measured_or_says_why_not():
    missing = [r for r in figures.shipped() if r not in TABLE]
    assert missing == [], (
        f"not in docs/figures.toml: {missing}; run: python tools/figures.py record {' '.join(missing)}"
    )
    gone = [r for r in TABLE if r not in figures.shipped()]
    assert gone == [], f"docs/figures.toml names recipes that are not shipped: {gone}"
    for recipe in figures.shipped():
        reason = figures.why_not_here(recipe)
        if TABLE[recipe].skip:  # skipped only for a reason that holds on this machine
            assert reason, f"{recipe} is skipped ({TABLE[recipe].skip}) but could run here: record it"
    assert {"recipes/cls.toml", "recipes/ner.toml", "recipes/pair.toml", "recipes/sft.toml"} <= set(MEASURED)


@pytest.mark.parametrize("recipe", MEASURED)
def test_a_recorded_figure_is_the_tasks_main_metric_over_several_seeds(recipe):
    f = TABLE[recipe]
    assert len(f.values) >= 3 and set(f.check_seeds) <= set(f.values)
    assert f.check_seeds == figures.check_seeds_for(f.values)
    metric, greater = figures.main_metric(recipe)
    assert (f.metric, f.greater_is_better) == (metric, greater), "the task's best metric changed: re-record"
    assert 0 < f.tolerance <= 0.1 or "loss" in f.metric, f"{recipe}: a tolerance of {f.tolerance} guards nothing"


@pytest.fixture(scope="module")
def checked(tmp_path_factory):
    """Every measured recipe trained at its check seeds, as many runs at once as there are cores (each
    pinned to one thread, so the figure does not depend on what runs beside it)."""
    return figures.check(MEASURED, tmp_path_factory.mktemp("figures"), TABLE)


@pytest.mark.figures
@pytest.mark.parametrize("recipe", MEASURED)
def test_the_recipe_still_reaches_its_figure(recipe, checked):
    f = TABLE[recipe]
    result = checked[recipe]
    if isinstance(result, BaseException):
        raise result
    value, _ = result
    gap = value - f.check_value
    seeds = ", ".join(map(str, f.check_seeds))
    assert abs(gap) <= f.tolerance, (
        f"{recipe}: {f.metric} {value:.4f} (mean over seeds {seeds}) is {abs(gap):.4f} "
        f"{'above' if gap > 0 else 'below'} its recorded {f.check_value:.4f} (tolerance {f.tolerance}: 3 sd of that "
        f"mean, from seeds {', '.join(map(str, f.values))}); if the change is meant to move it, re-measure: "
        f"python tools/figures.py record {recipe} && python tools/gen_docs.py"
    )
