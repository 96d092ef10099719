"""String sets: the strings a run read (``profile --strings``) and the hot-strings file
(one string a line, C-escaped), shared by ``profile``, which records them, and
``split.hotstrings``, which moves them."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from elflayout.errors import ElflayoutError

MAX_STRING = 1 << 16     # longer "strings" between NULs are data, not literals


def _text(s: bytes) -> bool:
    """Reads as text: printable ASCII, tab/newline/carriage return, or UTF-8 bytes."""
    return 0 < len(s) <= MAX_STRING and not s.translate(None, bytes(range(0x20, 0x7F)) + b"\t\n\r" +
                                                       bytes(range(0x80, 0x100)))


def strings_in(data: bytes, runs) -> set[bytes]:
    """Contents (terminator included) of the NUL-delimited strings of ``data`` holding a
    byte of ``runs`` ((offset, length) rows: what loads read, as ``profile --strings``
    records), those that read as text: the strings a run read, with their neighbours
    that a wide load (``strlen``'s 16 bytes) ran over."""
    out = set()
    for off, n in np.asarray(runs, dtype=np.int64).reshape(-1, 2).tolist():
        if n <= 0 or off >= len(data):
            continue
        lo = data.rfind(b"\0", max(0, off - MAX_STRING), off) + 1
        hi = data.find(b"\0", min(off + n, len(data)) - 1)
        if hi < 0:
            continue
        out.update(s + b"\0" for s in data[lo:hi].split(b"\0") if _text(s))
    return out


def recorded_strings(target) -> set[bytes] | None:
    """The strings a profile target's run read (``profile --strings``), else None."""
    got = target.extra.get("strings") if hasattr(target, "extra") else target.get("strings")
    if got is None:
        return None
    return {line.encode("ascii").decode("unicode_escape").encode("latin-1") + b"\0" for line in got}


def read_strings_file(path) -> set[bytes]:
    """A hot-strings file: one string a line, C-escaped (``\\n``, ``\\xNN``), the
    terminator implied."""
    try:
        text = Path(path).read_text(encoding="ascii")
    except (OSError, UnicodeDecodeError) as e:
        raise ElflayoutError(f"{path}: cannot read the hot strings ({e})") from None
    out = set()
    for k, line in enumerate(text.splitlines(), 1):
        if line.startswith("#") or not line:
            continue
        try:
            out.add(line.encode("ascii").decode("unicode_escape").encode("latin-1") + b"\0")
        except (UnicodeDecodeError, UnicodeEncodeError):
            raise ElflayoutError(f"{path}:{k}: not a C-escaped string") from None
    return out


def format_strings(strings) -> str:
    """The hot-strings file of ``strings`` (contents with their terminator), sorted."""
    def esc(s: bytes) -> str:
        # a backslash starts an escape, a leading '#' a comment: both escaped
        return "".join(chr(c) if 0x20 <= c < 0x7F and c not in b"\\#" else f"\\x{c:02x}" for c in s[:-1])
    return "".join(esc(s) + "\n" for s in sorted(strings) if s.endswith(b"\0"))
