"""Preload planning: which byte ranges of which files to read before a program starts.

Goal: turn the pages a startup reads (scattered 128 KiB read-around windows, in fault
order, zig-zagging between a library's relocation table and the data it writes) into a
few large reads per file, in file-offset order, issued before the program runs — so the
device streams instead of seeking, and the program's page faults find the page cache
full. What a layout change decides (*which* pages are needed) stays as it is; the plan
decides *how* they are read.

Citation: Mike Hommey, "Reducing Firefox startup I/O in libxul.so" (2011), whose
startup preloading of libxul read the library ahead of the loader; the same idea,
system-wide, is systemd-readahead (boot-time replay of recorded file ranges, sorted by
position) and the Windows prefetcher (per-application traces of the first seconds,
replayed in disk order at the next launch).

Definitions:
- *observation*: the pages of one file read by one run (``inputs.Observation``), with
  each page's first-read time as a fraction of that run's read span.
- *needed page*: a page read by at least one observation of the file (union: a plan
  serves every workload it was made from).
- *priority* of a page: its earliest fraction over all observations; of a range: the
  smallest priority of its needed pages.
- *gap*: the unneeded bytes between two needed ranges of one file. Reading through a
  gap costs ``gap / bandwidth``; skipping it costs a seek, ``seekfn(gap)`` of the device
  model (``storage.model.DeviceModel``, docs/storage.md).

Steps:
1. Group observations by file; the needed pages of a file are their union, each with its
   priority. Files whose identity now differs from the one recorded by the inputs
   (build-id, size) are refused: the pages belong to another build.
2. Cut the needed pages of each file into maximal runs of consecutive pages.
3. Merge neighbouring runs when reading the gap costs less than seeking over it
   (``gap / bandwidth < seekfn(gap)``); on a disk that reads through short gaps anyway
   this turns many requests into one, on flash it merges only tiny gaps.
4. Cap (``max_bytes``): ranges are taken in priority order (earliest needed first) while
   they fit; a range that does not fit is dropped whole and the next is tried. Every
   dropped range, byte and needed page is counted.
5. Order files by their earliest priority (the first file needed is read first) and the
   ranges of a file by offset; clip the last range at the end of the file.
6. Identify each file by path, size, mtime and build-id as it is now, so the preloader
   can skip a file that changed after planning.
"""

from __future__ import annotations

import datetime
import os
import sys
from dataclasses import dataclass

import numpy as np

from elflayout.elfcore import ElfImage
from elflayout.errors import ElflayoutError
from elflayout.preload.inputs import Inputs, Observation
from elflayout.preload.model import FilePlan, PreloadPlan
from elflayout.storage.model import PRESETS, DeviceModel, resolve

NAME = "gap-vs-seek"
PAGE = 4096
DEFAULT_STORAGE = "hdd"  # the device class preloading is for; flash merges less
# One read request of the modelled plan: the kernel splits readahead(2) into chunks of
# this size (FUSE: max_pages 256; block devices: max_sectors_kb is usually >= 1 MiB).
REQUEST_BYTES = 1 << 20


@dataclass(frozen=True)
class _Range:
    path: str
    start: int  # first page
    end: int  # one past the last page
    needed: int  # needed pages inside
    priority: float


def should_merge(model: DeviceModel, gap_bytes: np.ndarray) -> np.ndarray:
    """Step 3's rule, vectorised: read through a gap when that is cheaper than a seek."""
    gap = np.asarray(gap_bytes, dtype=float)
    bw = model.bandwidth_mb_s * 1e6
    through = gap / bw if bw > 0 else np.zeros(gap.shape)
    return through < model.seek_s(gap)


def _file_ranges(path: str, obs: list[Observation], model: DeviceModel) -> tuple[list[_Range], int]:
    pages = np.concatenate([o.pages for o in obs])
    first = np.concatenate([o.first for o in obs])
    order = np.lexsort((first, pages))
    pages, first = pages[order], first[order]
    keep = np.r_[True, pages[1:] != pages[:-1]]
    pages, first = pages[keep], first[keep]  # step 1: union, earliest priority per page
    brk = np.flatnonzero(np.diff(pages) != 1) + 1  # step 2: runs of consecutive pages
    starts = np.r_[0, brk]
    ends = np.r_[brk, len(pages)]
    if len(starts) > 1:  # step 3: merge across cheap gaps
        gaps = (pages[starts[1:]] - pages[ends[:-1] - 1] - 1) * PAGE
        merge = should_merge(model, gaps)
        starts = np.r_[starts[0], starts[1:][~merge]]
        ends = np.r_[ends[:-1][~merge], ends[-1]]
    prio = np.minimum.reduceat(first, starts)
    out = [_Range(path, int(pages[s]), int(pages[e - 1]) + 1, int(e - s), float(p))
           for s, e, p in zip(starts, ends, prio)]
    return out, len(pages)


