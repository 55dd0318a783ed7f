"""Runs started from the page: a queue of ``python -m nlptasks run RECIPE --set ...`` processes.

Each job is one process in a session of its own (so a stop reaches its children), its stdout and
stderr in ``<runs folder>/.nlptasks-ui/jobs/<id>.log`` and its record beside it in ``<id>.json``
(what it ran, its state, exit code and error), so a dashboard started again knows how its runs
ended.  At most ``max_parallel`` jobs train at once (``--max-parallel``, default 1); the others
wait in order.  A stop sends SIGINT to the process group (the run ends as Ctrl-C ends it, its
checkpoints kept), then SIGTERM after :data:`STOP_GRACE_S`, then SIGKILL.  A resume is a new job:
the same command with ``--resume RUN_DIR``.
"""

from __future__ import annotations

import datetime as _dt
import itertools
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from nlptasks.serve.errors import ApiError

__all__ = ["JOBS_DIR", "STOP_GRACE_S", "Job", "Jobs", "new_run_name"]

JOBS_DIR = ".nlptasks-ui/jobs"
"""Where a runs folder keeps the dashboard's job records and logs."""
STOP_GRACE_S = 15.0
"""Seconds a stopped run has to end after SIGINT before SIGTERM (and as long again before SIGKILL)."""
_POLL_S = 0.25
_ERROR = re.compile(r"^error: (.*)$")


@dataclass
class Job:
    """One run the dashboard started (or queued)."""

    id: str
    recipe: str
    argv: list[str]
    run_dir: str
    root: str
    command: str
    state: str = "queued"
    resume: bool = False
    pid: int | None = None
    created: float = field(default_factory=time.time)
    started: float | None = None
    ended: float | None = None
    exit_code: int | None = None
    error: str | None = None
    stop_requested: bool = False

    @property
    def log(self) -> Path:
        return Path(self.root) / JOBS_DIR / f"{self.id}.log"

    @property
    def record(self) -> Path:
        return Path(self.root) / JOBS_DIR / f"{self.id}.json"

    def public(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if k != "argv"} | {"log": str(self.log)}


def new_run_name(task_dir: Path) -> str:
    """A new run's name as ``nlptasks run`` makes one (the date and time), unused under ``task_dir``."""
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    name, n = stamp, 2
    while (task_dir / name).exists():
        name, n = f"{stamp}-{n}", n + 1
    return name


