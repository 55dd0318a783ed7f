"""The one writing path of the commands that write after training: ``infer --output``, ``eval -o``,
``export --onnx`` / ``--merge``, ``tune``'s study folder (and ``add-adapter``'s files).

Three promises, kept here for all of them:

* **An output never destroys an input.**  :func:`refuse_inputs` runs before anything is read or
  written: an output that is one of the command's inputs (the same file by ``os.path.samefile``, or
  the same resolved path), or an output folder that equals or contains an input (a run folder, a
  data file), is an error naming both.
* **Writes are atomic.**  A file is written to a temporary file in its own folder, flushed,
  ``fsync``-ed and renamed over the target (:func:`atomic_file`): readers see the old file or the
  new one, and a failure leaves the old one as it was.  A folder is built as a temporary sibling and
  renamed into place when it is complete (:func:`atomic_folder`): a failed export leaves nothing
  behind.  A target that is not a regular file (``/dev/null``, a pipe) is written directly.
* **Every write error is an error.**  An ``OSError`` (a full disk, a read-only file system, a path
  whose parent is a file, a folder where a file should be ...) is an
  :class:`~nlptasks.errors.NlptasksError` naming the path and the operating system's reason, with
  what to do (:func:`write_failed`); the command exits non-zero without a traceback.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
import shutil
import stat
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import IO, Any

from nlptasks.engine.io.rundir import wrapped_io_error
from nlptasks.engine.system.processes import process_alive
from nlptasks.errors import NlptasksError

__all__ = [
    "OutputFile",
    "atomic_file",
    "atomic_folder",
    "check_new_folder",
    "make_folder",
    "os_errors",
    "probe",
    "refuse_inputs",
    "remove_stale_temporaries",
    "same_path",
    "write_failed",
    "write_text",
]


def _hint(exc: OSError, what: str) -> str:
    if not what:
        elsewhere = "write somewhere else"
    elif what.startswith("-"):
        elsewhere = f"give {what} a path you can write to"
    else:  # a recipe key such as output.dir
        elsewhere = f"give {what} a folder you can write to (--set {what}=DIR)"
    if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        return f"The disk (or a size limit) is full: free some space, or {elsewhere}."
    if exc.errno == errno.EROFS:
        return f"That file system is read-only: {elsewhere}."
    if exc.errno in (errno.EACCES, errno.EPERM):
        return f"You may not write there: {elsewhere}."
    if exc.errno == errno.ENOTDIR:
        return f"A part of the path is a file, not a folder: {elsewhere}."
    if exc.errno == errno.EISDIR:
        return "That is a folder: give a file name inside it."
    if exc.errno == errno.EEXIST:
        return f"Something is already there: remove it, or {elsewhere}."
    return f"Check the path, or {elsewhere}."


def write_failed(exc: OSError, path: Path | str, what: str = "") -> NlptasksError:
    """``exc``, met while writing ``path`` (the output of ``what``, e.g. ``--output``), as one line
    naming the path, the file the system named (when another) and the reason, with a hint."""
    reason = exc.strerror or str(exc) or type(exc).__name__
    named = exc.filename if exc.filename is not None else None
    where = (
        f" ({named})"
        if named is not None and str(named) != str(path) and not str(named).startswith("/proc/self")
        else ""
    )
    label = f"{what} {path}" if what else str(path)
    return NlptasksError(f"{label}: cannot write{where}: {reason}", hint=_hint(exc, what))


@contextlib.contextmanager
def os_errors(path: Path | str, what: str = "") -> Iterator[None]:
    """Turn an ``OSError`` raised inside the block into :func:`write_failed`'s error."""
    try:
        yield
    except OSError as exc:
        raise write_failed(exc, path, what) from None


def same_path(a: Path, b: Path) -> bool:
    """Whether ``a`` and ``b`` are the same file or folder (hard and symbolic links included)."""
    try:
        return os.path.samefile(a, b)
    except OSError:
        return Path(os.path.abspath(a)).resolve() == Path(os.path.abspath(b)).resolve()


def _inside(inner: Path, outer: Path) -> bool:
    try:
        return inner.resolve().is_relative_to(outer.resolve())
    except (OSError, RuntimeError):
        return False


def refuse_inputs(output: Path, inputs: Mapping[str, Path | None], what: str, folder: bool = False) -> None:
    """An error when ``output`` (the output of ``what``) is one of ``inputs`` (label → path), or,
    for a ``folder`` output, equals or contains one: writing it would destroy that input."""
    for label, source in inputs.items():
        if source is None:
            continue
        if same_path(output, source):
            raise NlptasksError(
                f"{what} {output}: it is also the input ({label} {source}); writing it would destroy the input",
                hint=f"Give {what} another path (the input is left as it is).",
            )
        if folder and _inside(source, output):
            raise NlptasksError(
                f"{what} {output}: the folder contains the input ({label} {source}); writing it could destroy the input",
                hint=f"Give {what} a new folder outside {source}.",
            )


