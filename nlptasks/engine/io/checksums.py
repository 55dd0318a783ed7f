"""Damaged artifacts are named, never trusted: the sha256 of every file a run or an export writes,
recorded when it is sealed and checked whenever it is loaded.

``SHA256SUMS`` beside the manifest lists, in ``sha256sum`` format (``sha256sum -c SHA256SUMS``
checks it by hand), every file of the folder that loading reads: the weights
(``model.safetensors``, ``model.onnx``, an adapter, ``base/``), ``config.json``, the tokenizer's
files, ``labels.json``, ``recipe.toml``, ``examples.json`` and the manifest ``nlptasks.json``
itself.  Documents that nothing loads are left out (:data:`UNSEALED`: the model card and other
``.md`` files, the figures, the metrics; the ``checkpoints/`` and ``eval/`` folders), so they may
be edited freely.  :func:`seal` writes the file (``mark_complete`` calls it, just before
``COMPLETE``); :func:`verify` checks a folder, and an error lists every file that is missing or
whose bytes changed, with the command that makes it again.

A folder without ``SHA256SUMS`` (made before nlptasks recorded checksums, or by hand) loads as
before, unchecked.  Hashes are cached per process by (path, size, mtime, inode), so a server or a
script that loads a run again pays once: about 0.1 to 0.3 s for a 90 MB model (docs/reliability.md).
"""

from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path

from nlptasks.errors import NlptasksError, Problem

__all__ = ["SUMS", "UNSEALED", "file_sha256", "read_sums", "seal", "sealed_files", "verify"]

SUMS = "SHA256SUMS"
UNSEALED = frozenset(
    {
        "README.md",
        "training_curves.png",
        "metrics.json",
        "log_history.json",
        "COMPLETE",
        SUMS,
        "nlptasks-run.json",
        "deployments.json",  # the exports measured against the run (nlptasks.inference.deployments)
    }
)
"""Top-level files of a run folder that are not sealed: documents and markers nothing loads."""
UNSEALED_SUFFIXES = (".md", ".png")
"""Files that are documents wherever they are (model cards, figures): not sealed."""
UNSEALED_DIRS = frozenset({"checkpoints", "eval"})
"""Top-level folders that are not sealed: the Trainer's checkpoints, ``nlptasks eval``'s outputs."""

_CACHE: dict[tuple[str, int, int, int, int], str] = {}


def file_sha256(path: Path) -> str:
    """The sha256 of ``path`` (hex), cached by (path, size, mtime, device, inode) in this process."""
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns, st.st_dev, st.st_ino)
    found = _CACHE.get(key)
    if found is None:
        digest = hashlib.sha256()
        with path.open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
        found = _CACHE[key] = digest.hexdigest()
    return found


def sealed_files(folder: Path) -> list[str]:
    """The files of ``folder`` that :func:`seal` records, as sorted POSIX paths relative to it."""
    found = []
    for root, dirs, files in os.walk(folder):
        rel_root = Path(root).relative_to(folder)
        if rel_root == Path("."):
            dirs[:] = [d for d in dirs if d not in UNSEALED_DIRS and not d.startswith(".")]
        else:
            dirs[:] = [d for d in dirs if not d.startswith(".")]
        for name in files:
            if name.startswith(".") or name.endswith(UNSEALED_SUFFIXES) or (rel_root == Path(".") and name in UNSEALED):
                continue
            if os.path.isfile(os.path.join(root, name)):
                found.append((rel_root / name).as_posix())
    return sorted(found)


def seal(folder: Path) -> dict[str, str]:
    """Write ``SHA256SUMS`` for ``folder`` (every file :func:`sealed_files` lists) through a temporary
    file and a rename; returns path → sha256."""
    sums = {rel: file_sha256(folder / rel) for rel in sealed_files(folder)}
    text = "".join(f"{digest}  {rel}\n" for rel, digest in sums.items())
    tmp = folder / f".{SUMS}.tmp"
    with tmp.open("w", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, folder / SUMS)
    return sums


def read_sums(folder: Path) -> dict[str, str] | None:
    """path → sha256 from ``folder/SHA256SUMS``; ``None`` when there is none (an older folder)."""
    path = folder / SUMS
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise NlptasksError(f"{path}: cannot read the checksums of the run: {exc}") from None
    sums = {}
    for number, line in enumerate(text.splitlines(), start=1):
        digest, sep, rel = line.partition("  ")
        if not sep or len(digest) != 64 or not rel or rel.startswith("/") or ".." in Path(rel).parts:
            raise NlptasksError(
                f"{path}:{number}: not a checksum line (expected '<sha256>  <file>')",
                hint="The checksum file is damaged: restore the folder from a copy, or make it again.",
            )
        sums[rel] = digest.lower()
    return sums


def verify(folder: Path, again: str) -> None:
    """Check ``folder`` against its ``SHA256SUMS``: every recorded file must exist with the recorded
    bytes, and every file :func:`sealed_files` finds must be recorded (an empty or cut list checks
    nothing otherwise).  An error lists each missing, changed or unrecorded file; ``again`` is the
    command that makes the folder again (the error's last line).  A folder without ``SHA256SUMS``
    passes, unchecked."""
    sums = read_sums(folder)
    if sums is None:
        logging.getLogger("nlptasks").debug("%s: no %s (an older run): files not checked", folder, SUMS)
        return
    problems = []
    for rel, digest in sums.items():
        path = folder / rel
        try:
            actual = file_sha256(path)
        except FileNotFoundError:
            problems.append(Problem(str(path), "missing (the run recorded it; it is needed to load the model)"))
            continue
        except OSError as exc:
            problems.append(Problem(str(path), f"cannot be read: {exc.strerror or exc}"))
            continue
        if actual != digest:
            size = path.stat().st_size
            problems.append(
                Problem(
                    str(path),
                    f"damaged: its sha256 differs from the one recorded when it was written ({size} bytes now)",
                )
            )
    # A file loading may read that the list does not name (a line removed, an empty list): unchecked
    # bytes would load, so it is refused as a damaged one is.
    for rel in sealed_files(folder):
        if rel not in sums:
            problems.append(
                Problem(
                    str(folder / rel),
                    f"not in {SUMS} (a line removed, or a file added after the run was sealed): its bytes "
                    "cannot be checked",
                )
            )
    if problems:
        noun = "file is" if len(problems) == 1 else "files are"
        raise NlptasksError(
            f"{folder}: {len(problems)} {noun} missing, damaged or unrecorded ({SUMS}); the model is not loaded",
            problems,
            hint=f"Make it again: {again}   (or restore the folder from a copy)",
        )
