"""What glibc's loader requires of a packed library, and which glibc a system has.

One place for glibc's rules that the packer, the link-time form, the checker and the
CLI's choice of form all follow.
"""

from __future__ import annotations

import re
from pathlib import Path

from elflayout import layouts as L

RELR_GLIBC = (2, 36)  # first glibc that applies DT_RELR
GLIBC_ABI_DT_RELR = b"GLIBC_ABI_DT_RELR"
GLIBC_ABI_DT_RELR_HASH = L.elf_hash(GLIBC_ABI_DT_RELR)  # 0xfd0e42: glibc elf/dl-version.c compares it
LIBC_SONAME = b"libc.so.6"


def glibc_requires_relr_need(needed: set[bytes], has_verneed: bool) -> bool:
    """glibc's rule (elf/dl-version.c, _dl_check_map_versions, since 2.36): an object with
    DT_RELR and DT_VERNEED, one of whose DT_NEEDED names starts with "libc.so.", must
    have a GLIBC_ABI_DT_RELR version need (by hash and name, under any file) or it is
    refused with "missing GLIBC_ABI_DT_RELR dependency". Objects needing no libc.so.*
    directly (libabsl_*: only libstdc++.so.6) load without it."""
    return has_verneed and any(n.startswith(b"libc.so.") for n in needed)


def glibc_version(root=None, triplet: str = "x86_64-linux-gnu") -> tuple[int, int] | None:
    """(major, minor) of the glibc in ``root`` ("/" by default), read from its libc.so.6
    (Debian's multiarch directory of ``triplet`` first: an arm64 root has aarch64-linux-gnu)."""
    r = Path(root or "/")
    for d in (f"lib/{triplet}", f"usr/lib/{triplet}", "lib64", "usr/lib64", "lib", "usr/lib"):
        f = r / d / "libc.so.6"
        if f.exists():
            m = re.search(rb"release version (\d+)\.(\d+)", f.read_bytes())
            if m:
                return int(m.group(1)), int(m.group(2))
    return None
