"""``nlptasks inspect-batch``: steps 1 to 4 of a recipe, then the model inputs shown token by token
(:mod:`nlptasks.engine.reports.inspect`), with what the loss would see.

An example the loss cannot use (no token in the loss, a position outside the input) is an error
naming its rows, and so is a split without any of the task's label columns: the command says
"ok" only when it found labels in the loss for every example.
"""

from __future__ import annotations

from collections.abc import Callable

from nlptasks.engine.reports.inspect import label_columns, loss_problems, show
from nlptasks.errors import NlptasksError
from nlptasks.host import Host
from nlptasks.pipeline.steps import prepared
from nlptasks.recipe import LoadedRecipe

__all__ = ["inspect_batch"]


def inspect_batch(
    loaded: LoadedRecipe,
    split: str = "train",
    rows: int = 3,
    host: Host | None = None,
    out: Callable[[str], None] = print,
) -> None:
    """Show ``rows`` examples of ``split``; raise if an example of any split gives the loss nothing."""
    with prepared(loaded, host) as (ctx, data):
        show(ctx, data, split, rows, out)
        problems = loss_problems(ctx, data)
        if ctx.dropped:
            parts = [f"{s}: " + ", ".join(f"{n} {reason}" for reason, n in d.items()) for s, d in ctx.dropped.items()]
            out("\ndropped rows: " + "; ".join(parts))
        if problems:
            lines = []
            for name, found in problems.items():
                for problem, numbers in found.items():
                    shown = ", ".join(map(str, numbers[:10])) + (" ..." if len(numbers) > 10 else "")
                    lines.append(
                        f"{ctx.sources.get(name, name)}: {len(numbers)} example(s) with {problem}: rows {shown}"
                    )
            total = sum(len(n) for found in problems.values() for n in found.values())
            raise NlptasksError(
                f"{total} example(s) give the loss nothing to learn from:\n  " + "\n  ".join(lines),
                hint="They teach nothing (often: the answer was cut by model.max_length). "
                "Raise model.max_length or fix the rows.",
            )
        kinds = sorted(
            {
                f"{column} ({kind})"
                for ds_split, ds in data.items()
                if len(ds)
                for column, kind in label_columns(ctx, ds, ds_split).items()
            }
        )
        out(f"\nok: every example of {', '.join(data)} has labels for the loss: {', '.join(kinds)}")
