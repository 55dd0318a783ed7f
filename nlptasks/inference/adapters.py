"""Several adapters on one base: ``nlptasks add-adapter RUN OTHER_RUN --name NAME`` copies another
run's adapter into a run trained on the same base (``nlptasks infer --adapter NAME`` then uses it)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

from nlptasks.engine.io.outputs import atomic_folder, os_errors
from nlptasks.engine.io.rundir import MANIFEST, mark_complete, read_manifest, write_json
from nlptasks.engine.model.peft import ADAPTER_FILES, ADAPTERS_DIR, DEFAULT_ADAPTER, file_sha256
from nlptasks.errors import NlptasksError, Problem

__all__ = ["add_adapter"]

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
_TASK_KEYS_SKIPPED = ("peft", "created", "plugins", "versions", "COMPLETE")


def add_adapter(run_dir: Path, other_dir: Path, name: str) -> dict[str, Any]:
    """Copy ``other_dir``'s adapter into ``run_dir/adapters/NAME`` after checking that both runs
    share their base (same task, task type, model class, labels, base weights or hub model, and
    tokenizer).  Returns the updated manifest."""
    manifest, other = read_manifest(run_dir), read_manifest(other_dir)
    info, other_info = manifest.get("peft"), other.get("peft")
    for path, m in ((run_dir, info), (other_dir, other_info)):
        if not m:
            raise NlptasksError(
                f"{path}: this run trained the whole model, not an adapter",
                hint="Both runs must be trained with a [peft] table on the same base (docs/peft.md).",
            )
    assert info is not None and other_info is not None
    if not _NAME.fullmatch(name) or name == DEFAULT_ADAPTER:
        raise NlptasksError(
            f"--name {name!r}: use letters, digits, '_', '.' or '-' (not {DEFAULT_ADAPTER!r}, the run's own adapter)"
        )
    if name in info["adapters"]:
        raise NlptasksError(f"--name {name}: run {run_dir} already has an adapter {name!r}; pick another name")
    mismatches = []
    for label, a, b in (
        ("task", manifest.get("task"), other.get("task")),
        ("peft task type", info.get("task_type"), other_info.get("task_type")),
        ("model class", manifest.get("model_class"), other.get("model_class")),
        ("labels", manifest.get("labels"), other.get("labels")),
        ("base", _base_identity(info["base"]), _base_identity(other_info["base"])),
        ("tokenizer", _tokenizer_identity(run_dir), _tokenizer_identity(other_dir)),
    ):
        if a != b:
            mismatches.append(f"{label}: {a!r} here, {b!r} in {other_dir}")
    if mismatches:
        raise NlptasksError(
            f"{other_dir}: its adapter was not trained on the base of {run_dir}",
            [Problem("", m) for m in mismatches],
            hint="Train the other adapter with the same recipe sections [data], [model] and seed (only [peft] "
            "and [train] may differ), then add it.",
        )
    source = other_dir / other_info["adapters"][DEFAULT_ADAPTER]["path"]
    target = run_dir / ADAPTERS_DIR / name
    with atomic_folder(target, "--name", {"OTHER_RUN": other_dir}) as work:  # in place once every file is copied
        for file in ADAPTER_FILES:
            if (source / file).exists():
                shutil.copy2(source / file, work / file)
    task_settings = {k: v for k, v in other.items() if k not in _TASK_KEYS_SKIPPED}
    info["adapters"][name] = {
        "path": f"{ADAPTERS_DIR}/{name}",
        "method": other_info["method"],
        "from": str(other_dir.resolve()),
        "manifest": task_settings,
    }
    with os_errors(run_dir, "RUN"):
        write_json(run_dir / MANIFEST, manifest)
        mark_complete(run_dir)  # sealed again: the manifest and the new adapter's files
    return manifest


def _base_identity(base: dict[str, Any]) -> Any:
    if "path" in base:
        return f"{base['kind']} weights sha256 {base['sha256'][:12]}"
    return f"{base['name_or_path']}@{base.get('revision') or 'main'}"


def _tokenizer_identity(run_dir: Path) -> str | None:
    path = run_dir / "tokenizer.json"
    return f"sha256 {file_sha256(path)[:12]}" if path.exists() else None