def _temp_name(path: Path) -> Path:
    return path.with_name(f".{path.name}.tmp-{os.getpid()}-{secrets.token_hex(3)}")


def remove_stale_temporaries(path: Path) -> list[Path]:
    """Remove the temporary siblings of ``path`` (:func:`_temp_name`) left by processes that no
    longer run (killed while writing: ``kill -9``, a power cut); returns what was removed.  A
    sibling whose process id is alive is left alone, whoever that process is."""
    removed = []
    pattern = re.compile(rf"^\.{re.escape(path.name)}\.tmp-(\d+)-[0-9a-f]{{6}}$")
    try:
        siblings = list(path.parent.iterdir())
    except OSError:
        return removed
    for sibling in siblings:
        found = pattern.match(sibling.name)
        if found is None or process_alive(int(found.group(1))):
            continue
        if sibling.is_dir() and not sibling.is_symlink():
            shutil.rmtree(sibling, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                sibling.unlink()
        removed.append(sibling)
    return removed


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def _creating(path: Path, what: str) -> Iterator[None]:
    """Errors of creating ``path``'s temporary sibling, told as errors of ``path``."""
    try:
        yield
    except OSError as exc:
        exc.filename = None  # the reason is the target's: its temporary name would only confuse
        if exc.errno == errno.ENOENT and path.parent.is_dir():  # /proc, /sys: no new files there
            exc.strerror = "the folder takes no new files (a virtual or read-only file system)"
        raise write_failed(exc, path, what) from None


def make_folder(path: Path, what: str = "", shown: Path | None = None) -> Path:
    """``path`` and its parents created; a file in the way or any OS error is :func:`write_failed`'s
    error about ``shown`` (default ``path``: the output whose folder this is)."""
    shown = shown or path
    for part in [path, *path.parents]:  # the file in the way, named
        if part.exists():
            if not part.is_dir():
                reason = "it is a file, not a folder" if part == shown else f"{part} is a file, not a folder"
                raise write_failed(OSError(errno.ENOTDIR, reason), shown, what)
            break
    with os_errors(shown, what):
        path.mkdir(parents=True, exist_ok=True)
    return path


class OutputFile:
    """A file being written atomically (see the module docstring): ``write`` text or bytes, then
    :meth:`commit` (or :meth:`discard`).  Write errors are :func:`write_failed`'s errors."""

    def __init__(self, path: Path, what: str = "", binary: bool = False) -> None:
        self.path, self.what = Path(path), what
        try:
            mode = self.path.stat().st_mode
        except (FileNotFoundError, NotADirectoryError):  # NotADirectory: make_folder names the file in the way
            mode = None
        except OSError as exc:
            raise write_failed(exc, self.path, what) from None
        if mode is not None and stat.S_ISDIR(mode):
            raise write_failed(OSError(errno.EISDIR, os.strerror(errno.EISDIR)), self.path, what)
        self.direct = mode is not None and not stat.S_ISREG(mode)  # /dev/null, a pipe: no rename over it
        if not self.direct:
            make_folder(self.path.parent, what, self.path)
            remove_stale_temporaries(self.path)  # what a killed earlier attempt left
        self.temp = self.path if self.direct else _temp_name(self.path)
        with _creating(self.path, what):
            self.fh: IO[Any] = (
                open(self.temp, "wb")  # noqa: SIM115 - closed by commit/discard
                if binary
                else open(self.temp, "w", encoding="utf-8", newline="")  # noqa: SIM115
            )

    def write(self, data: Any) -> int:
        with os_errors(self.path, self.what):
            return self.fh.write(data)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        with os_errors(self.path, self.what):
            self.fh.flush()

    def commit(self) -> None:
        """Flush, ``fsync`` and rename the temporary file over the target."""
        try:
            with os_errors(self.path, self.what):
                self.fh.flush()
                if not self.direct:
                    os.fsync(self.fh.fileno())
                self.fh.close()
                if not self.direct:
                    os.replace(self.temp, self.path)
                    _fsync_dir(self.path.parent)
        except BaseException:
            self.discard()
            raise

    def discard(self) -> None:
        """Close and remove the temporary file; the target is left as it was."""
        with contextlib.suppress(OSError):
            self.fh.close()
        if not self.direct:
            with contextlib.suppress(OSError):
                self.temp.unlink()


@contextlib.contextmanager
def atomic_file(path: Path, what: str = "", binary: bool = False) -> Iterator[OutputFile]:
    """An :class:`OutputFile` for ``path``, committed when the block ends, discarded when it raises."""
    out = OutputFile(path, what, binary)
    try:
        yield out
    except BaseException:
        out.discard()
        raise
    out.commit()


def probe(path: Path, what: str = "") -> None:
    """Check that ``path`` can be written (its folder made, a temporary file created and removed),
    before a command does its long work; an existing device or pipe is left alone."""
    with contextlib.suppress(OSError):
        if path.exists() and not path.is_file() and not path.is_dir():
            return
    OutputFile(path, what).discard()


def write_text(path: Path, text: str, what: str = "") -> None:
    """``text`` to ``path``, atomically, write errors named (:func:`atomic_file`)."""
    with atomic_file(path, what) as out:
        out.write(text)


def _fsync_tree(folder: Path) -> None:
    for root, _, files in os.walk(folder):
        for name in files:
            try:
                fd = os.open(os.path.join(root, name), os.O_RDONLY)
            except OSError:
                continue
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        _fsync_dir(Path(root))


_WRITE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EIO)


