"""Write a benchmark's results into docs/benchmarks.md, between its markers.

Each benchmark owns one or more blocks ``<!-- NAME:begin -->`` ... ``<!-- NAME:end -->``, where
NAME is the script's stem, optionally followed by ``-SUFFIX`` when one script measures several
setups (``cls_overhead-sst2-minilm``, ``cls_overhead-mrpc-minilm``).  Running the script with
``--docs`` replaces the block's content, so the table in the docs is the one the script printed;
a block not yet in the file is appended at the end.  ``--docs-file`` points the write elsewhere
(a copy, for smoke runs).

Every block starts with the same header line, built here: the command as run, the UTC date and
time, and the machine (CPU count and model, torch version and threads, the 1-minute load average
when the benchmark started).  A script calls :func:`start` before its work (to catch the load at
the start) and :func:`publish` after it.

Scripts in ``benchmarks/`` that are not benchmarks but the plain-transformers side of one declare
a module-level ``PEER_OF = "<benchmark>.py"``; every other public script is a benchmark and must
offer ``--docs`` and have a block in docs/benchmarks.md (tests/test_benchmarks.py checks both).
"""

from __future__ import annotations

import argparse
import ast
import datetime as _dt
import os
import platform
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs" / "benchmarks.md"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--docs`` and ``--docs-file`` to a benchmark's parser."""
    parser.add_argument(
        "--docs",
        action="store_true",
        help="write the results table into its block of docs/benchmarks.md (or --docs-file)",
    )
    parser.add_argument(
        "--docs-file",
        type=_markdown_file,
        default=DOCS,
        metavar="PATH",
        help="the Markdown file --docs writes into (default: docs/benchmarks.md; point it at a copy for smoke runs)",
    )


def _markdown_file(value: str) -> Path:
    """``--docs-file`` must exist (checked before the benchmark runs, not after)."""
    path = Path(value)
    if not path.is_file():
        raise argparse.ArgumentTypeError(
            f"no file {value}: copy docs/benchmarks.md there first (cp docs/benchmarks.md {value})"
        )
    return path


def command_line(script: str, args: list[str] | None = None) -> str:
    """The command as run: ``python benchmarks/x.py ARGS``, with ``OMP_NUM_THREADS=N`` first if set.

    ``args`` are the script's arguments (default: ``sys.argv[1:]``).
    """
    path = Path(script).resolve()
    shown = str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)
    env = f"OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']} " if "OMP_NUM_THREADS" in os.environ else ""
    return env + shlex.join(["python", shown, *(sys.argv[1:] if args is None else args)])


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo, else what ``platform`` knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("model name") and ":" in line:
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def torch_info() -> str:
    """``torch VERSION (N threads)`` (imports torch: call it after the work, not before)."""
    try:
        import torch
    except ImportError:
        return "torch not installed"
    threads = torch.get_num_threads()
    return f"torch {torch.__version__} ({threads} thread{'' if threads == 1 else 's'})"


@dataclass
class RunInfo:
    """What the header says about a run, taken when the benchmark starts."""

    command: str
    started: _dt.datetime
    load: float

    def header(self) -> str:
        """The line every block starts with: command, UTC date and time, machine."""
        return (
            f"`{self.command}`, {self.started.strftime('%Y-%m-%d %H:%M UTC')}; "
            f"machine: {os.cpu_count()} CPU cores ({cpu_model()}), {torch_info()}, "
            f"1-minute load average {self.load:.1f} at the start."
        )


def start(script: str, args: list[str] | None = None) -> RunInfo:
    """Record the command (``script`` with ``args``, default ``sys.argv[1:]``), the time and the load
    average; call it before the benchmark's work."""
    return RunInfo(command_line(script, args), _dt.datetime.now(_dt.UTC), os.getloadavg()[0])


def block_name(script: str, suffix: str | None = None) -> str:
    """``STEM`` or ``STEM-SUFFIX`` for ``benchmarks/STEM.py``."""
    stem = Path(script).stem
    return f"{stem}-{suffix}" if suffix else stem


def render(info: RunInfo, body: str, intro: str = "") -> str:
    """A block's content: the header line (plus ``intro`` on the same paragraph), a blank line, ``body``."""
    return f"{info.header()}{' ' + intro.strip() if intro.strip() else ''}\n\n{body.strip()}"


def publish(args: argparse.Namespace, name: str, info: RunInfo, body: str, intro: str = "") -> str:
    """Print the block's content and, with ``--docs``, write it into block ``name`` of ``--docs-file``."""
    content = render(info, body, intro)
    print(f"\n{content}")
    if getattr(args, "docs", False):
        replace_block(args.docs_file, name, content)
        print(f"\nwrote block {name} into {args.docs_file}")
    return content


def replace_block(path: Path, name: str, content: str) -> None:
    """Put ``content`` between ``<!-- name:begin -->`` and ``<!-- name:end -->`` of ``path``.

    The block's old content is replaced; a block not in the file yet is appended at its end.
    """
    begin, end = f"<!-- {name}:begin -->", f"<!-- {name}:end -->"
    text = path.read_text(encoding="utf-8")
    block = f"{begin}\n{content.rstrip()}\n{end}"
    if begin in text and end in text.split(begin, 1)[1]:
        head, rest = text.split(begin, 1)
        text = head + block + rest.split(end, 1)[1]
    else:
        text = text.rstrip() + "\n\n" + block + "\n"
    path.write_text(text, encoding="utf-8")


def benchmark_scripts(folder: Path = ROOT / "benchmarks") -> list[Path]:
    """The benchmarks in ``folder``: every ``*.py`` not starting with ``_`` and not declaring ``PEER_OF``.

    Read from the source (no import: a plain side imports torch at module level).
    """
    return [path for path in sorted(folder.glob("[!_]*.py")) if peer_of(path) is None]


def peer_of(path: Path) -> str | None:
    """The module-level ``PEER_OF`` string of a script (the benchmark it is the plain side of), or None."""
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "PEER_OF" for t in node.targets):
            return ast.literal_eval(node.value)
    return None
