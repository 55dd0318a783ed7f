"""Run reports: the model card (``README.md``), training curves, resource figures, ``compare``.

After step 9 the runner writes, into the run directory:

``README.md``            the model card: task, base model, data and row counts, metrics, the task's
                         own sections (``nlptasks_report`` hook: a confusion matrix, a per-type
                         table...), the resolved recipe and how to load the run (nlptasks, plain
                         transformers/peft), with the exact code.
``training_curves.png``  training loss, validation loss and the best-checkpoint metric by step
                         (matplotlib, Agg backend, imported only here).
``log_history.json``     the Trainer's log entries the curves are drawn from.

Nothing here names a task: what is task-specific comes from the ``nlptasks_report`` hook.
"""

from __future__ import annotations

import json
import logging
import resource
import shlex
import sys
from pathlib import Path
from typing import Any

from nlptasks.types import Usage

__all__ = [
    "CARD",
    "CURVES",
    "LOG_HISTORY",
    "classification_sections",
    "compare",
    "how_to_load",
    "infer_command",
    "markdown_metrics",
    "model_card",
    "peak_memory",
    "per_class_table",
    "tokenizer_settings",
    "write_confusion_matrix",
    "write_curves",
]

log = logging.getLogger("nlptasks")

CARD = "README.md"
CURVES = "training_curves.png"
LOG_HISTORY = "log_history.json"
_RATE_KEYS = {"runtime", "samples_per_second", "steps_per_second", "epoch", "best_step", "total_flos"}


