"""Writing files so that no reader ever sees a partial one, and nothing is overwritten by accident.

Each file is first written in full to a hidden temporary file in the target folder
(``.NAME.XXXXXXXX.tmp``), flushed to disk, and then moved onto its name in one step: with
``os.replace`` when overwriting is allowed, else with ``os.link``, which fails if the name
exists (so a file created meanwhile by another process is not overwritten either).  A run
that is interrupted before the move leaves the target untouched (at most a hidden temporary
file, which a failing run removes itself); one interrupted after it leaves a complete file.

:func:`write_files` writes several files together: all are staged before any is moved into
place, and if moving one fails, the files of this call that were new are removed again.

Writers that need a file name (pandas, Dask, pyarrow) write into :func:`stage_path`: an
empty hidden temporary file -- or folder, for a Parquet dataset of part files -- beside the
target, moved into place by :func:`commit_staged` together with other staged files.  A folder
cannot be linked, so it is moved only if nothing has taken its name (checked just before the
move; replacing one with ``overwrite`` moves the old folder aside first and removes it after).
"""

from __future__ import annotations

import errno
import os
import secrets
import shutil
from dataclasses import dataclass
from pathlib import Path

from .errors import OutputExistsError, ReleaseFileError

__all__ = ["StagedFile", "stage", "stage_path", "commit_staged", "write_files", "refuse_existing"]

_NO_HARD_LINKS = {errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EXDEV, errno.EMLINK, errno.ENOSYS}


def refuse_existing(paths, *, overwrite: bool) -> None:
    """Raise :class:`OutputExistsError` for the first of ``paths`` that exists, unless
    ``overwrite``; a folder in the way is refused even then."""
    for p in map(Path, paths):
        if p.is_dir():
            raise ReleaseFileError(f"{p} is a directory, not a file to write")
        if p.exists() and not overwrite:
            raise OutputExistsError(f"{p} exists already: pass --force (overwrite=True) to replace it")


@dataclass
class StagedFile:
    """A complete temporary file ``temp`` waiting to become ``target``."""

    target: Path
    temp: Path
    overwrite: bool
    directory: bool = False

    def commit(self) -> None:
        """Move the temporary file onto the target (see the module docstring)."""
        if self.directory:
            self._commit_directory()
            return
        if self.overwrite:
            os.replace(self.temp, self.target)
            return
        try:
            os.link(self.temp, self.target)
        except FileExistsError:
            self.discard()
            raise OutputExistsError(f"{self.target} exists already: pass --force (overwrite=True) "
                                    "to replace it") from None
        except OSError as exc:
            if exc.errno not in _NO_HARD_LINKS:
                raise
            if self.target.exists():  # a file system without hard links: check, then move
                self.discard()
                raise OutputExistsError(f"{self.target} exists already: pass --force (overwrite=True) "
                                        "to replace it") from None
            os.replace(self.temp, self.target)
            return
        os.unlink(self.temp)

    def _commit_directory(self) -> None:
        if os.path.lexists(self.target):
            if not self.overwrite:
                self.discard()
                raise OutputExistsError(f"{self.target} exists already: pass --force (overwrite=True) to replace it")
            old = _temp_name(self.target, ".old")
            os.rename(self.target, old)
            try:
                os.rename(self.temp, self.target)
            except BaseException:
                os.rename(old, self.target)
                raise
            _remove(old)
            return
        try:
            os.rename(self.temp, self.target)
        except OSError as exc:
            if exc.errno in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR, errno.EISDIR):
                self.discard()
                raise OutputExistsError(f"{self.target} exists already: pass --force (overwrite=True) "
                                        "to replace it") from None
            raise

    def sync(self) -> None:
        """Flush the temporary file (every file of a temporary folder) to disk."""
        files = [self.temp] if not self.directory else [p for p in Path(self.temp).rglob("*") if p.is_file()]
        for f in files:
            fd = os.open(f, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        if self.directory:
            _sync_folder(Path(self.temp))

    def discard(self) -> None:
        """Remove the temporary file or folder (if it is still there)."""
        _remove(self.temp)


def _remove(path) -> None:
    try:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.unlink(path)
    except FileNotFoundError:
        pass


def _temp_name(target: Path, suffix: str = ".tmp") -> Path:
    return target.parent / f".{target.name}.{secrets.token_hex(4)}{suffix}"


def stage_path(path, *, overwrite: bool = False, directory: bool = False) -> StagedFile:
    """An empty temporary file (or folder, ``directory``) beside ``path`` for a writer that
    needs a name: fill ``staged.temp``, then :func:`commit_staged` (or ``discard()``).  An
    existing target is refused here already unless ``overwrite``."""
    target = Path(path)
    if directory:
        if os.path.lexists(target) and not overwrite:
            raise OutputExistsError(f"{target} exists already: pass --force (overwrite=True) to replace it")
    else:
        refuse_existing([target], overwrite=overwrite)
    target.parent.mkdir(parents=True, exist_ok=True)
    while True:
        temp = _temp_name(target)
        try:
            if directory:
                os.mkdir(temp)
            else:
                os.close(os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
            break
        except FileExistsError:  # pragma: no cover - a 32-bit random name taken
            continue
    return StagedFile(target, temp, overwrite, directory)


def stage(path, data: bytes, *, overwrite: bool = False, mode: int = 0o666) -> StagedFile:
    """Write ``data`` to a new temporary file beside ``path`` (created with permissions
    ``mode`` less the umask; ``0o600`` for private files), flushed to disk."""
    target = Path(path)
    refuse_existing([target], overwrite=overwrite)
    target.parent.mkdir(parents=True, exist_ok=True)
    while True:
        temp = _temp_name(target)
        try:
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), mode)
            break
        except FileExistsError:  # pragma: no cover - a 32-bit random name taken
            continue
    staged = StagedFile(target, temp, overwrite)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
    except BaseException:
        staged.discard()
        raise
    return staged


def _sync_folder(folder: Path) -> None:
    """Flush a folder's entries to disk (best effort; not available everywhere)."""
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


def write_files(items, *, overwrite: bool = False) -> list[Path]:
    """Write ``items`` -- ``(path, data)`` or ``(path, data, mode)`` with ``data`` bytes or
    text (UTF-8) -- all or nothing as far as possible (module docstring).  Returns the paths."""
    staged: list[StagedFile] = []
    try:
        for item in items:
            path, data, *mode = item
            if isinstance(data, str):
                data = data.encode("utf-8")
            staged.append(stage(path, data, overwrite=overwrite, **({"mode": mode[0]} if mode else {})))
    except BaseException:
        for s in staged:
            s.discard()
        raise
    return commit_staged(staged)


def commit_staged(staged) -> list[Path]:
    """Move the complete temporary files (or folders) ``staged`` onto their targets, in order;
    if one fails, discard the rest and remove the targets of this call that were new.
    Returns the targets."""
    staged = list(staged)
    done: list[StagedFile] = []
    try:
        for s in staged:
            existed = os.path.lexists(s.target)
            s.commit()
            if not existed:
                done.append(s)
    except BaseException:
        for s in staged:
            s.discard()
        for s in done:  # new files of this call: remove them again
            _remove(s.target)
        raise
    for folder in {s.target.parent for s in staged}:
        _sync_folder(folder)
    return [s.target for s in staged]
