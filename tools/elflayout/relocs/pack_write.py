"""pack-relocs: write a plan (pack_plan.py) into a copy of the input, patched in place."""

from __future__ import annotations

import mmap
import os
import shutil

import numpy as np

from elflayout.relocs.pack_plan import Plan


def write_plan(plan: Plan, src, dst, sync: bool = True) -> None:
    """Copy ``src`` once to ``dst`` (a fresh temporary file) and patch it in place;
    ``sync``: fsync it (not when the cut rewrites it next and syncs)."""
    shutil.copyfile(src, dst)
    with open(dst, "r+b") as f:
        f.truncate(plan.truncate_at)
        f.seek(plan.truncate_at)
        f.write(plan.tail)
        f.flush()
        mm = mmap.mmap(f.fileno(), 0)
        try:
            buf = np.frombuffer(mm, np.uint8)
            w = buf[: buf.size // 8 * 8].view("<u8")
            w[plan.addend_offsets // 8] = plan.addend_values  # packable targets are word-aligned (_select)
            for o, data in plan.blocks:
                buf[o:o + len(data)] = np.frombuffer(data, np.uint8)
            del w, buf
            mm.flush()
        finally:
            mm.close()
        if sync:
            os.fsync(f.fileno())


