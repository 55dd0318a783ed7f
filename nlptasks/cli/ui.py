"""``nlptasks ui``: a web dashboard for the runs under some folders (FastAPI on uvicorn)."""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path
from typing import Any

from nlptasks.cli._common import finite_float, int_in, positive_int

__all__ = ["cmd", "register"]

API_KEY_ENV = "NLPTASKS_API_KEY"


def register(sub: Any) -> None:
    """Add the command's parser to ``sub`` (the subparsers of ``nlptasks``)."""
    p = sub.add_parser(
        "ui",
        help="a web dashboard: list, compare and watch runs; start, stop and resume them; try them",
        description="Serve a page (FastAPI on uvicorn) over the runs under the runs folders: the runs list "
        "with status, main metric and speed; a run's card, metrics, curves (live while it trains) and "
        "commands; compare runs; start a run from a recipe's form (validated as `nlptasks validate` "
        "does), stop and resume it; try a complete run; tune studies. Ctrl-C stops it and the runs it "
        'started (resumable from their checkpoints). Needs the serve extra: pip install "nlptasks[serve]". '
        "docs/ui.md describes the page.",
    )
    p.add_argument(
        "--runs",
        dest="runs",
        action="append",
        type=Path,
        metavar="DIR",
        help="a runs folder (holding <task>/<run>/), repeatable; runs started from the page go to the first "
        "(default: ./runs)",
    )
    p.add_argument(
        "--recipes",
        dest="recipes",
        action="append",
        type=Path,
        metavar="DIR",
        help="a folder of recipes the page offers, repeatable (default: ./recipes, where it exists)",
    )
    p.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default: 127.0.0.1, this machine only; 0.0.0.0 for every interface)",
    )
    p.add_argument("--port", type=int_in(0, 65535), default=8500, help="port (default: 8500)")
    p.add_argument(
        "--api-key",
        default=os.environ.get(API_KEY_ENV) or None,
        metavar="KEY",
        help=f"require 'Authorization: Bearer KEY' on every /api route: reading runs, starting, stopping, "
        f"loading (the page asks for it) (default: ${API_KEY_ENV}, else no key)",
    )
    p.add_argument(
        "--max-parallel",
        type=positive_int,
        default=1,
        metavar="N",
        help="runs started from the page that train at once; the others wait in a queue (default: 1)",
    )
    p.add_argument(
        "--max-loaded",
        type=positive_int,
        default=2,
        metavar="N",
        help="complete runs loaded at once to try them; loading one more unloads the one used longest ago (default: 2)",
    )
    p.add_argument(
        "--unload-after",
        type=finite_float(above=0),
        default=300.0,
        metavar="S",
        help="unload a tried run after S seconds unused (default: 300)",
    )
    p.add_argument(
        "--allow-remote-code",
        action="store_true",
        help="let the page start runs with model.trust_remote_code or model.allow_pickle on (both run code "
        "that is not in this machine's files; refused by default)",
    )
    p.add_argument("--no-access-log", dest="access_log", action="store_false", help="do not log one line per request")
    p.set_defaults(func=cmd)


def cmd(args: argparse.Namespace) -> int:
    from nlptasks.errors import NlptasksError

    try:
        import fastapi  # noqa: F401
        import uvicorn
    except ImportError as exc:
        raise NlptasksError(
            f"nlptasks ui needs FastAPI and uvicorn ({exc})", hint='Install them: pip install "nlptasks[serve]"'
        ) from None
    from nlptasks.ui.app import create_app
    from nlptasks.ui.state import UiSettings, UiState

    runs = args.runs or [Path("runs")]
    missing = [str(p) for p in runs if p.exists() and not p.is_dir()]
    if missing:
        raise NlptasksError(f"--runs {missing[0]}: a file, not a folder", hint="Give folders that hold <task>/<run>/.")
    for folder in runs:
        if not folder.exists():
            print(f"note: {folder} does not exist yet: runs started from the page will create it", file=sys.stderr)
    recipes = args.recipes if args.recipes is not None else [p for p in [Path("recipes")] if p.is_dir()]
    for folder in recipes:
        if not folder.is_dir():
            raise NlptasksError(
                f"--recipes {folder}: no such folder", hint="Give folders that hold recipe .toml files."
            )
    settings = UiSettings(
        api_key=args.api_key,
        allow_remote_code=args.allow_remote_code,
        max_parallel=args.max_parallel,
        max_loaded=args.max_loaded,
        unload_after_s=args.unload_after,
    )
    state = UiState.of(runs, recipes, settings)
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(state),
            host=args.host,
            port=args.port,
            access_log=args.access_log,
            log_level="warning" if args.quiet else "info",
        )
    )
    host = args.host if args.host not in ("0.0.0.0", "::") else "127.0.0.1"
    print(f"runs:    {', '.join(str(r) for r in state.roots.runs)}", file=sys.stderr)
    print(f"page:    http://{'[' + host + ']' if ':' in host else host}:{args.port}/", file=sys.stderr)
    if args.host not in ("127.0.0.1", "localhost", "::1") and not args.api_key:
        print(
            f"warning: listening on {args.host} without --api-key: anyone who can reach this machine can read "
            "the runs, start runs and load models",
            file=sys.stderr,
        )
    stopped_by: list[int] = []
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    for sig in before:  # uvicorn raises the signal again once it has stopped: it only ends our wait here
        signal.signal(sig, lambda number, frame: stopped_by.append(number))
    try:
        server.run()
    except SystemExit:  # uvicorn's way of saying it could not bind the port
        if server.started:
            raise
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)
    if not server.started:
        raise NlptasksError(
            f"the dashboard could not start on {args.host}:{args.port} (see the lines above)",
            hint="Is the port taken? Choose another: --port N",
        )
    how = f" ({signal.Signals(stopped_by[0]).name})" if stopped_by else ""
    print(f"dashboard stopped{how}", file=sys.stderr)
    return 0
