"""``nlptasks ui``: a web dashboard for the runs under some folders (FastAPI on uvicorn, the stack
of ``nlptasks serve``).

Modules, bottom up: :mod:`~nlptasks.ui.paths` (every path a request names, confined to the folders
the dashboard was started with), :mod:`~nlptasks.ui.runs` (the runs list and one run's records),
:mod:`~nlptasks.ui.curves` (training curves from ``log_history``, checkpoints or a live log),
:mod:`~nlptasks.ui.recipes` (recipes, the form's fields, validation, the command line),
:mod:`~nlptasks.ui.jobs` (runs started from the page: a queue of ``python -m nlptasks run``
processes), :mod:`~nlptasks.ui.models` (complete runs loaded on demand to try them, a bounded
number at a time), :mod:`~nlptasks.ui.studies` (``nlptasks tune`` studies),
:mod:`~nlptasks.ui.state` (what every route shares) and :mod:`~nlptasks.ui.app` (the routes).
The page is plain HTML, CSS and JavaScript in ``nlptasks/ui/static/`` (docs/ui.md).  Importing
this package imports nothing heavy; ``fastapi`` is imported by :mod:`~nlptasks.ui.app`.
"""

__all__: list[str] = []
