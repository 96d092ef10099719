"""System V / GNU ``ar`` archives: read members in order, write them back in order.

Reading is a few lines of the documented format (ar(5): 8-byte magic, 60-byte member
headers, ``//`` long-name table, ``/`` or ``/SYM64/`` symbol index). Writing uses
binutils' own ``ar`` (``qcD``: append in order, keep duplicate member names,
deterministic headers) and builds the symbol index the linkers need.
"""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

from elflayout.errors import ElflayoutError

MAGIC = b"!<arch>\n"
THIN_MAGIC = b"!<thin>\n"
HDR = 60


def is_archive(raw: bytes) -> bool:
    return raw.startswith(MAGIC) or raw.startswith(THIN_MAGIC)


def read_archive(raw: bytes, name: str) -> list[tuple[str, bytes]]:
    """Members (name, bytes) of an archive in order; names may repeat."""
    if raw.startswith(THIN_MAGIC):
        raise ElflayoutError(f"{name}: thin archives are not supported (members live outside the archive)")
    if not raw.startswith(MAGIC):
        raise ElflayoutError(f"{name}: not an ar archive")
    pos, longnames, out = len(MAGIC), b"", []
    while pos < len(raw):
        if raw[pos:pos + 1] == b"\n":   # padding byte before a member
            pos += 1
            continue
        hdr = raw[pos:pos + HDR]
        if len(hdr) < HDR or hdr[58:60] != b"`\n":
            raise ElflayoutError(f"{name}: bad archive member header at offset {pos} (truncated or corrupt)")
        field = hdr[:16].decode("ascii", "replace").rstrip()
        # ar(5): the size is decimal ASCII digits, space padded; a sign would move the
        # next header backwards (or nowhere) and the walk would never end.
        size_field = hdr[48:58].strip(b" ")
        if not size_field.isdigit():
            raise ElflayoutError(f"{name}: bad size {size_field.decode('ascii', 'backslashreplace')!r} in the "
                                 f"archive member header at offset {pos}")
        size = int(size_field)
        body = raw[pos + HDR:pos + HDR + size]
        if len(body) < size:
            raise ElflayoutError(f"{name}: member {field!r} truncated ({len(body)} of {size} bytes)")
        pos += HDR + size + (size & 1)
        if field == "//":
            longnames = body
        elif field in ("/", "/SYM64/", "__.SYMDEF", "__.SYMDEF SORTED"):
            continue
        else:
            if field.startswith("/") and field[1:].isdigit():
                off = int(field[1:])
                end = longnames.find(b"/\n", off)
                if off >= len(longnames) or end < 0:
                    raise ElflayoutError(f"{name}: member name {field!r} outside the long-name table")
                field = longnames[off:end].decode("utf-8", "surrogateescape")
            out.append((_member_name(name, field.rstrip("/"), pos - HDR - size - (size & 1)), body))
    return out


def _member_name(name: str, member: str, at: int) -> str:
    """``member`` if ``ar`` can write it back as a file name, else ElflayoutError."""
    if member in ("", ".", "..") or "/" in member or "\0" in member:
        raise ElflayoutError(f"{name}: member name {member!r} at offset {at} is not a file name "
                             "(ar could not write it back)")
    return member


def write_archive(path: Path, members: list[tuple[str, bytes]]) -> None:
    """Write ``members`` in order to ``path`` (which should be a temporary name) with ``ar``."""
    with tempfile.TemporaryDirectory(prefix="elflayout-ar-") as td:
        files = []
        for k, (mname, body) in enumerate(members):
            d = Path(td) / f"{k:05d}"
            d.mkdir()
            f = d / mname
            f.write_bytes(body)
            files.append(str(f))
        Path(path).unlink(missing_ok=True)
        # Batches keep the command line short for archives of thousands of members.
        for i in range(0, max(1, len(files)), 500):
            r = subprocess.run(["ar", "qcD" if i + 500 < len(files) else "qcsD", str(path), *files[i:i + 500]],
                               capture_output=True, text=True)
            if r.returncode:
                raise ElflayoutError(f"{path}: ar failed: {r.stderr.strip()}")
