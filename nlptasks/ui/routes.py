"""The dashboard's JSON API (every route under ``/api``; the page is its only client, curl another).

``GET /api/runs``                   the runs list (:func:`nlptasks.ui.runs.list_runs`)
``GET /api/run?id=K/TASK/NAME``     one run: card, metrics, per-class tables, evals, exports, commands
``GET /api/run/curve?id=...``       its training curve and progress, live while it trains
``GET /api/run/file?id=...&name=``  an image or text file of the run (its card's pictures)
``GET /api/compare?id=A&id=B``      ``nlptasks compare``'s table and each run's curve
``GET /api/recipes``, ``GET /api/recipe?id=``     recipes; one recipe's values and JSON Schema
``POST /api/validate``              ``{"recipe", "overrides": {key: value}}``: every problem, the command
``POST /api/jobs``                  start a run (queued when ``--max-parallel`` runs train already)
``GET /api/jobs``, ``POST /api/jobs/{job}/stop``, ``POST /api/resume`` (``{"id": RUN}``)
``GET /api/try?id=``, ``POST /api/try`` (``{"id", "inputs"}``), ``GET /api/models``, ``POST /api/models/unload``
``GET /api/studies``, ``GET /api/study?id=K/TASK/tune-NAME``

(No ``from __future__ import annotations``: FastAPI reads the routes' annotations.)
"""

from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from nlptasks.errors import NlptasksError
from nlptasks.serve.errors import ApiError
from nlptasks.ui.curves import curve
from nlptasks.ui.jobs import new_run_name
from nlptasks.ui.recipes import command_line, list_recipes, overrides_of, recipe_form, validate
from nlptasks.ui.runs import list_runs, run_detail
from nlptasks.ui.state import UiState
from nlptasks.ui.studies import list_studies, study_detail

__all__ = ["JobRequest", "TryRequest", "add_routes"]

FILE_TYPES = {
    ".png": "image/png",
    ".svg": "image/svg+xml",
    ".jpg": "image/jpeg",
    ".md": "text/plain; charset=utf-8",
    ".toml": "text/plain; charset=utf-8",
    ".json": "application/json",
    ".txt": "text/plain; charset=utf-8",
}
"""What ``/api/run/file`` hands out: pictures and text, never weights."""


class JobRequest(BaseModel):
    """The body of ``POST /api/validate`` and ``POST /api/jobs``."""

    model_config = ConfigDict(extra="forbid")
    recipe: str = Field(description="a recipe id from GET /api/recipes (r0/cls.toml, run/0/cls/NAME)")
    overrides: dict[str, Any] = Field(
        default_factory=dict, description='the keys changed, each as --set takes it: {"train.epochs": "2"}'
    )


class RunRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str = Field(description="a run id from GET /api/runs (K/TASK/NAME)")


class TryRequest(BaseModel):
    """The body of ``POST /api/try``."""

    model_config = ConfigDict(extra="forbid")
    id: str = Field(description="a complete run's id")
    inputs: list[str | dict[str, Any] | list[str]] = Field(min_length=1, max_length=256)


