"""``nlptasks serve``: trained runs behind an HTTP server (FastAPI on uvicorn).

Modules: :mod:`~nlptasks.serve.state` (the served models and the server's settings, shared by
every route), :mod:`~nlptasks.serve.batching` (dynamic batching), :mod:`~nlptasks.serve.app`
(the app: predict, models, health, metrics), :mod:`~nlptasks.serve.openai` (OpenAI-compatible
chat and completions for runs whose predictor can chat), :mod:`~nlptasks.serve.page` (the page
to try the models at ``/``).  Importing this package imports nothing heavy; ``fastapi`` is
imported by :mod:`~nlptasks.serve.app` (the ``serve`` extra).  Environment variables:

``NLPTASKS_API_KEY``
    the key ``nlptasks serve`` requires as ``Authorization: Bearer KEY`` on every endpoint but
    ``/health`` and the page's files, when ``--api-key`` is not given.
"""

__all__: list[str] = []
