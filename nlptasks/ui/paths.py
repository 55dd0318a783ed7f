"""Every path a request names, confined to the folders the dashboard was started with.

A request never carries a file system path: it names a run by its id ``K/TASK/NAME`` (the K-th
runs folder of ``--runs``, then ``TASK/NAME`` inside it), a recipe by ``rK/PATH`` (a ``.toml``
under the K-th recipes folder) or ``run/K/TASK/NAME`` (the resolved ``recipe.toml`` of a run), and
a file of a run by its name inside the run folder.  :func:`confine` refuses an absolute path, an
empty part, ``.`` and ``..`` (400), and a path that leads outside its folder once symbolic links are
followed (403), before anything is read.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path, PureWindowsPath

from nlptasks.serve.errors import ApiError

__all__ = ["Roots", "confine"]

RUN_FILES = ("README.md", "metrics.json", "nlptasks.json", "recipe.toml", "log_history.json")
"""Files of a run that every run page reads (others are reached through :meth:`Roots.run_file`)."""


def confine(base: Path, relative: str, field: str, what: str) -> Path:
    """``base / relative`` resolved (symbolic links followed), when it stays inside ``base``.

    :param base: a resolved folder the dashboard was given.
    :param relative: the path a request sent, ``/``-separated.
    :param field: the request field that carried it (named in the error).
    :param what: what ``base`` is, for the error (``"the runs folder /x/runs"``).
    :raises ApiError: 400 for an absolute path or a ``..``, ``.`` or empty part; 403 for a path
        that leads outside ``base`` through a symbolic link.
    """
    if not relative:
        raise ApiError(400, f"{field}: empty; send an id the page lists", field)
    if relative.startswith(("/", "\\")) or PureWindowsPath(relative).drive or Path(relative).is_absolute():
        raise ApiError(
            400,
            f"{field}: {relative!r} is an absolute path; the dashboard takes ids relative to {what}, "
            "as its lists give them",
            field,
        )
    parts = relative.replace("\\", "/").split("/")
    if any(part in ("", ".", "..") for part in parts):
        raise ApiError(400, f"{field}: {relative!r} has an empty, '.' or '..' part; send an id the page lists", field)
    resolved = base.joinpath(*parts).resolve()
    if not resolved.is_relative_to(base):
        raise ApiError(
            403,
            f"{field}: {relative!r} leads outside {what} (a symbolic link to {resolved}); the dashboard "
            "reads only inside the folders it was started with (--runs, --recipes)",
            field,
        )
    return resolved


@dataclass(frozen=True)
class Roots:
    """The folders a dashboard reads: runs folders (``--runs``) and recipes folders (``--recipes``),
    each resolved."""

    runs: tuple[Path, ...]
    recipes: tuple[Path, ...] = ()

    @classmethod
    def of(cls, runs: list[Path], recipes: list[Path]) -> Roots:
        return cls(
            tuple(dict.fromkeys(Path(p).resolve() for p in runs)),
            tuple(dict.fromkeys(Path(p).resolve() for p in recipes)),
        )

    def run_id(self, run_dir: Path) -> str:
        """The id of a run folder found under a runs folder: ``K/TASK/NAME``."""
        for k, root in enumerate(self.runs):
            if run_dir.parent.parent == root:
                return f"{k}/{run_dir.parent.name}/{run_dir.name}"
        raise ValueError(f"{run_dir} is not a run folder under {self.runs}")

    def runs_root(self, k: int | str, field: str = "root") -> Path:
        """The K-th runs folder."""
        try:
            return self.runs[int(k)]
        except (ValueError, IndexError):
            raise ApiError(
                404,
                f"{field}: no runs folder {k!r}; the dashboard has {len(self.runs)} (0 to {len(self.runs) - 1})",
                field,
            ) from None

    def run_dir(self, run_id: str, field: str = "id", exists: bool = True) -> Path:
        """The folder of the run ``K/TASK/NAME``; with ``exists``, a 404 saying it is gone when it is
        not there (a page left open on a run since deleted)."""
        head, _, rest = (run_id or "").partition("/")
        if not head.isdigit() or rest.count("/") != 1:
            raise ApiError(400, f"{field}: {run_id!r} is not a run id; run ids look like 0/cls/NAME", field)
        root = self.runs_root(head, field)
        path = confine(root, rest, field, f"the runs folder {root}")
        if exists and not path.is_dir():
            raise ApiError(
                404,
                f"{field}: no run {run_id!r}: {path} is not there (deleted or moved?); the runs list shows "
                "what is there now",
                field,
            )
        return path

    def run_file(self, run_id: str, name: str, field: str = "name") -> Path:
        """A file inside a run folder (an image of its card, a chart)."""
        run_dir = self.run_dir(run_id)
        path = confine(run_dir, name, field, f"the run folder {run_dir}")
        if not path.is_file():
            raise ApiError(404, f"{field}: {run_dir} has no file {name!r}", field)
        return path

    def recipe(self, recipe_id: str, field: str = "recipe") -> Path:
        """The recipe ``rK/PATH`` (a ``.toml`` under the K-th recipes folder) or ``run/RUN_ID`` (a
        run's resolved ``recipe.toml``)."""
        if recipe_id.startswith("run/"):
            path = self.run_dir(recipe_id[4:], field) / "recipe.toml"
        else:
            head, _, rest = recipe_id.partition("/")
            if not (head.startswith("r") and head[1:].isdigit()) or not rest:
                raise ApiError(
                    400,
                    f"{field}: {recipe_id!r} is not a recipe id; recipe ids look like r0/cls.toml or "
                    "run/0/cls/NAME (GET /api/recipes lists them)",
                    field,
                )
            k = int(head[1:])
            if k >= len(self.recipes):
                raise ApiError(404, f"{field}: no recipes folder {k}; the dashboard has {len(self.recipes)}", field)
            path = confine(self.recipes[k], rest, field, f"the recipes folder {self.recipes[k]}")
            if path.suffix != ".toml":
                raise ApiError(400, f"{field}: {recipe_id!r} is not a .toml recipe", field)
        if not path.is_file():
            raise ApiError(404, f"{field}: no recipe {recipe_id!r} ({path} is not there)", field)
        return path