def add_routes(app: Any, state: UiState) -> None:
    """Add the ``/api`` routes for ``state`` to ``app``."""
    from fastapi import Query
    from fastapi.responses import FileResponse, JSONResponse

    roots = state.roots

    def job_of(run_dir: Path) -> Any:
        return state.jobs.by_run_dir().get(run_dir.resolve())

    def known(run_id: str) -> Path:
        """The run's folder: there, or about to be (a job started for it has not made it yet)."""
        run_dir = roots.run_dir(run_id, exists=False)
        if not run_dir.is_dir() and job_of(run_dir) is None:
            roots.run_dir(run_id)  # the 404 saying it is gone
        return run_dir

    @app.get("/api/runs", tags=["runs"], summary="Every run under the runs folders")
    def runs_route() -> Any:
        return {"runs": list_runs(roots, state.jobs.by_run_dir()), "roots": [str(r) for r in roots.runs]}

    @app.get("/api/run", tags=["runs"], summary="One run: its card, metrics, evals, exports, commands")
    def run_route(id: Annotated[str, Query(description="K/TASK/NAME")]) -> Any:
        run_dir = known(id)
        return run_detail(roots, run_dir, job_of(run_dir))

    @app.get("/api/run/curve", tags=["runs"], summary="A run's training curve and progress (live while it trains)")
    def curve_route(
        id: Annotated[str, Query(description="K/TASK/NAME")],
        from_step: Annotated[
            int | None,
            Query(ge=0, description="only the points from this step on (a page that has the earlier ones)"),
        ] = None,
    ) -> Any:
        run_dir = known(id)
        job = job_of(run_dir)
        out = curve(run_dir, state.jobs.logs_of(run_dir.resolve()), state.reader)
        out["from_step"] = from_step
        if from_step is not None:  # a later point never changes an earlier step's values
            out["points"] = [p for p in out["points"] if p["step"] >= from_step]
        from nlptasks.ui.runs import status_of

        out["status"], out["note"] = status_of(run_dir, job)
        out["job"] = job
        return out

    @app.get("/api/run/file", tags=["runs"], summary="A picture or text file of a run")
    def file_route(
        id: Annotated[str, Query()], name: Annotated[str, Query(description="a file name inside the run folder")]
    ) -> Any:
        path = roots.run_file(id, name)
        kind = FILE_TYPES.get(path.suffix.lower())
        if kind is None:
            raise ApiError(400, f"name: {name!r}: the dashboard hands out pictures and text files only", "name")
        return FileResponse(path, media_type=kind)

    @app.get("/api/compare", tags=["runs"], summary="nlptasks compare's table and the runs' curves")
    def compare_route(id: Annotated[list[str], Query(description="two or more run ids")]) -> Any:
        from nlptasks.pipeline.compare import compare

        if len(id) < 2:
            raise ApiError(400, "id: choose two runs or more to compare", "id")
        run_dirs = [roots.run_dir(i) for i in id]
        try:
            table = compare(run_dirs)
        except NlptasksError as exc:
            raise ApiError(400, exc.render(), "id") from None
        curves = {i: curve(d, state.jobs.logs_of(d), state.reader)["points"] for i, d in zip(id, run_dirs, strict=True)}
        return {"table": table, "curves": curves}

    @app.get("/api/recipes", tags=["new run"], summary="The recipes a run can start from")
    def recipes_route() -> Any:
        rows = list_runs(roots, state.jobs.by_run_dir())
        return {"recipes": list_recipes(roots, rows), "folders": [str(p) for p in roots.recipes]}

    @app.get("/api/recipe", tags=["new run"], summary="A recipe's values and the JSON Schema of its form")
    def recipe_route(id: Annotated[str, Query(description="a recipe id")]) -> Any:
        return recipe_form(roots, id, state.settings.allow_remote_code)

    @app.post("/api/validate", tags=["new run"], summary="nlptasks validate: every problem at its key")
    def validate_route(body: JobRequest) -> Any:
        path = roots.recipe(body.recipe)
        overrides = overrides_of(body.overrides)
        result = validate(path, overrides, state.settings.allow_remote_code)
        result["command"] = command_line(path, overrides, ["--no-progress"]) + f" --set output.dir={roots.runs[0]}"
        return result

    @app.post("/api/jobs", tags=["new run"], summary="Start a run (as a separate process)", status_code=201)
    def start_route(body: JobRequest) -> Any:
        path = roots.recipe(body.recipe)
        overrides = overrides_of(body.overrides)
        result = validate(path, overrides, state.settings.allow_remote_code)
        root = roots.runs[0]
        if result["ok"]:
            name = _value(overrides, "output.run_name") or new_run_name(root / str(result["task"]))
            run_dir = root / str(result["task"]) / name
            if run_dir.exists() and _value(overrides, "output.overwrite") != "true":
                result["problems"].append(
                    {
                        "where": "output.run_name",
                        "message": f"{run_dir} exists: choose another name (or output.overwrite)",
                    }
                )
        if result["problems"]:
            first = result["problems"][0]
            where = f"{first['where']}: " if first["where"] else ""
            body_out = {
                "error": {
                    "message": f"the recipe has {len(result['problems'])} problem(s): {where}{first['message']}",
                    "type": "invalid_request_error",
                    "field": first["where"] or None,
                    "param": first["where"] or None,
                    "code": 400,
                },
                "problems": result["problems"],
                "hint": result["hint"],
            }
            return JSONResponse(body_out, status_code=400)
        sets = [o for o in overrides if o.partition("=")[0] not in ("output.run_name",)]
        sets += [f"output.dir={root}", f"output.run_name={name}"]
        argv = ["run", str(path), "--no-progress"] + [a for s in sets for a in ("--set", s)]
        job = state.jobs.submit(body.recipe, argv, run_dir, root)
        return {"job": job.public(), "run": roots.run_id(run_dir)}

    @app.get("/api/jobs", tags=["new run"], summary="The runs this dashboard started")
    def jobs_route() -> Any:
        jobs = sorted(state.jobs.jobs.values(), key=lambda j: j.created, reverse=True)
        return {"jobs": [j.public() for j in jobs], "max_parallel": state.jobs.max_parallel}

    @app.post("/api/jobs/{job}/stop", tags=["new run"], summary="Stop a run (SIGINT to its process group)")
    def stop_route(job: str) -> Any:
        return {"job": state.jobs.stop(job).public()}

    @app.post("/api/resume", tags=["new run"], summary="Resume an incomplete run from its last checkpoint")
    def resume_route(body: RunRequest) -> Any:
        run_dir = roots.run_dir(body.id)
        if (run_dir / "COMPLETE").exists():
            raise ApiError(409, f"id: run {body.id} is complete; there is nothing to resume", "id")
        earlier = [j for j in state.jobs.jobs.values() if Path(j.run_dir).resolve() == run_dir]
        if earlier:
            last = max(earlier, key=lambda j: j.created)
            argv = [a for a in last.argv if a != "--resume" and a != str(run_dir)]
            recipe = last.recipe
        else:
            from nlptasks.ui.runs import RUN_STATE, read_json

            try:
                recorded = (read_json(run_dir / RUN_STATE) or {}).get("recipe_path")
            except ValueError as exc:
                raise ApiError(409, f"id: {exc}", "id") from None
            source = Path(recorded) if recorded and Path(recorded).is_file() else run_dir / "recipe.toml"
            argv, recipe = ["run", str(source), "--no-progress"], f"run/{body.id}"
        argv += ["--resume", str(run_dir)]
        job = state.jobs.submit(recipe, argv, run_dir, roots.runs[int(body.id.split("/")[0])], resume=True)
        return {"job": job.public(), "run": body.id}

    @app.get("/api/try", tags=["try"], summary="A complete run's input fields (nothing loads)")
    def try_info_route(id: Annotated[str, Query()]) -> Any:
        from nlptasks.serve.page import describe
        from nlptasks.serve.state import ServedModel
        from nlptasks.ui.runs import MANIFEST, read_json

        run_dir = roots.run_dir(id)
        if not (run_dir / "COMPLETE").exists():
            raise ApiError(409, f"id: run {id} is not complete: only complete runs can be tried", "id")
        try:
            manifest = read_json(run_dir / MANIFEST) or {}
        except ValueError as exc:
            raise ApiError(409, f"id: {exc}", "id") from None
        served = ServedModel(name=id, run_dir=run_dir, manifest=manifest, predictor=None)
        return {**describe(served), "loaded": id in state.pool.loaded}

    @app.post("/api/try", tags=["try"], summary="Predict with a complete run (loaded on demand)")
    async def try_route(body: TryRequest) -> Any:
        run_dir = roots.run_dir(body.id)
        return {"outputs": await state.pool.predict(body.id, run_dir, list(body.inputs)), **state.pool.describe()}

    @app.get("/api/models", tags=["try"], summary="The loaded runs and the bound on them")
    def models_route() -> Any:
        return state.pool.describe()

    @app.post("/api/models/unload", tags=["try"], summary="Unload a run")
    def unload_route(body: RunRequest) -> Any:
        return {"unloaded": state.pool.unload(body.id), **state.pool.describe()}

    @app.get("/api/studies", tags=["studies"], summary="nlptasks tune studies under the runs folders")
    def studies_route() -> Any:
        return {"studies": list_studies(roots)}

    @app.get("/api/study", tags=["studies"], summary="A study's trials, values and best recipe")
    def study_route(id: Annotated[str, Query(description="K/TASK/tune-NAME")]) -> Any:
        return study_detail(roots, id)


def _value(overrides: list[str], key: str) -> str | None:
    """The value an override list gives ``key`` (the last one), as text without quotes."""
    found = None
    for item in overrides:
        k, _, v = item.partition("=")
        if k == key:
            found = v.strip().strip("\"'")
    return found
