"""The plan as text: sizes in and out (``24GiB``), and the tables ``nlptasks plan`` and
``nlptasks bench ladder`` print."""

from __future__ import annotations

import re
from typing import Any

from nlptasks.errors import NlptasksError
from nlptasks.plan.estimate import GIB, MIB
from nlptasks.plan.make import Plan

__all__ = ["human", "parse_size", "plan_text", "table"]


def parse_size(text: str) -> int:
    """``24GiB``, ``24GB``, ``24G``, ``24``, ``800MiB``: bytes.  G, GB and a bare number are taken as
    GiB (the way GPU memory is quoted); K, M and T likewise."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(?:([KMGT])i?B?|(B))?\s*", text, flags=re.IGNORECASE)
    if not m:
        raise NlptasksError(f"--gpu-mem {text!r}: expected a size such as 24GiB, 80GB or 512MiB")
    value = float(m.group(1))
    if m.group(3):
        return int(value)
    unit = (m.group(2) or "G").upper()
    return int(value * {"K": 1024, "M": MIB, "G": GIB, "T": 1024 * GIB}[unit])


def human(n: float | None) -> str:
    if n is None:
        return "-"
    if n >= GIB:
        return f"{n / GIB:.2f} GiB"
    if n >= MIB:
        return f"{n / MIB:.1f} MiB"
    if n >= 1024:
        return f"{n / 1024:.0f} KiB"
    return f"{n:.0f} B"


def table(headers: list[str], rows: list[list[str]], right: set[int]) -> str:
    widths = [max(len(h), *(len(r[c]) for r in rows)) if rows else len(h) for c, h in enumerate(headers)]

    def line(cells: list[str]) -> str:
        return "  ".join(
            c.rjust(w) if i in right else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths, strict=False))
        ).rstrip()

    return "\n".join([line(headers), line(["-" * w for w in widths]), *(line(r) for r in rows)])


def plan_text(plan: Plan, measured: dict[str, dict[str, Any]] | None = None, measure_label: str = "") -> str:
    headers = [
        "rung",
        "targets",
        "batch",
        "params (trainable)",
        "weights",
        "grads",
        "optimizer",
        "activations",
        "total",
    ]
    if measured is not None:
        headers.append(measure_label or "measured")
    headers.append("note")
    rows = []
    for row in plan.rows:
        r, e = row.rung, row.estimate
        cells = [
            r.label,
            r.targets,
            f"{r.micro_batch}x{r.accumulation}",
            f"{e.parameters:,} ({e.trainable:,})" if e else "-",
            human(e.weights if e else None),
            human(e.gradients if e else None),
            human(e.optimizer if e else None),
            human(e.activations if e else None),
            human(e.total if e else None),
        ]
        note = [row.needs, r.changes]
        if measured is not None:
            m = measured.get(r.name) or {}
            cells.append(human(m["peak"]) if m.get("peak") is not None else "skipped")
            if m.get("peak") is None and m.get("skipped") and m.get("skipped") != row.needs:
                note.insert(0, str(m["skipped"]))
        cells.append("; ".join(n for n in note if n))
        rows.append(cells)
    return table(headers, rows, right={2, 4, 5, 6, 7, 8} | ({9} if measured is not None else set()))
