"""The ``nlptasks`` command line: one thin module per command (``nlptasks.cli.run`` ...), each with a
``register(subparsers)`` that adds its parser and a ``cmd(args)`` that runs it.

Import time matters here: only ``argparse`` and the standard library load before a command
runs, so ``nlptasks --help`` is instant; torch and transformers load inside the commands that
need them.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any

from nlptasks.cli import (
    add_adapter,
    bench,
    check,
    compare,
    evaluate,
    export,
    infer,
    inspect_batch,
    plan,
    plugins,
    run,
    schema,
    serve,
    tune,
    ui,
    validate,
)
from nlptasks.cli._common import add_recipe_arguments
from nlptasks.version import __version__

__all__ = ["add_recipe_arguments", "build_parser", "main"]

EXAMPLES = """\
examples:
  nlptasks run recipes/cls.toml                      train the quickstart (under a minute on CPU)
  nlptasks run recipes/cls.toml --set train.epochs=1 override a recipe key
  nlptasks run recipes/cls.toml --resume             continue the run a crash interrupted
  nlptasks infer --task cls "服务很好"                label a text with the latest cls run
  nlptasks infer --task pair "怎么退款" "如何申请退款"  score a sentence pair
  nlptasks infer --task sft "湖畔酒店几点可以入住？"      generate an answer with the latest sft run
  nlptasks inspect-batch recipes/sft.toml            show the tokens a recipe feeds the model
  nlptasks run recipes/cls.toml --set peft.method=lora  train a LoRA adapter instead
  nlptasks export runs/cls/RUN --merge merged/       merge a lora/ia3 adapter into a full model
  nlptasks validate recipes/cls.toml                 check a recipe without running it
  nlptasks eval runs/cls/RUN --data new.csv         score a run on new labelled data; list its errors
  nlptasks serve runs/cls/RUN runs/sft/RUN           serve runs over HTTP: predict, OpenAI chat, a page
  nlptasks compare runs/cls/A runs/cls/B             metrics, time, memory and recipe differences
  nlptasks check recipes/ner.toml                    find problems in a recipe's data before training
  nlptasks plan recipes/cls.toml --gpu-mem 24GiB     estimate memory per ladder rung; pick one that fits
  nlptasks bench ladder recipes/cls.toml --steps 5   measure memory and speed of every ladder rung
  nlptasks tune recipes/cls.toml --trials 8          search the recipe's [tune.space] with Optuna
  nlptasks ui --runs runs                            a web dashboard: list, compare, watch, start, try runs
  nlptasks plugins                                   list plugins, tasks and hooks
"""


COMMANDS = (
    run,
    validate,
    check,
    infer,
    evaluate,
    compare,
    inspect_batch,
    add_adapter,
    export,
    serve,
    ui,
    plan,
    bench,
    tune,
    plugins,
    schema,
)
"""The command modules, in the order ``nlptasks --help`` lists them."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="nlptasks",
        description="NLP fine-tuning as recipes and plugins.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"nlptasks {__version__}")
    parser.add_argument("--debug", action="store_true", help="show full tracebacks on errors")
    parser.add_argument("-q", "--quiet", action="store_true", help="only warnings and errors on stderr")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for command in COMMANDS:
        command.register(sub)
    return parser


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever ``sys.stderr`` is at the time (it may have been replaced since)."""

    @property  # type: ignore[override]
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass


class _Redacting(logging.Formatter):
    """Log lines with every URL's password replaced (``nlptasks.errors.redact``)."""

    def format(self, record: logging.LogRecord) -> str:
        from nlptasks.errors import redact

        return redact(super().format(record))


def setup_logging(quiet: bool) -> None:
    logger = logging.getLogger("nlptasks")
    if not logger.handlers:
        handler = _StderrHandler()
        handler.setFormatter(_Redacting("nlptasks: %(message)s"))
        logger.addHandler(handler)
    logger.setLevel(logging.WARNING if quiet else logging.INFO)
    logger.propagate = False


def main(argv: Sequence[str] | None = None) -> int:
    """The ``nlptasks`` command; returns the exit code.  A reader that closes stdout early
    (``nlptasks plugins | head``) ends the command quietly, with exit code 0."""
    try:
        code = _main(argv)
        sys.stdout.flush()  # a closed pipe shows here rather than at interpreter exit
        return code
    except BrokenPipeError:
        _silence_stdout()
        return 0


def _silence_stdout() -> None:
    """Point stdout at /dev/null so Python's final flush does not fail on the closed pipe again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):  # no real file descriptor (e.g. captured output)
        pass


def _main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # for `run --nproc`, which starts itself again
    if args.command is None:
        parser.print_help()
        return 0
    setup_logging(args.quiet)
    from nlptasks.errors import NlptasksError

    try:
        return int(args.func(args) or 0)
    except NlptasksError as exc:
        if args.debug:
            raise
        print(f"error: {exc.render()}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
