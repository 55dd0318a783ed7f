"""Run reports: the model card (``README.md``) and the resource figures (its curves and the task's
figures: :mod:`nlptasks.engine.reports.figures`; ``nlptasks compare``: :mod:`nlptasks.pipeline.compare`).

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

from nlptasks.engine.model.classes import import_line
from nlptasks.engine.training.provenance import computed_text
from nlptasks.types import Usage

__all__ = [
    "CARD",
    "CURVES",
    "LOG_HISTORY",
    "RATE_KEYS",
    "how_to_load",
    "infer_command",
    "markdown_metrics",
    "model_card",
    "num",
    "peak_memory",
    "tokenizer_settings",
]

log = logging.getLogger("nlptasks")

CARD = "README.md"
CURVES = "training_curves.png"
LOG_HISTORY = "log_history.json"
RATE_KEYS = {"runtime", "samples_per_second", "steps_per_second", "epoch", "best_step", "total_flos"}


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
    specials = {
        name: getattr(tokenizer, name, None)
        for name in ("pad_token", "unk_token", "cls_token", "sep_token", "bos_token", "eos_token", "mask_token")
    }
    return {
        "class": type(tokenizer).__name__,
        "vocab_size": len(tokenizer),
        "padding_side": getattr(tokenizer, "padding_side", None),
        "truncation_side": getattr(tokenizer, "truncation_side", None),
        "special_tokens": {k: v for k, v in specials.items() if v is not None},
        "chat_template": bool(getattr(tokenizer, "chat_template", None)),
    }


# --- curves ----------------------------------------------------------------------------------------


def markdown_metrics(metrics: dict[str, Any]) -> str:
    """Overall metrics (no per-class keys, no timings) as a Markdown table, one column per split."""
    splits = [s for s in ("validation", "test") if isinstance(metrics.get(s), dict)]
    keys: list[str] = []
    for s in splits:
        keys += [
            k
            for k, v in metrics[s].items()
            if "/" not in k and k not in RATE_KEYS and k not in keys and isinstance(v, (int, float))
        ]
    if not splits or not keys:
        return "_No evaluation split: only the training loss is known._"
    lines = ["| metric | " + " | ".join(splits) + " |", "|---|" + "---:|" * len(splits)]
    for k in keys:
        cells = [num(metrics[s].get(k)) for s in splits]
        lines.append(f"| {k} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def num(value: Any) -> str:
    if isinstance(value, bool) or value is None:
        return "-" if value is None else str(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return f"{value:.4f}"
    return str(value)


def model_card(
    run_dir: Path,
    manifest: dict[str, Any],
    metrics: dict[str, Any],
    recipe_text: str,
    description: str | None,
    sections: list[str],
    curves: bool,
    usage: Usage | None = None,
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
        (
            "training",
            "adapter: " + f"{peft['method']} ({peft['trainable_parameters']:,} of "
            f"{peft['total_parameters']:,} parameters trained)"
            if peft
            else "all weights",
        ),
        (
            "labels",
            usage.labels
            if usage.labels is not None
            else ", ".join(f"`{x}`" for x in manifest["labels"])
            if manifest.get("labels")
            else "-",
        ),
        ("max length", f"{manifest.get('max_length')} tokens"),
        ("precision", manifest.get("precision", "-")),
        ("figures computed with", computed_text(metrics.get("computed"))),
        (
            "wall time",
            f"{metrics.get('seconds', 0):.0f} s"
            + (f"; training {train['samples_per_second']:.1f} samples/s" if "samples_per_second" in train else "")
            + (f", {train['tokens_per_second']:.0f} tokens/s" if "tokens_per_second" in train else "")
            + (f", MFU {train['mfu']:.1%} (estimate)" if "mfu" in train else ""),
        ),
        ("peak memory", f"{resources['peak_rss_mb']:.0f} MiB RSS" if "peak_rss_mb" in resources else "-"),
        ("created", manifest.get("created", "-")),
        ("recipe sha256", f"`{manifest.get('recipe_sha256', '-')}`"),
    ]
    if "cuda_max_allocated_mb" in resources:
        facts.insert(10, ("GPU memory", f"{resources['cuda_max_allocated_mb']:.0f} MiB max allocated"))
    mlflow = (manifest.get("tracking") or {}).get("mlflow")
    if mlflow:  # train.report_to = ["mlflow"] (nlptasks.engine.training.tracking)
        facts.append(
            (
                "tracked in",
                f"MLflow run `{mlflow['run_id']}`, experiment `{mlflow['experiment']}`, at `{mlflow['tracking_uri']}`",
            )
        )
    lines += ["| | |", "|---|---|", *[f"| {k} | {v} |" for k, v in facts], ""]

    data = manifest.get("data") or {}
    lines += ["## Data", "", "| split | source | rows | examples after preprocessing |", "|---|---|---:|---:|"]
    for split in ("train", "validation", "test"):
        if split in (data.get("rows") or {}):
            dropped = sum((metrics.get("dropped") or {}).get(split, {}).values())
            rows = f"{data['rows'][split]:,}" + (f" ({dropped} dropped)" if dropped else "")
            examples = (data.get("examples") or {}).get(split)
            lines.append(
                f"| {split} | `{(data.get('sources') or {}).get(split, '-')}` | {rows} | "
                f"{'-' if examples is None else format(examples, ',')} |"
            )
    lines += ["", "## Metrics", "", markdown_metrics(metrics), ""]
    if curves:
        lines += ["## Training curves", "", f"![training curves]({CURVES})", ""]
    for section in sections:
        lines += [section.rstrip(), ""]
    lines += [
        "## Recipe",
        "",
        "The resolved recipe (every default filled in), also in `recipe.toml`:",
        "",
        "```toml",
        recipe_text.rstrip(),
        "```",
        "",
    ]
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
        "## How to load it",
        "",
        "With nlptasks (the same predictions as `nlptasks infer --model RUN_DIR`):",
        "",
        "```python",
        "import nlptasks",
        "",
        'predict = nlptasks.load("RUN_DIR")  # this folder',
        f"print(predict({example}))  # {per_input}",
        "```",
        "",
        "```bash",
        infer_command("RUN_DIR", usage),
        "nlptasks infer --model RUN_DIR --file inputs.jsonl --output out.jsonl",
        "```",
        "",
    ]
    peft = manifest.get("peft")
    if not peft:
        lines += [
            "With plain transformers (no nlptasks needed):"
            if not manifest.get("model_module")
            else "With plain transformers and the plugin's model class (no nlptasks command needed):",
            "",
            "```python",
            *import_line(manifest, "AutoTokenizer").splitlines(),
            "",
            'tokenizer = AutoTokenizer.from_pretrained("RUN_DIR")',
            f'model = {cls}.from_pretrained("RUN_DIR").eval()',
            "```",
        ]
        return lines
    base = peft.get("base", {})
    if "path" in base:
        load_base = [f'base = {cls}.from_pretrained("RUN_DIR/{base.get("path", "base")}")']
    else:
        config = "AutoConfig" if not manifest.get("model_module") else f"{cls}.config_class"
        load_base = [
            f'config = {config}.from_pretrained("RUN_DIR/{base.get("config", "base")}")  # the head settings',
            f'base = {cls}.from_pretrained("{base.get("name_or_path")}", config=config)',
        ]
    lines += [
        "With plain transformers and peft (the adapter on its frozen base):",
        "",
        "```python",
        "from peft import PeftModel",
        *import_line(manifest, "AutoConfig", "AutoTokenizer").splitlines(),
        "",
        'tokenizer = AutoTokenizer.from_pretrained("RUN_DIR")',
        *load_base,
        'model = PeftModel.from_pretrained(base, "RUN_DIR").eval()',
        "```",
        "",
        "A LoRA or IA3 adapter merges into a full model with `nlptasks export RUN_DIR --merge OUT`.",
    ]
    return lines
