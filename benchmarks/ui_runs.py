"""``nlptasks ui``: the runs list for 1,000 run folders, and what the live curve costs a training run.

1. **Runs list.**  1,000 run folders made by copying a tiny complete run's small files (manifest,
   metrics, run state, card, log history, recipe, COMPLETE; no weights) under one runs folder;
   ``GET /api/runs`` through the real app on uvicorn (median of ``--repeat`` requests, after one
   untimed), then the page in Debian's chromium (when installed): from opening ``/#runs`` to the
   table holding 1,000 rows (median).  Goal: under 1 s.
2. **Live curve.**  The same tiny run (``--steps`` optimizer steps, a log line every step) started
   through the dashboard's API ``--pairs`` times without and with its run page open in chromium
   (which asks for the curve every two seconds and redraws it when points were added), alternating; the training runtime
   (metrics.json ``train.runtime``) of each, and the CPU the dashboard's process and the browser
   spent while the page watched, as a share of one core.  Goal: under 1% of the run's speed.

    python benchmarks/ui_runs.py --docs
    python benchmarks/ui_runs.py --runs 100 --pairs 1 --steps 300 --docs-file /tmp/benchmarks.md --docs   # smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _docs  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SMALL_FILES = (
    "COMPLETE",
    "nlptasks.json",
    "metrics.json",
    "nlptasks-run.json",
    "README.md",
    "log_history.json",
    "recipe.toml",
)
TINY = {
    "model.scratch.layers": "1",
    "model.scratch.hidden": "32",
    "model.scratch.heads": "2",
    "model.scratch.intermediate": "64",
    "model.max_length": "64",
    "data.max_eval_rows": "8",
    "train.batch_size": "8",
    "train.logging_steps": "1",
    "train.eval_strategy": "no",
}


def serve(app):
    """``app`` on uvicorn in a thread; the base URL and the server."""
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True).start()
    while not server.started:
        time.sleep(0.05)
    return f"http://127.0.0.1:{sock.getsockname()[1]}", server


def tiny_run(folder: Path) -> Path:
    """A tiny complete cls run (its small files are what the copies hold)."""
    sets = [f"{k}={v}" for k, v in TINY.items()] + ["data.max_train_rows=64", "train.epochs=1"]
    cmd = [sys.executable, "-m", "nlptasks", "run", str(ROOT / "recipes" / "cls.toml"), "--no-progress"]
    cmd += [a for s in [*sets, f"output.dir={folder}", "output.run_name=source"] for a in ("--set", s)]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return folder / "cls" / "source"


def runs_list(work: Path, count: int, repeat: int) -> list[str]:
    import httpx

    from nlptasks.ui.app import create_app
    from nlptasks.ui.state import UiState

    source = tiny_run(work / "source")
    root = work / "many"
    for i in range(count):
        target = root / ("cls", "ner", "pair")[i % 3] / f"run-{i:04d}"
        target.mkdir(parents=True)
        for name in SMALL_FILES:
            shutil.copy2(source / name, target / name)
    url, server = serve(create_app(UiState.of([root], [])))
    client = httpx.Client(timeout=60)  # one client, as a browser keeps its connection
    client.get(url + "/api/runs")
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        body = client.get(url + "/api/runs").json()
        times.append(time.perf_counter() - start)
    assert len(body["runs"]) == count, len(body["runs"])
    rows = [
        f"| `GET /api/runs` ({count} runs, {len(json.dumps(body)) / 1e6:.1f} MB of JSON) | {statistics.median(times):.3f} | {min(times):.3f} | < 1 | {'yes' if statistics.median(times) < 1 else 'no'} |"
    ]
    page = page_times(url, count, repeat)
    if page:
        rows.append(
            f"| the page: open `/#runs` to {count} rows in the table (chromium) | {statistics.median(page):.3f} | {min(page):.3f} | < 1 | {'yes' if statistics.median(page) < 1 else 'no'} |"
        )
    else:
        rows.append("| the page (chromium) | - | - | < 1 | not measured: /usr/bin/chromium or chromedriver missing |")
    server.should_exit = True
    return rows


def page_times(url: str, count: int, repeat: int) -> list[float]:
    driver = browser()
    if driver is None:
        return []
    times = []
    try:
        for i in range(repeat + 1):
            driver.get("about:blank")
            start = time.perf_counter()
            driver.get(url + "/#runs")
            while driver.execute_script("return document.querySelectorAll('#runs-table tbody tr').length") < count:
                time.sleep(0.005)
            if i:  # the first warms the browser's cache
                times.append(time.perf_counter() - start)
    finally:
        driver.quit()
    return times


def _ticks(pid: int) -> int:
    """CPU clock ticks of ``pid`` and its live descendants (user + system)."""
    children: dict[int, list[int]] = {}
    ticks: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2 :].split()
            children.setdefault(int(fields[1]), []).append(int(entry.name))
            ticks[int(entry.name)] = int(fields[11]) + int(fields[12])
    total, todo = 0, [pid]
    while todo:
        current = todo.pop()
        total += ticks.get(current, 0)
        todo += children.get(current, [])
    return total


def live_cost(work: Path, pairs: int, steps: int) -> tuple[list[str], str]:
    import httpx

    from nlptasks.ui.app import create_app
    from nlptasks.ui.state import UiState

    root = work / "live"
    url, server = serve(create_app(UiState.of([root], [ROOT / "recipes"])))
    client = httpx.Client(timeout=600)  # one client, as a browser keeps its connection
    driver = browser()
    hz = os.sysconf("SC_CLK_TCK")
    overrides = {**TINY, "data.max_train_rows": "640", "train.max_steps": str(steps)}
    runtimes: dict[bool, list[float]] = {False: [], True: []}
    cpu_share: dict[str, list[float]] = {"dashboard": [], "browser": []}
    try:
        for i in range(2 * pairs):
            watched = i % 2 == 1 and driver is not None
            job = client.post(url + "/api/jobs", json={"recipe": "r0/cls.toml", "overrides": overrides}).json()
            run_id, run_dir = job["run"], Path(job["job"]["run_dir"])
            driver.get(url + ("/#run/" + run_id if watched else "/#studies")) if driver else None
            start, cpu = time.monotonic(), time.process_time()
            browser_ticks = _ticks(driver.service.process.pid) if driver else 0
            while True:
                states = {j["id"]: j["state"] for j in client.get(url + "/api/jobs").json()["jobs"]}
                if states[job["job"]["id"]] not in ("queued", "running"):
                    break
                time.sleep(1.0)
            if watched:
                wall = time.monotonic() - start
                cpu_share["dashboard"].append((time.process_time() - cpu) / wall)
                cpu_share["browser"].append((_ticks(driver.service.process.pid) - browser_ticks) / hz / wall)
            assert states[job["job"]["id"]] == "complete", job["job"]["log"]
            metrics = json.loads((run_dir / "metrics.json").read_text(encoding="utf-8"))
            runtimes[watched].append(metrics["train"]["runtime"])
            print(
                f"  run {i + 1}: {'page open' if watched else 'no page '} train runtime {runtimes[watched][-1]:.2f} s",
                flush=True,
            )
    finally:
        if driver:
            driver.quit()
        server.should_exit = True
    alone = statistics.median(runtimes[False])
    watched = statistics.median(runtimes[True]) if runtimes[True] else float("nan")
    change = 100 * (watched - alone) / alone
    share = {k: 100 * statistics.median(v) if v else float("nan") for k, v in cpu_share.items()}
    rows = [
        f"| training runtime, no page open | {alone:.2f} s | {', '.join(f'{t:.2f}' for t in runtimes[False])} |",
        f"| training runtime, its run page open in chromium (polls every 2 s, redraws on new points) | {watched:.2f} s | "
        f"{', '.join(f'{t:.2f}' for t in runtimes[True])} |",
        f"| change | {change:+.1f}% | goal: under 1% |",
        f"| CPU of the dashboard's process while the page watched (requests, log reading, JSON) | {share['dashboard']:.2f}% of a core | |",
        f"| CPU of the browser while it watched (its polls, the chart redrawn) | {share['browser']:.2f}% of a core | |",
    ]
    return rows, f"{2 * pairs} runs of {steps} steps, one log line a step, alternating"


def browser():
    if not (Path("/usr/bin/chromium").exists() and Path("/usr/bin/chromedriver").exists()):
        return None
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    os.environ["SE_OFFLINE"] = "true"
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"):
        options.add_argument(arg)
    return webdriver.Chrome(service=Service(executable_path="/usr/bin/chromedriver"), options=options)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=1000, help="run folders in the list (default: 1000)")
    p.add_argument("--repeat", type=int, default=5, help="timed requests and page loads (default: 5)")
    p.add_argument("--pairs", type=int, default=2, help="runs without and with polling, each (default: 2)")
    p.add_argument("--steps", type=int, default=3000, help="optimizer steps of each live-curve run (default: 3000)")
    p.add_argument("--work", type=Path, help="work folder (default: a new temporary one)")
    _docs.add_arguments(p)
    args = p.parse_args()
    info = _docs.start(__file__)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    work = (args.work or Path(tempfile.mkdtemp(prefix="ui-runs-"))).resolve()
    listing = runs_list(work, args.runs, args.repeat)
    live, how = live_cost(work, args.pairs, args.steps)
    table = "\n".join(
        [
            "| runs list | median s | fastest s | goal s | met |",
            "|---|---:|---:|---:|---|",
            *listing,
            "",
            f"| live curve ({how}) | median | each |",
            "|---|---:|---|",
            *live,
        ]
    )
    _docs.publish(
        args, _docs.block_name(__file__), info, table, "The dashboard, the runs and the browser on this one machine."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
