"""``nlptasks serve RUN [RUN ...]``: trained runs behind an HTTP server (FastAPI on uvicorn)."""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import sys
from pathlib import Path
from typing import Any

from nlptasks.cli._common import add_load_arguments, display, finite_float, int_in, load_options, positive_int

__all__ = ["cmd", "register"]

API_KEY_ENV = "NLPTASKS_API_KEY"


def register(sub: Any) -> None:
    """Add the command's parser to ``sub`` (the subparsers of ``nlptasks``)."""
    p = sub.add_parser(
        "serve",
        help="serve trained runs over HTTP: predict, OpenAI-compatible chat, a page",
        description="Serve trained runs over HTTP (FastAPI on uvicorn): POST /v1/predict/NAME "
        "answers what `nlptasks infer` prints, with concurrent requests batched together; "
        "OpenAI-compatible /v1/chat/completions for runs that generate; a page to try the "
        "models at /; /health, /metrics (Prometheus) and the OpenAPI page at /docs. "
        "Ctrl-C stops it after answering the requests in flight. Needs the serve extra: "
        'pip install "nlptasks[serve]".',
    )
    p.add_argument("runs", nargs="+", type=Path, metavar="RUN", help="run folders to serve")
    p.add_argument(
        "--name",
        dest="names",
        action="append",
        metavar="NAME",
        help="the name of a run in URLs (/v1/predict/NAME), once per run, in order (default: the run folder's name)",
    )
    p.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default: 127.0.0.1, this machine only; 0.0.0.0 for every interface)",
    )
    p.add_argument("--port", type=int_in(0, 65535), default=8000, help="port (default: 8000)")
    p.add_argument(
        "--api-key",
        default=os.environ.get(API_KEY_ENV) or None,
        metavar="KEY",
        help=f"require 'Authorization: Bearer KEY' on every route but /health and the page "
        f"(default: ${API_KEY_ENV}, else no key)",
    )
    g = p.add_argument_group("batching and limits")
    g.add_argument(
        "--max-batch-size",
        type=positive_int,
        default=32,
        metavar="N",
        help="most inputs per forward pass when requests are batched together (default: 32)",
    )
    g.add_argument(
        "--max-wait-ms",
        type=finite_float(0),
        default=5.0,
        metavar="MS",
        help="how long a batch waits for more requests after its first (default: 5)",
    )
    g.add_argument(
        "--max-queue",
        type=positive_int,
        default=256,
        metavar="N",
        help="most inputs waiting per model; beyond, requests get 503 with Retry-After (default: 256)",
    )
    g.add_argument(
        "--max-inputs", type=positive_int, default=256, metavar="N", help="most inputs in one request (default: 256)"
    )
    g.add_argument(
        "--max-body-bytes",
        type=positive_int,
        default=1_000_000,
        metavar="N",
        help="largest request body; beyond, 413 (default: 1000000)",
    )
    g.add_argument(
        "--timeout",
        type=finite_float(above=0),
        default=60.0,
        metavar="S",
        help="seconds a request may wait for its answer before 504; also the grace period for requests "
        "in flight when the server stops (default: 60)",
    )
    g.add_argument(
        "--body-timeout",
        type=finite_float(above=0),
        default=10.0,
        metavar="S",
        help="seconds a request body may pause before it is complete; beyond, 408 and the connection "
        "closes (a Content-Length larger than the body, a chunked body cut off) (default: 10)",
    )
    m = p.add_argument_group("models")
    add_load_arguments(m, "precision", "backend", "device", "adapter", "threshold")
    m.add_argument(
        "--threads",
        type=positive_int,
        metavar="N",
        help="intra-op threads of each server process, torch's and ONNX Runtime's (default: torch's "
        "own; with --workers N, the machine's cores divided by N)",
    )
    m.add_argument(
        "--workers",
        type=_workers,
        default="auto",
        metavar="N|auto",
        help="server processes sharing the port, each with its own copy of the models, batching and "
        "/metrics, 1 to 64; auto (the default): one per CPU core (at most 4) when every run answers with "
        "an ONNX export and --threads is not given, else 1",
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
            f"nlptasks serve needs FastAPI and uvicorn ({exc})", hint='Install them: pip install "nlptasks[serve]"'
        ) from None

    from transformers.utils import logging as hf_logging

    from nlptasks.serve.app import create_app
    from nlptasks.serve.factory import CONFIG_ENV, config_for_workers, use_threads
    from nlptasks.serve.models import check_models, load_models
    from nlptasks.serve.state import ServerState, ServeSettings

    hf_logging.disable_progress_bar()
    if args.workers == "auto":
        from nlptasks.serve.processes import auto_workers

        args.workers, why = auto_workers(args.runs, load_options(args, batch_size=args.max_batch_size), args.threads)
        print(f"workers: {args.workers} ({why}; --workers N to choose)", file=sys.stderr)
    if args.workers > 1 and args.threads is None:
        from nlptasks.serve.processes import usable_cores

        args.threads = max(1, usable_cores() // args.workers)
    use_threads(args.threads)
    options = load_options(args, batch_size=args.max_batch_size)
    settings = ServeSettings(
        max_batch_size=args.max_batch_size,
        max_wait_ms=args.max_wait_ms,
        max_queue=args.max_queue,
        max_body_bytes=args.max_body_bytes,
        max_inputs=args.max_inputs,
        timeout_s=args.timeout,
        body_timeout_s=args.body_timeout,
        api_key=args.api_key,
    )
    server_options = {
        "host": args.host,
        "port": args.port,
        "access_log": args.access_log,
        "log_level": "warning" if args.quiet else "info",
        "timeout_graceful_shutdown": max(1, int(args.timeout + 0.999)),
    }
    if args.workers > 1:  # checked here, before any worker starts; each worker loads its own copy
        names, manifests = check_models(args.runs, args.names, options)
        _print_banner(args, names, [Path(r) for r in args.runs], manifests)
        os.environ[CONFIG_ENV] = config_for_workers(args.runs, args.names, options, settings, args.threads)
        return _run_workers(uvicorn, args.workers, server_options)
    models = load_models(args.runs, args.names, options)  # checks all first
    state = ServerState(models=models, settings=settings)
    _print_banner(args, list(models), [m.run_dir for m in models.values()], [m.manifest for m in models.values()])
    config = uvicorn.Config(create_app(state), **server_options)
    server = uvicorn.Server(config)
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
        state.close()
    if not server.started:
        raise NlptasksError(
            f"the server could not start on {args.host}:{args.port} (see the lines above)",
            hint="Is the port taken? Choose another: --port N",
        )
    how = f" ({signal.Signals(stopped_by[0]).name})" if stopped_by else ""
    print(f"server stopped{how}", file=sys.stderr)
    return 0


def _workers(text: str) -> str | int:
    """``--workers``: ``auto`` or a whole number from 1 to 64."""
    if text == "auto":
        return text
    try:
        return int_in(1, 64)(text)
    except argparse.ArgumentTypeError as exc:
        raise argparse.ArgumentTypeError(f"auto, or {exc}") from None


def _run_workers(uvicorn: Any, workers: int, options: dict[str, Any]) -> int:
    """``workers`` processes of :func:`nlptasks.serve.factory.app_from_environment` on one socket,
    supervised by uvicorn (Ctrl-C stops them all after their requests in flight)."""
    from uvicorn.supervisors import Multiprocess

    from nlptasks.errors import NlptasksError

    config = uvicorn.Config("nlptasks.serve.factory:app_from_environment", factory=True, workers=workers, **options)
    try:
        sock = config.bind_socket()
    except SystemExit:
        raise NlptasksError(
            f"the server could not start on {options['host']}:{options['port']} (see the lines above)",
            hint="Is the port taken? Choose another: --port N",
        ) from None
    Multiprocess(config, sockets=[sock]).run()
    print("server stopped", file=sys.stderr)
    return 0


def _print_banner(args: argparse.Namespace, names: list[str], run_dirs: list[Path], manifests: list[Any]) -> None:
    """What is served, the page, the OpenAPI page, and a curl that works."""
    host = args.host if args.host not in ("0.0.0.0", "::") else "127.0.0.1"
    base = f"http://{'[' + host + ']' if ':' in host else host}:{args.port}"
    for name, run_dir, manifest in zip(names, run_dirs, manifests, strict=True):
        print(f"model {name}: {manifest.get('task', '')} run {display(run_dir)}", file=sys.stderr)
    body = json.dumps({"inputs": [_example(manifests[0])]}, ensure_ascii=False)
    auth = f' -H "Authorization: Bearer ${API_KEY_ENV}"' if args.api_key else ""
    print(
        f"page:    {base}/\n"
        f"docs:    {base}/docs\n"
        f"try:     curl -s {base}/v1/predict/{names[0]} -H 'Content-Type: application/json'{auth} "
        f"-d {shlex.quote(body)}",
        file=sys.stderr,
    )
    if args.host not in ("127.0.0.1", "localhost", "::1") and not args.api_key:
        print(
            f"warning: listening on {args.host} without --api-key: anyone who can reach this machine can use "
            "the models",
            file=sys.stderr,
        )


def _example(manifest: dict[str, Any]) -> Any:
    """One input of the run's task, as the task's usage says (a text, or a list of a pair's texts)."""
    try:
        from nlptasks.pipeline import get_host

        example = get_host().task(str(manifest.get("task", ""))).usage_for(manifest).example
    except Exception:  # noqa: BLE001 - any trouble with the task's usage: a plain text
        example = ("your text",)
    return example[0] if len(example) == 1 else list(example)