def peak_memory() -> dict[str, float]:
    """Peak resident memory of this process (MiB), and the CUDA peak allocated when a GPU was used."""
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
    out = {"peak_rss_mb": round(rss / (1024 * 1024 if sys.platform == "darwin" else 1024), 1)}
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        out["cuda_max_allocated_mb"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
    return out


def tokenizer_settings(tokenizer: Any) -> dict[str, Any] | None:
    """What inference must match: class, vocabulary size, padding/truncation sides, special tokens."""
    if tokenizer is None:
        return None
    specials = {name: getattr(tokenizer, name, None) for name in
                ("pad_token", "unk_token", "cls_token", "sep_token", "bos_token", "eos_token", "mask_token")}
    return {
        "class": type(tokenizer).__name__,
        "vocab_size": len(tokenizer),
        "padding_side": getattr(tokenizer, "padding_side", None),
        "truncation_side": getattr(tokenizer, "truncation_side", None),
        "special_tokens": {k: v for k, v in specials.items() if v is not None},
        "chat_template": bool(getattr(tokenizer, "chat_template", None)),
    }


# --- curves ----------------------------------------------------------------------------------------


def write_curves(history: list[dict[str, Any]], path: Path, metric: str) -> bool:
    """Training loss, validation loss and validation ``metric`` by step as a PNG; ``False`` (with a
    log line) when there is nothing to draw or matplotlib is not installed."""
    end = next((i for i, h in enumerate(history) if "train_runtime" in h), len(history))
    history = history[:end]  # what was logged during training, not the evaluations after it
    train = [(h["step"], h["loss"]) for h in history if "loss" in h and "step" in h]
    evals = [(h["step"], h["eval_loss"]) for h in history if "eval_loss" in h and "step" in h]
    scores = [(h["step"], h[f"eval_{metric}"]) for h in history
              if isinstance(h.get(f"eval_{metric}"), (int, float)) and "step" in h and metric != "loss"]
    if not (train or evals or scores):
        return False
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log.warning("matplotlib is not installed: no %s (pip install matplotlib)", path.name)
        return False
    panels = 2 if scores else 1
    fig, axes = plt.subplots(1, panels, figsize=(5.5 * panels, 3.6), squeeze=False)
    ax = axes[0][0]
    if train:
        ax.plot(*zip(*train, strict=True), label="training loss", linewidth=1.2)
    if evals:
        ax.plot(*zip(*evals, strict=True), marker="o", label="validation loss")
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.legend()
    ax.grid(alpha=0.3)
    if scores:
        ax = axes[0][1]
        ax.plot(*zip(*scores, strict=True), marker="o", color="tab:green")
        ax.set_xlabel("step")
        ax.set_ylabel(f"validation {metric}")
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def write_confusion_matrix(
    labels: list[str], references: Any, predictions: Any, path: Path, title: str
) -> list[str] | None:
    """A confusion-matrix PNG (rows: true class, columns: predicted) with counts in the cells; for
    tasks with classes to call from their ``nlptasks_report``.  Returns the names on the axes:
    the labels, or ``#0``, ``#1``... when they need a font (CJK) that is not installed; ``None``
    (nothing written) without matplotlib."""
    import numpy as np

    n = len(labels)
    matrix = np.zeros((n, n), dtype=int)
    for ref, pred in zip(references, predictions, strict=True):
        if 0 <= int(ref) < n:
            matrix[int(ref), int(pred)] += 1
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib import font_manager
    except ImportError:
        log.warning("matplotlib is not installed: no %s (pip install matplotlib)", path.name)
        return None
    names = labels if _cjk_font(font_manager, labels) else [f"#{i}" for i in range(n)]
    size = max(3.5, 0.6 * n + 2)
    fig, ax = plt.subplots(figsize=(size + 1, size))
    image = ax.imshow(matrix, cmap="Blues")
    ax.set_xticks(range(n), labels=names, rotation=45 if n > 4 else 0, ha="right" if n > 4 else "center")
    ax.set_yticks(range(n), labels=names)
    ax.set_xlabel("predicted")
    ax.set_ylabel("true")
    ax.set_title(title)
    limit = matrix.max() / 2 if matrix.size else 0
    for i in range(n):
        for j in range(n):
            ax.text(j, i, str(matrix[i, j]), ha="center", va="center",
                    color="white" if matrix[i, j] > limit else "black", fontsize=9)
    fig.colorbar(image, ax=ax, fraction=0.046)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return names


def classification_sections(ctx: Any, trainer: Any, data: Any, metrics: dict[str, Any]) -> list[str]:
    """Card sections for a model with one class per example (``ctx.labels``, logits over them):
    the per-class table of the test split (else validation) and ``confusion_matrix.png``, from
    ``trainer.predict`` on that split.  For a task's ``nlptasks_report``."""
    split = next((s for s in ("test", "validation") if s in data and len(data[s])), None)
    if split is None or not ctx.labels:
        return []
    sections = []
    per_class = {k: v for k, v in (metrics.get(split) or {}).items() if "/" in k}
    if per_class:
        sections.append(f"## Per class ({split})\n\n" + per_class_table(per_class))
    output = getattr(ctx, "evaluations", {}).get(split)  # the split's last evaluation, when step 6 kept it
    if output is None or len(output.label_ids) != len(data[split]):
        compute_metrics, trainer.compute_metrics = trainer.compute_metrics, None  # predictions only: the metrics are known
        try:
            output = trainer.predict(data[split], metric_key_prefix=split)
        finally:
            trainer.compute_metrics = compute_metrics
    logits = output.predictions[0] if isinstance(output.predictions, tuple) else output.predictions
    name = "confusion_matrix.png"
    names = write_confusion_matrix(ctx.labels, output.label_ids, logits.argmax(-1), ctx.output_dir / name,
                                   f"{ctx.task.name}: {split} ({len(data[split])} rows)")
    if names is not None:
        key = "" if names == ctx.labels else " Classes: " + ", ".join(
            f"{n} = `{label}`" for n, label in zip(names, ctx.labels, strict=True)) + "."
        sections.append(f"## Confusion matrix ({split})\n\nRows: true class; columns: predicted.{key}\n\n"
                        f"![confusion matrix]({name})")
    return sections


def _cjk_font(font_manager: Any, labels: list[str]) -> bool:
    """Whether the labels can be drawn: no CJK characters, or an installed CJK font (now in use)."""
    if all(ord(c) < 0x2E80 for label in labels for c in label):
        return True
    import matplotlib

    for font in font_manager.fontManager.ttflist:
        if any(key in font.name for key in ("CJK", "Hei", "Song", "Kai", "WenQuanYi", "Noto Sans SC")):
            matplotlib.rcParams["font.family"] = font.name
            return True
    return False


# --- the model card ----------------------------------------------------------------------------------


def markdown_metrics(metrics: dict[str, Any]) -> str:
    """Overall metrics (no per-class keys, no timings) as a Markdown table, one column per split."""
    splits = [s for s in ("validation", "test") if isinstance(metrics.get(s), dict)]
    keys: list[str] = []
    for s in splits:
        keys += [k for k, v in metrics[s].items() if "/" not in k and k not in _RATE_KEYS and k not in keys
                 and isinstance(v, (int, float))]
    if not splits or not keys:
        return "_No evaluation split: only the training loss is known._"
    lines = ["| metric | " + " | ".join(splits) + " |", "|---|" + "---:|" * len(splits)]
    for k in keys:
        cells = [_num(metrics[s].get(k)) for s in splits]
        lines.append(f"| {k} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def per_class_table(values: dict[str, Any], title: str = "class") -> str:
    """``{"f1/PER": .., "support/PER": ..}`` → a Markdown table with a row per class (a task's
    ``nlptasks_report`` uses it for per-class or per-entity-type figures)."""
    names: list[str] = []
    classes: list[str] = []
    for key in values:
        if "/" in key:
            name, cls = key.split("/", 1)
            names += [name] if name not in names else []
            classes += [cls] if cls not in classes else []
    lines = [f"| {title} | " + " | ".join(names) + " |", "|---|" + "---:|" * len(names)]
    for cls in classes:
        cells = []
        for name in names:
            v = values.get(f"{name}/{cls}")
            cells.append(f"{v:.0f}" if name == "support" and v is not None else _num(v))
        lines.append(f"| {cls} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _num(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return "-" if value is None else str(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return f"{value:.4f}"
    return str(value)


def model_card(
    run_dir: Path, manifest: dict[str, Any], metrics: dict[str, Any], recipe_text: str, description: str | None,
    sections: list[str], curves: bool, usage: Usage | None = None,
) -> str:
    """The Markdown of ``README.md`` for a run (see the module docstring); ``usage`` is the task's
    word on how to call the run and what its labels row says (default: one text, the labels)."""
    usage = usage or Usage()
    task = manifest["task"]
    name = run_dir.name
    train = metrics.get("train") or {}
    resources = metrics.get("resources") or {}
    lines = [f"# {task} run `{name}`", ""]
    if description:
        lines += [description, ""]
    plugin = next((p for p in manifest.get("plugins", []) if p.get("name") == manifest.get("plugin")), {})
    peft = manifest.get("peft")
    facts = [
        ("task", f"`{task}` (plugin `{manifest.get('plugin')}` {plugin.get('version') or ''})".rstrip()),
        ("base model", f"`{manifest.get('base_model')}`"),
        ("model class", f"`{manifest.get('model_class', '?')}`"),
        ("training", "adapter: " + f"{peft['method']} ({peft['trainable_parameters']:,} of "
                     f"{peft['total_parameters']:,} parameters trained)" if peft else "all weights"),
        ("labels", usage.labels if usage.labels is not None
         else ", ".join(f"`{x}`" for x in manifest["labels"]) if manifest.get("labels") else "-"),
        ("max length", f"{manifest.get('max_length')} tokens"),
        ("precision", manifest.get("precision", "-")),
        ("wall time", f"{metrics.get('seconds', 0):.0f} s"
                      + (f"; training {train['samples_per_second']:.1f} samples/s" if "samples_per_second" in train else "")
                      + (f", {train['tokens_per_second']:.0f} tokens/s" if "tokens_per_second" in train else "")
                      + (f", MFU {train['mfu']:.1%} (estimate)" if "mfu" in train else "")),
        ("peak memory", f"{resources['peak_rss_mb']:.0f} MiB RSS" if "peak_rss_mb" in resources else "-"),
        ("created", manifest.get("created", "-")),
        ("recipe sha256", f"`{manifest.get('recipe_sha256', '-')}`"),
    ]
    if "cuda_max_allocated_mb" in resources:
        facts.insert(9, ("GPU memory", f"{resources['cuda_max_allocated_mb']:.0f} MiB max allocated"))
    lines += ["| | |", "|---|---|", *[f"| {k} | {v} |" for k, v in facts], ""]

    data = manifest.get("data") or {}
    lines += ["## Data", "", "| split | source | rows | examples after preprocessing |", "|---|---|---:|---:|"]
    for split in ("train", "validation", "test"):
        if split in (data.get("rows") or {}):
            dropped = sum((metrics.get("dropped") or {}).get(split, {}).values())
            rows = f"{data['rows'][split]:,}" + (f" ({dropped} dropped)" if dropped else "")
            examples = (data.get("examples") or {}).get(split)
            lines.append(f"| {split} | `{(data.get('sources') or {}).get(split, '-')}` | {rows} | "
                         f"{'-' if examples is None else format(examples, ',')} |")
    lines += ["", "## Metrics", "", markdown_metrics(metrics), ""]
    if curves:
        lines += ["## Training curves", "", f"![training curves]({CURVES})", ""]
    for section in sections:
        lines += [section.rstrip(), ""]
    lines += ["## Recipe", "", "The resolved recipe (every default filled in), also in `recipe.toml`:", "",
              "```toml", recipe_text.rstrip(), "```", ""]
    lines += how_to_load(manifest, str(run_dir), usage)
    return "\n".join(lines).rstrip() + "\n"


def infer_command(run_dir: str, usage: Usage) -> str:
    """``nlptasks infer --model RUN_DIR "…" "…"`` with the task's example, quoted for a shell."""
    return f"nlptasks infer --model {shlex.quote(run_dir)} " + " ".join(_shell_quote(x) for x in usage.example)


def _shell_quote(text: str) -> str:
    """Double quotes where a shell leaves them alone (most texts), else ``shlex.quote``."""
    return f'"{text}"' if not any(c in text for c in '"$`\\!') else shlex.quote(text)


def how_to_load(manifest: dict[str, Any], run_dir: str, usage: Usage | None = None) -> list[str]:
    """The "How to load it" section: nlptasks, then plain transformers (and peft for adapter runs),
    with this run's folder and the task's example input in the code."""
    usage = usage or Usage()
    lines = [line.replace("RUN_DIR", run_dir) for line in _loading(manifest, usage)]
    return lines


def _loading(manifest: dict[str, Any], usage: Usage) -> list[str]:
    cls = manifest.get("model_class", "AutoModel")
    example = json.dumps(list(usage.example), ensure_ascii=False)
    per_input = "one dict per input" if len(usage.example) == 1 else f"{len(usage.example)} strings make one input"
    lines = [
        "## How to load it", "",
        "With nlptasks (the same predictions as `nlptasks infer --model RUN_DIR`):", "",
        "```python", "import nlptasks", "", 'predict = nlptasks.load("RUN_DIR")  # this folder',
        f"print(predict({example}))  # {per_input}", "```", "",
        "```bash", infer_command("RUN_DIR", usage), "nlptasks infer --model RUN_DIR --file inputs.jsonl --output out.jsonl",
        "```", "",
    ]
    peft = manifest.get("peft")
    if not peft:
        lines += [
            "With plain transformers (no nlptasks needed):", "",
            "```python", f"from transformers import AutoTokenizer, {cls}", "",
            'tokenizer = AutoTokenizer.from_pretrained("RUN_DIR")',
            f'model = {cls}.from_pretrained("RUN_DIR").eval()', "```",
        ]
        return lines
    base = peft.get("base", {})
    if base.get("kind") == "scratch":
        load_base = [f'base = {cls}.from_pretrained("RUN_DIR/{base.get("path", "base")}")']
    else:
        load_base = [f'config = AutoConfig.from_pretrained("RUN_DIR/{base.get("config", "base")}")  # the head settings',
                     f'base = {cls}.from_pretrained("{base.get("name_or_path")}", config=config)']
    lines += [
        "With plain transformers and peft (the adapter on its frozen base):", "",
        "```python", "from peft import PeftModel", f"from transformers import AutoConfig, AutoTokenizer, {cls}", "",
        'tokenizer = AutoTokenizer.from_pretrained("RUN_DIR")', *load_base,
        'model = PeftModel.from_pretrained(base, "RUN_DIR").eval()', "```", "",
        "A LoRA or IA3 adapter merges into a full model with `nlptasks export RUN_DIR --merge OUT`.",
    ]
    return lines


# --- nlptasks compare ------------------------------------------------------------------------------


def compare(run_dirs: list[Path]) -> str:
    """One Markdown table of complete runs side by side: each split's metrics, wall time, training
    samples/s, peak memory, then the recipe keys whose values differ between the runs."""
    import tomllib

    from nlptasks.engine.rundir import COMPLETE, MANIFEST
    from nlptasks.errors import NlptasksError

    problems = []
    for path in run_dirs:
        if not path.is_dir():
            problems.append(f"{path}: no such folder")
        elif not (path / COMPLETE).exists():
            problems.append(f"{path}: not a complete run (no {COMPLETE} marker: still training, or it failed)")
    if problems:
        from nlptasks.errors import Problem

        raise NlptasksError(f"cannot compare {len(problems)} of the {len(run_dirs)} runs",
                            [Problem("", p) for p in problems],
                            hint="Compare finished runs: folders made by `nlptasks run` that hold a COMPLETE file.")
    names = _short_names(run_dirs)
    metrics, manifests, recipes = [], [], []
    for path in run_dirs:
        metrics.append(json.loads((path / "metrics.json").read_text(encoding="utf-8")))
        manifests.append(json.loads((path / MANIFEST).read_text(encoding="utf-8")))
        recipes.append(_flatten(tomllib.loads((path / "recipe.toml").read_text(encoding="utf-8"))))

    header = "| | " + " | ".join(f"`{n}`" for n in names) + " |"
    lines = [header, "|---|" + "---:|" * len(names)]
    lines.append("| task | " + " | ".join(f"`{m.get('task')}`" for m in manifests) + " |")
    rows: list[str] = []
    for split in ("validation", "test"):
        for m in metrics:
            for k, v in (m.get(split) or {}).items():
                key = f"{split} {k}"
                if "/" not in k and k not in _RATE_KEYS and isinstance(v, (int, float)) and key not in rows:
                    rows.append(key)
    for key in rows:
        split, k = key.split(" ", 1)
        lines.append(f"| {key} | " + " | ".join(_num((m.get(split) or {}).get(k)) for m in metrics) + " |")
    evals = [_evaluations(path) for path in run_dirs]  # nlptasks eval results, beside the run's own
    for data_name in sorted({name for e in evals for name in e}):
        keys: list[str] = []
        for e in evals:
            keys += [k for k, v in (e.get(data_name) or {}).items() if "/" not in k and k not in _RATE_KEYS
                     and isinstance(v, (int, float)) and k not in keys]
        for k in keys:
            lines.append(f"| eval `{data_name}` {k} | " + " | ".join(_num((e.get(data_name) or {}).get(k)) for e in evals)
                         + " |")
    lines.append("| wall time (s) | " + " | ".join(_one(m.get("seconds")) for m in metrics) + " |")
    lines.append("| train samples/s | " + " | ".join(
        _one((m.get("train") or {}).get("samples_per_second")) for m in metrics) + " |")
    for label, key, digits in (("train tokens/s", "tokens_per_second", 0), ("padding fraction", "padding_fraction", 3),
                               ("MFU (estimate)", "mfu", 4)):
        lines.append(f"| {label} | " + " | ".join(_one((m.get("train") or {}).get(key), digits) for m in metrics) + " |")
    lines.append("| peak RSS (MiB) | " + " | ".join(
        _one((m.get("resources") or {}).get("peak_rss_mb"), 0) for m in metrics) + " |")
    if any("cuda_max_allocated_mb" in (m.get("resources") or {}) for m in metrics):
        lines.append("| CUDA max allocated (MiB) | " + " | ".join(
            _one((m.get("resources") or {}).get("cuda_max_allocated_mb"), 0) for m in metrics) + " |")
    ignore = {"output.run_name", "output.dir", "output.overwrite"}
    keys = sorted({k for r in recipes for k in r} - ignore)
    differ = [k for k in keys if len({json.dumps(r.get(k), sort_keys=True) for r in recipes}) > 1]
    if differ:
        lines += ["", "Recipe differences:", "", header, "|---|" + "---|" * len(names)]
        for k in differ:
            lines.append(f"| `{k}` | " + " | ".join(_recipe_value(r.get(k)) for r in recipes) + " |")
    else:
        lines += ["", "Recipes: identical (apart from output.*)."]
    return "\n".join(lines)


def _evaluations(run_dir: Path) -> dict[str, dict[str, Any]]:
    """The run's ``nlptasks eval`` results under ``<run>/eval``: data file name → its latest
    metrics (folders are named by time, so the last in name order is the latest)."""
    found: dict[str, dict[str, Any]] = {}
    for path in sorted((run_dir / "eval").glob("**/metrics.json")):
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError):
            continue
        if isinstance(record.get("test"), dict) and record.get("source"):
            found[Path(record["source"]).name] = record["test"]
    return found


def _one(value: Any, digits: int = 1) -> str:
    return f"{value:.{digits}f}" if isinstance(value, (int, float)) else "-"


def _flatten(table: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in table.items():
        if isinstance(v, dict) and v:
            out.update(_flatten(v, f"{prefix}{k}."))
        elif not (isinstance(v, dict) and not v):
            out[f"{prefix}{k}"] = v
    return out


def _recipe_value(value: Any) -> str:
    return "-" if value is None else f"`{json.dumps(value, ensure_ascii=False)}`"


def _short_names(paths: list[Path]) -> list[str]:
    """The runs' folder names, with their parent (task) folder when names repeat."""
    names = [p.name for p in paths]
    if len(set(names)) == len(names):
        return names
    return [f"{p.parent.name}/{p.name}" if names.count(p.name) > 1 else p.name for p in paths]
