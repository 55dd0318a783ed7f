"""Write a benchmark's results into docs/benchmarks.md, between its markers.

Each benchmark owns a block ``<!-- NAME:begin -->`` ... ``<!-- NAME:end -->``; running the script
with ``--docs`` replaces the block's content, so the table in the docs is the one the script
printed.  A block not yet in the file is appended at the end.
"""

from __future__ import annotations

from pathlib import Path


def replace_block(path: Path, name: str, content: str) -> None:
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    text = path.read_text(encoding="utf-8")
    block = f"{begin}\n{content.rstrip()}\n{end}"
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        text = head + block + rest.split(end, 1)[1]
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    path.write_text(text, encoding="utf-8")
