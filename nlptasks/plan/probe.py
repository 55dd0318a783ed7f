"""Measured peaks for the ladder: ``nlptasks plan --probe`` and ``nlptasks bench ladder``.

Every rung runs in a fresh process: the real engine (:func:`nlptasks.pipeline.run`) on the
recipe with the rung's overrides and a few steps (``train.max_steps``), into a temporary folder.
A small plugin registered in that process only measures:

- from the start of step 5 (before the model exists) to the end of training: on CUDA the peak of
  ``torch.cuda.max_memory_allocated()``; elsewhere the process's peak resident memory (Linux
  ``VmHWM``, reset through ``/proc/self/clear_refs``) minus the resident memory at that start —
  CPU RSS, which is not GPU memory: it also holds allocator slack and library buffers;
- the wall time of each optimizer step (CUDA synchronised), the first one left out when there are
  more (it allocates the optimizer states and warms up).

The processes are forked from a server that has imported torch and transformers once
(``multiprocessing`` forkserver), so a rung does not pay the import time again.  Inputs are
padded to ``model.max_length`` (``train.padding = "max_length"``): every step has the shape the
estimate assumes, as in the classic experiment.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
import traceback
from typing import Any

from nlptasks.hookspecs import hookimpl

__all__ = ["Meter", "PRELOAD", "PROBE_OVERRIDES", "measure"]

PROBE_OVERRIDES = (
    "train.eval_strategy=no",
    "train.keep_best=false",
    "train.padding=max_length",
    "train.group_by_length=false",
    "train.logging_steps=100000",
    "data.max_eval_rows=8",
    "output.keep_checkpoints=false",
    "optimize.oom_fallback=false",
)
"""Set on every measured rung: no evaluation during training, worst-case (full length) batches, and
no OOM fallback (a rung that does not fit is reported as such, not quietly changed)."""

PRELOAD = ["torch", "transformers", "transformers.trainer", "datasets", "peft", "nlptasks.pipeline"]


def _status_kib(key: str) -> int | None:
    try:
        with open("/proc/self/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


class Meter:
    """The measuring plugin: peak memory from step 5 to the end of training, time per step."""

    def __init__(self) -> None:
        self.cuda = False
        self.base = 0
        self.peak: int | None = None
        self.kind = ""
        self.times: list[float] = []
        self.train_rows: int | None = None
        self._t0 = 0.0

    def start(self) -> None:
        import torch

        self.cuda = torch.cuda.is_available()
        if self.cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            self.base = torch.cuda.memory_allocated()
            self.kind = "cuda max_memory_allocated"
            return
        self.base = (_status_kib("VmRSS") or 0) * 1024
        try:
            with open("/proc/self/clear_refs", "w", encoding="ascii") as fh:
                fh.write("5")  # reset the peak resident size (VmHWM) to the current one
            self.kind = "cpu peak RSS"
        except OSError:
            self.kind = "cpu peak RSS (since process start: could not reset it)"

    def stop(self) -> None:
        if self.peak is not None:
            return
        if self.cuda:
            import torch

            torch.cuda.synchronize()
            self.peak = torch.cuda.max_memory_allocated() - self.base
        else:
            self.peak = (_status_kib("VmHWM") or 0) * 1024 - self.base

    @hookimpl(wrapper=True)
    def nlptasks_build_model(self, ctx: Any) -> Any:
        self.start()
        return (yield)

    @hookimpl(wrapper=True)
    def nlptasks_trainer(
        self, ctx: Any, model: Any, args: Any, data: Any, data_collator: Any, compute_metrics: Any
    ) -> Any:
        from transformers import TrainerCallback

        trainer = yield
        meter = self
        dataset = getattr(trainer, "train_dataset", None)
        self.train_rows = len(dataset) if dataset is not None and hasattr(dataset, "__len__") else None

        class Timing(TrainerCallback):
            def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
                meter._sync()
                meter._t0 = time.perf_counter()

            def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
                meter._sync()
                meter.times.append(time.perf_counter() - meter._t0)

            def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
                meter.stop()

        trainer.add_callback(Timing())
        return trainer

    def _sync(self) -> None:
        if self.cuda:
            import torch

            torch.cuda.synchronize()

    def result(self) -> dict[str, Any]:
        times = self.times[1:] if len(self.times) > 1 else self.times
        return {
            "peak": self.peak,
            "measure": self.kind,
            "steps": len(self.times),
            "seconds_per_step": statistics.mean(times) if times else None,
            "step_seconds": [round(t, 4) for t in self.times],
            "train_rows": self.train_rows,
        }


def _child(path: str, overrides: list[str], conn: Any) -> None:
    """Run one rung in this (fresh) process and send back what :class:`Meter` measured."""
    import logging

    logging.getLogger("nlptasks").setLevel(logging.WARNING)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    result: dict[str, Any]
    try:
        from nlptasks.errors import NlptasksError
        from nlptasks.pipeline import get_host, load_recipe, run

        meter = Meter()
        host = get_host()
        host.pm.register(meter, name="nlptasks-probe")
        try:
            loaded = load_recipe(path, overrides, host=host)
            run(loaded, host=host, progress=False)
            result = meter.result()
        except NlptasksError as exc:
            result = {"error": exc.render().splitlines()[0]}
    except Exception as exc:  # noqa: BLE001 - reported in the table, the other rungs go on
        import torch

        if isinstance(exc, torch.cuda.OutOfMemoryError):
            result = {"error": "out of memory"}
        else:
            lines = str(exc).strip().splitlines()
            result = {
                "error": f"{type(exc).__name__}: {lines[0] if lines else ''}",
                "traceback": traceback.format_exc(),
            }
    conn.send(result)
    conn.close()


_CONTEXT: Any = None


def _context() -> Any:
    global _CONTEXT
    if _CONTEXT is None:
        import multiprocessing as mp

        try:
            _CONTEXT = mp.get_context("forkserver")
            _CONTEXT.set_forkserver_preload(PRELOAD)
        except ValueError:  # no forkserver on this platform
            _CONTEXT = mp.get_context("spawn")
    return _CONTEXT


def measure(path: str, overrides: list[str], steps: int, timeout: float = 600.0) -> dict[str, Any]:
    """Train ``steps`` steps of the recipe with ``overrides`` in a fresh process; what it measured.

    :returns: ``peak`` (bytes), ``measure`` (what the peak is), ``seconds_per_step``, ``steps``;
        or ``error`` (one line).
    """
    ctx = _context()
    with tempfile.TemporaryDirectory(prefix="nlptasks-probe-") as tmp:
        sets = [
            *overrides,
            *PROBE_OVERRIDES,
            f"train.max_steps={steps}",
            f"output.dir={tmp}",
            "output.run_name=probe",
            "output.overwrite=true",
        ]
        receive, send = ctx.Pipe(duplex=False)
        process = ctx.Process(target=_child, args=(str(path), sets, send), daemon=True)
        started = time.perf_counter()
        process.start()
        send.close()
        result: dict[str, Any] | None = None
        if receive.poll(timeout):
            try:
                result = receive.recv()
            except EOFError:
                result = None
        process.join(timeout=30)
        if process.is_alive():
            process.kill()
            process.join()
        if result is None:
            if time.perf_counter() - started >= timeout:
                result = {"error": f"timed out after {timeout:.0f} s"}
            else:
                result = {"error": f"the rung's process died (exit code {process.exitcode})"}
        result["wall_seconds"] = round(time.perf_counter() - started, 1)
        return result