def _write_error_in(exc: Exception, temp: Path) -> OSError | None:
    """``exc`` as the ``OSError`` of a failed write into ``temp`` (a path under it, or a full or
    read-only disk; a library's own report of one: safetensors, torch.save), else ``None``."""
    if isinstance(exc, NlptasksError):
        return None
    if isinstance(exc, OSError):
        inside = exc.filename is not None and str(exc.filename).startswith(str(temp))
        return exc if inside or exc.errno in _WRITE_ERRNOS else None
    return wrapped_io_error(exc, temp)


def check_new_folder(
    path: Path,
    what: str = "",
    inputs: Mapping[str, Path | None] | None = None,
    probe: bool = True,
    replaces: Callable[[Path], bool] | None = None,
) -> None:
    """What :func:`atomic_folder` refuses, checked on its own (a command checks before it loads
    anything): ``path`` is or contains one of ``inputs``, is a file, or is a folder that is not empty."""
    refuse_inputs(path, inputs or {}, what, folder=True)
    if path.exists() or path.is_symlink():
        if not path.is_dir():
            raise NlptasksError(
                f"{what} {path}: it is a file, not a folder",
                hint=f"Give {what} a new folder (the file is left as it is).",
            )
        with os_errors(path, what):
            if any(path.iterdir()) and not (replaces is not None and replaces(path)):
                raise NlptasksError(f"{what} {path}: the folder exists and is not empty", hint="Pick a new folder.")
    if probe:  # a file in the way, a read-only disk: named before the command's long work
        make_folder(path.parent, what, path)
        temp = _temp_name(path)
        with _creating(path, what):
            temp.mkdir()
        with contextlib.suppress(OSError):
            temp.rmdir()


@contextlib.contextmanager
def atomic_folder(
    path: Path,
    what: str = "",
    inputs: Mapping[str, Path | None] | None = None,
    replaces: Callable[[Path], bool] | None = None,
) -> Iterator[Path]:
    """A new folder ``path``, built as a temporary sibling (yielded) and renamed into place when the
    block ends without an error; on an error the sibling is removed.  Refused first: an output that
    is or contains one of ``inputs``, a file, a folder that is not empty (unless ``replaces(path)``
    says it is an earlier output of the same kind: it is then replaced, once the new one is whole)."""
    path = Path(path)
    check_new_folder(path, what, inputs, probe=False, replaces=replaces)
    make_folder(path.parent, what, path)
    remove_stale_temporaries(path)  # what a killed earlier attempt left
    temp = _temp_name(path)
    with _creating(path, what):
        temp.mkdir()
    try:
        try:
            yield temp
        except Exception as exc:
            found = _write_error_in(exc, temp)
            if found is None:
                raise
            if found.filename is not None:  # name the file as it would have been, not its temporary folder
                found.filename = str(found.filename).replace(str(temp), str(path), 1)
            raise write_failed(found, path, what) from None
        with os_errors(path, what):
            _fsync_tree(temp)
            aside = None
            if path.is_dir():
                if any(path.iterdir()):  # an earlier output that `replaces` accepted
                    aside = _temp_name(path)
                    os.rename(path, aside)
                else:
                    path.rmdir()
            os.rename(temp, path)
            _fsync_dir(path.parent)
            if aside is not None:
                shutil.rmtree(aside, ignore_errors=True)
    except BaseException:
        shutil.rmtree(temp, ignore_errors=True)
        raise
