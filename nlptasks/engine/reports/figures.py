"""Figures of a run report: training curves, a classification task's confusion matrix and
per-class table (the ``nlptasks_report`` helpers of :mod:`nlptasks.plugin`).  matplotlib (Agg
backend) is imported only when a figure is drawn."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from nlptasks.engine.reports.card import num

__all__ = ["classification_sections", "per_class_table", "write_confusion_matrix", "write_curves"]

log = logging.getLogger("nlptasks")


def write_curves(history: list[dict[str, Any]], path: Path, metric: str) -> bool:
    """Training loss, validation loss and validation ``metric`` by step as a PNG; ``False`` (with a
    log line) when there is nothing to draw or matplotlib is not installed."""
    end = next((i for i, h in enumerate(history) if "train_runtime" in h), len(history))
    history = history[:end]  # what was logged during training, not the evaluations after it
    train = [(h["step"], h["loss"]) for h in history if "loss" in h and "step" in h]
    evals = [(h["step"], h["eval_loss"]) for h in history if "eval_loss" in h and "step" in h]
    scores = [
        (h["step"], h[f"eval_{metric}"])
        for h in history
        if isinstance(h.get(f"eval_{metric}"), (int, float)) and "step" in h and metric != "loss"
    ]
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
            ax.text(
                j,
                i,
                str(matrix[i, j]),
                ha="center",
                va="center",
                color="white" if matrix[i, j] > limit else "black",
                fontsize=9,
            )
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
        compute_metrics, trainer.compute_metrics = (
            trainer.compute_metrics,
            None,
        )  # predictions only: the metrics are known
        try:
            output = trainer.predict(data[split], metric_key_prefix=split)
        finally:
            trainer.compute_metrics = compute_metrics
    logits = output.predictions[0] if isinstance(output.predictions, tuple) else output.predictions
    name = "confusion_matrix.png"
    names = write_confusion_matrix(
        ctx.labels,
        output.label_ids,
        logits.argmax(-1),
        ctx.output_dir / name,
        f"{ctx.task.name}: {split} ({len(data[split])} rows)",
    )
    if names is not None:
        key = (
            ""
            if names == ctx.labels
            else " Classes: " + ", ".join(f"{n} = `{label}`" for n, label in zip(names, ctx.labels, strict=True)) + "."
        )
        sections.append(
            f"## Confusion matrix ({split})\n\nRows: true class; columns: predicted.{key}\n\n"
            f"![confusion matrix]({name})"
        )
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
            cells.append(f"{v:.0f}" if name == "support" and v is not None else num(v))
        lines.append(f"| {cls} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