class Jobs:
    """The dashboard's jobs, the processes it started, and the thread that starts queued jobs and
    records how each ended."""

    def __init__(self, roots: list[Path], max_parallel: int = 1, env: dict[str, str] | None = None) -> None:
        self.max_parallel = max_parallel
        self.env = env
        self.jobs: dict[str, Job] = {}
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self._lock = threading.RLock()
        self._ids = itertools.count(1)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        for root in roots:
            self._load(root)

    # -- records -----------------------------------------------------------------------------------

    def _load(self, root: Path) -> None:
        """The jobs a dashboard on ``root`` recorded before; one left ``running`` or ``queued`` by a
        dashboard that stopped is ``failed`` unless its process still lives."""
        for path in sorted((root / JOBS_DIR).glob("*.json")):
            try:
                job = Job(**json.loads(path.read_text(encoding="utf-8")))
            except (OSError, ValueError, TypeError):
                continue
            if job.state in ("queued", "running") and not (job.pid and _alive(job.pid)):
                job.state, job.error = (
                    "failed",
                    job.error or "the dashboard stopped while this run was waiting or training",
                )
            self.jobs[job.id] = job

    def _save(self, job: Job) -> None:
        job.record.parent.mkdir(parents=True, exist_ok=True)
        tmp = job.record.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(job), ensure_ascii=False, indent=1), encoding="utf-8")
        os.replace(tmp, job.record)

    def by_run_dir(self) -> dict[Path, dict[str, Any]]:
        """The newest job of each run folder (what the runs list shows as its status)."""
        with self._lock:
            out: dict[Path, dict[str, Any]] = {}
            for job in sorted(self.jobs.values(), key=lambda j: j.created):
                out[Path(job.run_dir).resolve()] = job.public()
            return out

    def logs_of(self, run_dir: Path) -> list[Path]:
        """The logs of every job of ``run_dir``, oldest first."""
        with self._lock:
            jobs = sorted(
                (j for j in self.jobs.values() if Path(j.run_dir).resolve() == run_dir), key=lambda j: j.created
            )
            return [j.log for j in jobs if j.log.exists()]

    def get(self, job_id: str) -> Job:
        with self._lock:
            job = self.jobs.get(job_id)
        if job is None:
            raise ApiError(404, f"job: no job {job_id!r} (GET /api/jobs lists them)", "job")
        return job

    # -- the queue ---------------------------------------------------------------------------------

    def submit(self, recipe: str, argv: list[str], run_dir: Path, root: Path, resume: bool = False) -> Job:
        """Queue ``nlptasks ARGV`` for ``run_dir``; it starts when fewer than ``max_parallel`` run."""
        import shlex

        with self._lock:
            busy = [j for j in self.jobs.values() if j.run_dir == str(run_dir) and j.state in ("queued", "running")]
            if busy:
                raise ApiError(409, f"run {run_dir.name}: job {busy[0].id} is already {busy[0].state} for it", "id")
            stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
            job = Job(
                id=f"{stamp}-{next(self._ids)}",
                recipe=recipe,
                argv=argv,
                run_dir=str(run_dir),
                root=str(root),
                command=shlex.join(["nlptasks", *argv]),
                resume=resume,
            )
            self.jobs[job.id] = job
            self._save(job)
            self._pump()
        return job

    def _pump(self) -> None:
        with self._lock:
            running = sum(1 for j in self.jobs.values() if j.state == "running")
            for job in sorted(self.jobs.values(), key=lambda j: j.created):
                if running >= self.max_parallel:
                    break
                if job.state == "queued" and job.id not in self._procs:
                    self._start(job)
                    running += 1

    def _start(self, job: Job) -> None:
        job.log.parent.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ if self.env is None else self.env)
        env.setdefault("PYTHONUNBUFFERED", "1")
        with job.log.open("ab") as log:
            try:
                proc = subprocess.Popen(
                    [sys.executable, "-m", "nlptasks", *job.argv],
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    env=env,
                )
            except OSError as exc:
                job.state, job.error, job.ended = "failed", f"could not start {sys.executable}: {exc}", time.time()
                self._save(job)
                return
        self._procs[job.id] = proc
        job.state, job.pid, job.started = "running", proc.pid, time.time()
        self._save(job)

    def stop(self, job_id: str) -> Job:
        """Stop a job: a queued one leaves the queue; a running one gets SIGINT (then SIGTERM, SIGKILL)."""
        job = self.get(job_id)
        with self._lock:
            if job.state == "queued":
                job.state, job.ended, job.stop_requested = "stopped", time.time(), True
                self._save(job)
                return job
            if job.state != "running":
                raise ApiError(409, f"job {job_id}: it is {job.state}, not running or queued", "job")
            job.stop_requested = True
            self._save(job)
            proc = self._procs.get(job.id)
        if proc is not None:
            threading.Thread(target=_stop_process, args=(proc,), daemon=True).start()
        elif job.pid and _alive(job.pid):  # a job of an earlier dashboard whose process lives on
            _signal_group(job.pid, signal.SIGINT)
        return job

    def reap(self) -> None:
        """Record every job whose process ended, then start queued ones."""
        with self._lock:
            for job_id, proc in list(self._procs.items()):
                code = proc.poll()
                if code is None:
                    continue
                del self._procs[job_id]
                job = self.jobs[job_id]
                job.exit_code, job.ended = code, time.time()
                if code == 0:
                    job.state = "complete"
                elif job.stop_requested:
                    job.state = "stopped"
                else:
                    job.state, job.error = "failed", _error_of(job.log, code)
                self._save(job)
            for job in self.jobs.values():  # a job of an earlier dashboard whose process ended since
                if job.state == "running" and job.id not in self._procs and not (job.pid and _alive(job.pid)):
                    job.state, job.ended = ("stopped" if job.stop_requested else "failed"), time.time()
                    job.error = None if job.stop_requested else _error_of(job.log, None)
                    self._save(job)
            self._pump()

    def start(self) -> None:
        """Start the thread that reaps and starts jobs."""

        def loop() -> None:
            while not self._stop.wait(_POLL_S):
                self.reap()

        self._thread = threading.Thread(target=loop, name="nlptasks-ui-jobs", daemon=True)
        self._thread.start()

    def close(self, wait_s: float = STOP_GRACE_S) -> None:
        """Stop the thread, and every running job (SIGINT, then harder): a run is never left
        training without a dashboard that watches it; its checkpoints let Resume continue it."""
        self._stop.set()
        with self._lock:
            procs = list(self._procs.items())
            for job_id, _ in procs:
                self.jobs[job_id].stop_requested = True
        threads = [threading.Thread(target=_stop_process, args=(p, wait_s), daemon=True) for _, p in procs]
        for t in threads:
            t.start()
        for t in threads:
            t.join(3 * wait_s)
        self.reap()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)  # the job's session: its process group id is its pid
    except (ProcessLookupError, PermissionError):
        pass


def _stop_process(proc: subprocess.Popen[bytes], grace_s: float = STOP_GRACE_S) -> None:
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGKILL):
        _signal_group(proc.pid, sig)
        try:
            proc.wait(grace_s)
            return
        except subprocess.TimeoutExpired:
            continue


def _error_of(log: Path, code: int | None) -> str:
    """The ``error: ...`` lines a failed run printed last (its message and hint), else its last line."""
    try:
        lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        lines = []
    for i in range(len(lines) - 1, -1, -1):
        if _ERROR.match(lines[i]):
            return " ".join(line.strip() for line in lines[i:])[6:].strip()[:2000]
    last = next((line for line in reversed(lines) if line.strip()), "")
    ended = f"exit status {code}" if code is not None else "its process ended"
    if code is not None and code < 0:
        ended = f"killed by {signal.Signals(-code).name}"
    return f"{ended}; last line of its log: {last[:500]}" if last else ended
