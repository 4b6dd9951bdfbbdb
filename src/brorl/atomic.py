"""Atomic outputs: every file a `brorl` command writes goes through here.

A file is written to a temporary sibling (``.<stem>.tmp-<pid>-<random><suffix>``, same folder, so the rename
never crosses a file system), flushed to disk, then renamed over the target with :func:`os.replace`. A kill
or a full disk part-way leaves the previous good output untouched and, at worst, a temporary file; the next
write of the same target removes temporaries whose writer is dead. ``.dvcignore`` hides them from DVC.

    with atomic_path(png) as tmp:        # any writer that takes a path (savefig, np.savez, torch.save)
        fig.savefig(tmp)
    with atomic_open(csv, newline="") as f:  # a text (or "wb") file object
        csv.writer(f).writerows(rows)
    write_text(md, text); write_bytes(path, data); write_json(path, obj, indent=1)
    with atomic_dir(folder) as tmp:      # a whole folder (save_pretrained), swapped in at the end
        model.save_pretrained(tmp)
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, Iterator

TMP_MARK = ".tmp-"
"""Temporary siblings are ``.<stem>.tmp-<pid>-<hex><suffix>`` (``.dvcignore``: ``.*.tmp-*``)."""


def temp_sibling(path: str | Path) -> Path:
    """A fresh temporary name beside ``path`` that keeps its suffix (savefig and np.savez read it)."""
    path = Path(path)
    return path.with_name(f".{path.stem}{TMP_MARK}{os.getpid()}-{secrets.token_hex(4)}{path.suffix}")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_temps(path: str | Path) -> list[Path]:
    """Remove the temporaries of ``path`` left by writers that are no longer running; returns them."""
    path = Path(path)
    removed = []
    if not path.parent.is_dir():
        return removed
    prefix = f".{path.stem}{TMP_MARK}"
    for tmp in path.parent.glob(f".{path.stem}{TMP_MARK}*"):
        pid = tmp.name[len(prefix):].split("-", 1)[0]
        if pid.isdigit() and int(pid) != os.getpid() and not _pid_alive(int(pid)):
            shutil.rmtree(tmp, ignore_errors=True) if tmp.is_dir() and not tmp.is_symlink() else tmp.unlink(missing_ok=True)
            removed.append(tmp)
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


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; when the block ends without error, the file written there
    replaces ``path`` (after an fsync). On error the temporary is removed and ``path`` is left as it was."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temps(path)
    tmp = temp_sibling(path)
    try:
        yield tmp
        if not tmp.exists():
            raise FileNotFoundError(f"nothing was written to the temporary file {tmp} for {path}")
        _fsync_file(tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(path.parent)


@contextmanager
def atomic_open(path: str | Path, mode: str = "w", **kwargs: Any) -> Iterator[IO]:
    """``open(path, mode)`` ("w" or "wb", with open's keywords) writing to a temporary that replaces ``path``
    when the block ends without error."""
    if mode not in ("w", "wb", "wt"):
        raise ValueError(f"atomic_open writes whole files: mode 'w' or 'wb', not {mode!r}")
    if "b" not in mode:
        kwargs.setdefault("encoding", "utf-8")
    with atomic_path(path) as tmp:
        with open(tmp, mode, **kwargs) as f:
            yield f


def write_text(path: str | Path, text: str, encoding: str = "utf-8") -> None:
    """``Path(path).write_text(text)``, atomically."""
    with atomic_open(path, "w", encoding=encoding) as f:
        f.write(text)


def write_bytes(path: str | Path, data: bytes) -> None:
    """``Path(path).write_bytes(data)``, atomically."""
    with atomic_open(path, "wb") as f:
        f.write(data)


def write_json(path: str | Path, obj: Any, newline: bool = True, **dump_kwargs: Any) -> None:
    """``json.dump(obj)`` (with json's keywords, e.g. indent) to ``path``, atomically; a final newline unless
    ``newline`` is false."""
    write_text(path, json.dumps(obj, **dump_kwargs) + ("\n" if newline else ""))


@contextmanager
def atomic_dir(path: str | Path) -> Iterator[Path]:
    """Yield a temporary folder beside ``path``; when the block ends without error it takes ``path``'s place
    (an existing folder is renamed aside first and removed last, so a kill between the two renames leaves
    the old folder under its temporary name, never a half-written one at ``path``)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temps(path)
    tmp = temp_sibling(path)
    tmp.mkdir()
    try:
        yield tmp
        for f in tmp.rglob("*"):
            if f.is_file():
                _fsync_file(f)
        old = None
        if path.exists() or path.is_symlink():
            old = temp_sibling(path)
            os.replace(path, old)
        os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _fsync_dir(path.parent)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True) if old.is_dir() and not old.is_symlink() else old.unlink(missing_ok=True)


def save_figure(fig: Any, path: str | Path, **savefig_kwargs: Any) -> None:
    """``fig.savefig(path, ...)``, atomically (the format from ``path``'s suffix, as savefig reads it)."""
    with atomic_path(path) as tmp:
        fig.savefig(tmp, **savefig_kwargs)


def frame_to_csv(frame: Any, path: str | Path, **to_csv_kwargs: Any) -> None:
    """``frame.to_csv(path, ...)`` for a pandas DataFrame, atomically."""
    with atomic_path(path) as tmp:
        frame.to_csv(tmp, **to_csv_kwargs)
