"""Writing files so that no reader ever sees a partial one, and nothing is overwritten by accident.

Each file is first written in full to a hidden temporary file in the target folder
(``.NAME.XXXXXXXX.tmp``), flushed to disk, and then moved onto its name in one step: with
``os.replace`` when overwriting is allowed, else with ``os.link``, which fails if the name
exists (so a file created meanwhile by another process is not overwritten either).  A run
that is interrupted before the move leaves the target untouched (at most a hidden temporary
file, which a failing run removes itself); one interrupted after it leaves a complete file.

:func:`write_files` writes several files together: all are staged before any is moved into
place, and if moving one fails, the files of this call that were new are removed again.
"""

from __future__ import annotations

import errno
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

from .errors import OutputExistsError, ReleaseFileError

__all__ = ["StagedFile", "stage", "write_files", "refuse_existing"]

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

    def commit(self) -> None:
        """Move the temporary file onto the target (see the module docstring)."""
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

    def discard(self) -> None:
        """Remove the temporary file (if it is still there)."""
        try:
            os.unlink(self.temp)
        except FileNotFoundError:
            pass


def stage(path, data: bytes, *, overwrite: bool = False, mode: int = 0o666) -> StagedFile:
    """Write ``data`` to a new temporary file beside ``path`` (created with permissions
    ``mode`` less the umask; ``0o600`` for private files), flushed to disk."""
    target = Path(path)
    refuse_existing([target], overwrite=overwrite)
    target.parent.mkdir(parents=True, exist_ok=True)
    while True:
        temp = target.parent / f".{target.name}.{secrets.token_hex(4)}.tmp"
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
    done: list[StagedFile] = []
    try:
        for s in staged:
            existed = s.target.exists()
            s.commit()
            if not existed:
                done.append(s)
    except BaseException:
        for s in staged:
            s.discard()
        for s in done:  # new files of this call: remove them again
            try:
                os.unlink(s.target)
            except FileNotFoundError:
                pass
        raise
    for folder in {s.target.parent for s in staged}:
        _sync_folder(folder)
    return [s.target for s in staged]
