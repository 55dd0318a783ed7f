"""The backend table of step 10: every run folder is loaded through one :class:`~nlptasks.types.Backend`,
chosen here from the load's options and the folder.

Built in: ``torch`` (the run's transformers weights) and ``onnx`` (an ``nlptasks export --onnx``
folder, through ONNX Runtime).  Plugins add backends with the ``register_backends`` hook; the
table is the built-ins plus the host's.  ``LoadOptions(backend="auto")`` picks the backend that
owns the folder (its own export), else ``torch``; a named backend loads the folder if it can, and
refuses, with what to use instead, a folder another backend owns or options it cannot honour.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nlptasks.errors import NlptasksError, did_you_mean
from nlptasks.host import Host, get_host
from nlptasks.inference.onnx_backend import ONNX
from nlptasks.inference.torch_backend import TORCH
from nlptasks.types import Backend, LoadOptions

__all__ = ["BUILTIN", "backend_for", "backend_names", "backend_table", "check_backend"]

BUILTIN: dict[str, Backend] = {TORCH.name: TORCH, ONNX.name: ONNX}
"""The backends that ship with nlptasks."""


def backend_table(host: Host | None = None) -> dict[str, Backend]:
    """Name → backend: the built-ins, then those the plugins of ``host`` (default: the process's) registered."""
    table = dict(BUILTIN)
    for name, backend in (host or get_host()).backends.items():
        if name in BUILTIN:
            raise NlptasksError(
                f"plugin {backend.plugin!r} registers backend {name!r}, a built-in name",
                hint=f"Block it: NLPTASKS_BLOCK_PLUGINS={backend.plugin}",
            )
        table[name] = backend
    return table


def backend_names(host: Host | None = None) -> list[str]:
    """``auto`` and every backend's name, for help texts and errors."""
    return ["auto", *backend_table(host)]


def check_backend(name: str, host: Host | None = None) -> None:
    """An unknown backend name is an error listing the known ones (before anything is loaded)."""
    table = backend_table(host)
    if name != "auto" and name not in table:
        raise NlptasksError(
            f"--backend {name}: no such backend{did_you_mean(name, table)}; backends: {', '.join(['auto', *table])}",
            hint="A plugin adds one with the register_backends hook; `nlptasks plugins` lists them.",
        )


def backend_for(run_dir: Path, manifest: Mapping[str, Any], options: LoadOptions, host: Host | None = None) -> Backend:
    """The backend that loads ``run_dir`` with ``options``: ``auto`` is the backend owning the folder,
    else torch; a named one must not meet a folder another backend owns, and must not refuse it."""
    check_backend(options.backend, host)
    table = backend_table(host)
    owners = [b for b in table.values() if b.owns_folder(run_dir, manifest)]
    if options.backend == "auto":
        backend = owners[0] if owners else table["torch"]
    else:
        backend = table[options.backend]
        other = next((b for b in owners if b is not backend), None)
        if other is not None:
            source = (
                (manifest.get(other.name) or {}).get("exported_from")
                if isinstance(manifest.get(other.name), dict)
                else None
            )
            raise NlptasksError(
                f"--backend {backend.name}: {run_dir} is an export of the {other.name} backend; it holds no "
                f"{backend.name} weights",
                hint=(
                    f"Use the run it came from: nlptasks infer --model {source}   (or leave out --backend)"
                    if source
                    else "Leave out --backend (auto picks the folder's own backend)."
                ),
            )
    reason = backend.refusal(run_dir, manifest, options)
    if reason:
        raise NlptasksError(f"--backend {backend.name}: {reason}")
    return backend
