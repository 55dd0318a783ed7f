"""Errors that users read.

Every error the CLI prints is an :class:`NlptasksError`: one line per problem, each naming where
it is (a recipe key path such as ``train.learning_rate``, or a file and row), and a last line with
the command that helps next.  Nothing else reaches the user as a traceback unless ``--debug``.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

__all__ = [
    "redact",
    "DataError",
    "NlptasksError",
    "PluginError",
    "Problem",
    "RecipeError",
    "did_you_mean",
    "first_line",
]


@dataclass(frozen=True)
class Problem:
    """One thing wrong, and where: ``where`` is a key path (``train.epochs``) or ``file:row``."""

    where: str
    message: str

    def __str__(self) -> str:
        return f"{self.where}: {self.message}" if self.where else self.message


_CREDENTIALS = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)(?P<user>[^:/@\s]*):(?P<secret>[^@\s/]+)@")


def redact(text: str) -> str:
    """``text`` with the password of every URL in it replaced by ``***``
    (``postgresql://user:secret@host/db`` → ``postgresql://user:***@host/db``): what nlptasks prints
    or logs never shows a credential a user passed in a URL."""
    return _CREDENTIALS.sub(lambda m: f"{m['scheme']}{m['user']}:***@", text)


class NlptasksError(Exception):
    """Base class: a message for the user, optional problems (one per line) and a hint."""

    def __init__(self, message: str, problems: Sequence[Problem] = (), hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.problems = list(problems)
        self.hint = hint

    def render(self) -> str:
        lines = [self.message]
        lines += [f"  {p}" for p in self.problems]
        if self.hint:
            lines.append(self.hint)
        return redact("\n".join(lines))

    def __str__(self) -> str:
        return self.render()


class RecipeError(NlptasksError):
    """The recipe is invalid; ``problems`` lists every problem found, not only the first."""

    def __init__(self, source: str, problems: Sequence[Problem], hint: str | None = None) -> None:
        count = len(problems)
        noun = "problem" if count == 1 else "problems"
        super().__init__(f"{source}: {count} {noun} in the recipe", problems, hint)
        self.source = source


class DataError(NlptasksError):
    """Bad data: names the file and, where known, the row (1-based, header excluded) and the
    ``field`` of the row at fault (``text``, ``tokens[2]``: the server names ``inputs[i].text``)."""

    def __init__(
        self,
        message: str,
        path: str | None = None,
        row: int | None = None,
        hint: str | None = None,
        field: str | None = None,
    ) -> None:
        where = path or ""
        if row is not None:
            where = f"{where}:{row}" if where else f"row {row}"
        full = f"{where}: {message}" if where else message
        super().__init__(full, hint=hint)
        self.path = path
        self.row = row
        self.field = field


class PluginError(NlptasksError):
    """A plugin could not be loaded, or no plugin provides what the recipe asks for."""


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    """Return `` (did you mean 'x'?)`` for the closest choice, or an empty string."""
    close = difflib.get_close_matches(name, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message (its class name when the message is empty): what
    an error of ours quotes from a library's exception."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
