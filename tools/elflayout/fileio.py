"""Atomic outputs and versioned JSON envelopes shared by every stage.

Every file that crosses a stage boundary is ``{"format": "elflayout-<kind>",
"version": N, "metadata": {...}, ...}`` (docs/formats.md). Readers accept the versions
they know, writers write the latest. Outputs are written to a temporary file in the
same directory and renamed, so an interrupted run never leaves a half-written file and
never damages an existing one.
"""

from __future__ import annotations

import contextlib
import errno
import gzip
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Iterator

from elflayout.errors import ElflayoutError


def check_output(path: str | os.PathLike, *, force: bool = False, inputs: tuple = ()) -> Path:
    """Fail early (before long work) if ``path`` cannot or must not be written.

    An existing file is only replaced with ``force``: ``-o`` never silently
    overwrites a user's file. Writing over one of the ``inputs`` is always refused.
    """
    p = Path(path)
    for i in inputs:
        try:
            if p.exists() and Path(i).exists() and os.path.samefile(p, i):
                raise ElflayoutError(f"{p}: output would overwrite the input")
        except OSError:
            pass
    if p.is_dir():
        raise ElflayoutError(f"{p}: output path is a directory")
    if p.exists() and not force:
        raise ElflayoutError(f"{p}: output exists (use --force to replace it)")
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise ElflayoutError(f"{p}: directory {parent} does not exist")
    if not os.access(parent, os.W_OK):
        raise ElflayoutError(f"{p}: directory {parent} is not writable")
    return p


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike, mode: int | None = None, *, replace: bool = True) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it over ``path`` on success.

    With ``replace=False`` the result is linked in only if ``path`` does not exist at
    that moment (link(2) fails with EEXIST: no-replace, atomic), so two runs writing the
    same output cannot both succeed. A full disk is reported against ``path``, not the
    temporary name.
    """
    p = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent if str(p.parent) else ".")
    os.close(fd)
    try:
        try:
            yield Path(tmp)
            os.chmod(tmp, 0o644 if mode is None else mode)
            if replace:
                os.replace(tmp, p)
            else:
                os.link(tmp, p)
                os.unlink(tmp)
        except FileExistsError:
            raise ElflayoutError(f"{p}: output exists (use --force to replace it)") from None
        except OSError as e:
            if e.errno in (errno.ENOSPC, errno.EDQUOT):
                raise ElflayoutError(f"{p}: cannot write the output: {os.strerror(e.errno)}") from None
            raise
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def atomic_write_bytes(path: str | os.PathLike, data: bytes, mode: int | None = None) -> None:
    with atomic_output(path, mode) as tmp:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    atomic_write_bytes(path, text.encode())


def write_proved(src: str | os.PathLike, dst: str | os.PathLike, data: bytes, verify) -> None:
    """DST := DATA with SRC's mode, kept only if ``verify(src, dst)`` returns: a rewrite
    that cannot be proved leaves nothing behind."""
    Path(dst).write_bytes(data)
    Path(dst).chmod(Path(src).stat().st_mode & 0o7777)
    try:
        verify(src, dst)
    except BaseException:
        Path(dst).unlink(missing_ok=True)
        raise


def rewrite_in_place(path: str | os.PathLike, write, tag: str):
    """``write(path, tmp)`` into a temporary file beside PATH (``.NAME.TAG``), renamed onto
    PATH once it returns; PATH stays as it was when it raises. Returns what it returns."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{tag}")
    try:
        out = write(path, tmp)
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)
    return out


def envelope(kind: str, version: int, metadata: dict, **body: Any) -> dict:
    return {"format": f"elflayout-{kind}", "version": version, "metadata": metadata, **body}


def dump_json(doc: dict, path: str | os.PathLike) -> None:
    """Write a JSON document atomically (gzip when the name ends in .gz)."""
    data = json.dumps(doc, indent=1, sort_keys=False).encode() + b"\n"
    if str(path).endswith(".gz"):
        data = gzip.compress(data, mtime=0)
    atomic_write_bytes(path, data)


def read_input(path: str | os.PathLike, expected: str) -> bytes:
    """The bytes of an input file; one-line errors (``expected`` names what a directory is not)."""
    p = Path(path)
    try:
        return p.read_bytes()
    except IsADirectoryError:
        raise ElflayoutError(f"{p}: is a directory, expected {expected}") from None
    except FileNotFoundError:
        raise ElflayoutError(f"{p}: no such file") from None
    except OSError as e:
        raise ElflayoutError(f"{p}: cannot read: {e.strerror}") from None


def load_json(path: str | os.PathLike, kind: str | tuple[str, ...], versions: tuple[int, ...] = (1,)) -> dict:
    """Read an elflayout envelope of ``kind`` (or one of several kinds), checking format and version."""
    kinds = (kind,) if isinstance(kind, str) else tuple(kind)
    p = Path(path)
    raw = read_input(p, f"an elflayout-{kind} JSON file")
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError):
            raise ElflayoutError(f"{p}: truncated or corrupt gzip file") from None
    try:
        doc = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ElflayoutError(f"{p}: not valid JSON ({e})") from None
    fmt = doc.get("format") if isinstance(doc, dict) else type(doc).__name__
    if fmt not in [f"elflayout-{k}" for k in kinds]:
        want = " or ".join(f"elflayout-{k}" for k in kinds)
        raise ElflayoutError(f"{p}: expected an {want} file, found {fmt!r}")
    if doc.get("version") not in versions:
        raise ElflayoutError(
            f"{p}: {fmt} version {doc.get('version')!r} is not supported "
            f"(this elflayout reads {', '.join(map(str, versions))})"
        )
    return doc