def _identity(path: str) -> tuple[int, int, str | None]:
    st = os.stat(path)
    try:
        with ElfImage(path) as img:
            bid = img.build_id
    except ElflayoutError:
        bid = None  # not ELF (data files, .pak, fonts): size and mtime only
    return st.st_size, st.st_mtime_ns, bid


def modelled_seconds(model: DeviceModel, plan: PreloadPlan) -> float:
    """Device time to read the plan (requests of REQUEST_BYTES, files one after another)."""
    ino, off, size = [], [], []
    for i, f in enumerate(plan.files):
        for o, n in f.ranges:
            for c in range(o, o + n, REQUEST_BYTES):
                ino.append(i + 1)
                off.append(c)
                size.append(min(REQUEST_BYTES, o + n - c))
    return float(model.latencies(ino, off, size).sum()) if off else 0.0


def make_plan(inputs: Inputs, storage: str = DEFAULT_STORAGE, max_bytes: int | None = None,
              argv: list[str] | None = None) -> PreloadPlan:
    """Steps 1–6 over the observations of ``inputs``; the plan's metadata says what was dropped."""
    if storage not in PRESETS:
        raise ElflayoutError(f"--storage: unknown preset {storage!r} (one of: {', '.join(PRESETS)})")
    if max_bytes is not None and max_bytes < 0:
        raise ElflayoutError(f"--max-bytes: must be 0 or more (got {max_bytes})")
    model = resolve(storage)
    by_file: dict[str, list[Observation]] = {}
    for ob in inputs.observations:
        by_file.setdefault(ob.path, []).append(ob)
    notes = list(inputs.notes)
    dropped_files = []
    ranges: list[_Range] = []
    needed_total = {}
    ident = {}
    for path, obs in by_file.items():
        if not os.path.isfile(path):
            dropped_files.append({"path": path, "reason": "no such file here"})
            continue
        size, mtime_ns, bid = _identity(path)
        for o in obs:
            if (o.build_id and bid and o.build_id != bid) or (o.size is not None and o.size != size):
                raise ElflayoutError(f"{path}: not the build the input recorded ({o.source}: build-id "
                                     f"{o.build_id}, size {o.size}; now {bid}, {size}): profile this build again")
        ident[path] = (size, mtime_ns, bid)
        rs, n = _file_ranges(path, obs, model)
        ranges.extend(rs)
        needed_total[path] = n
    # step 4: cap in priority order
    keep, drop = [], []
    budget = max_bytes
    for r in sorted(ranges, key=lambda r: (r.priority, r.path, r.start)):
        size = ident[r.path][0]
        nbytes = min(r.end * PAGE, size) - r.start * PAGE
        if budget is None or nbytes <= budget:
            keep.append(r)
            budget = None if budget is None else budget - nbytes
        else:
            drop.append((r, nbytes))
    # step 5: files by earliest priority, ranges by offset
    per_file: dict[str, list[_Range]] = {}
    for r in keep:
        per_file.setdefault(r.path, []).append(r)
    files = []
    for path, rs in sorted(per_file.items(), key=lambda kv: min(r.priority for r in kv[1])):
        rs.sort(key=lambda r: r.start)
        size, mtime_ns, bid = ident[path]
        rr = tuple((r.start * PAGE, min(r.end * PAGE, size) - r.start * PAGE) for r in rs)
        files.append(FilePlan(path, size, mtime_ns, bid, rr, sum(r.needed for r in rs),
                              min(r.priority for r in rs)))
    needed = sum(needed_total.values())
    metadata = {
        "argv": list(sys.argv if argv is None else argv),
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "algorithm": NAME,
        "page_size": PAGE,
        "storage": {"preset": storage, "params": model.params(), "description": PRESETS[storage][1]},
        "max_bytes": max_bytes,
        "inputs": inputs.sources,
        "observations": len(inputs.observations),
        "totals": {"files": len(files), "ranges": sum(len(f.ranges) for f in files),
                   "bytes": sum(f.bytes for f in files), "needed_pages": sum(f.needed_pages for f in files),
                   "gap_pages": sum(-(-n // PAGE) for f in files for _, n in f.ranges)
                   - sum(f.needed_pages for f in files)},
        "dropped": {"ranges": len(drop), "bytes": sum(n for _, n in drop),
                    "needed_pages": sum(r.needed for r, _ in drop), "files": dropped_files},
        "needed_pages": needed,
        "notes": notes,
    }
    plan = PreloadPlan(metadata, files)
    metadata["modelled_read_s"] = round(modelled_seconds(model, plan), 6)
    return plan
