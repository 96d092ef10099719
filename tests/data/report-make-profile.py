"""Make a small *real* profile-v1 file (trace-backend shape) for the report tests.

Until `elflayout profile` writes real profiles, this traces `llc-16 --version` with
libLLVM-16 evicted (read_ahead_kb 128, restored afterwards) and writes what the trace
backend records: pages in first-touch (fault) order, kind "t", and the reads in order.
Needs root and tracefs.

    python3 tests/data/report-make-profile.py -o tests/data/report-profile-llvm.json.gz
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))

from elflayout import fileio  # noqa: E402
from elflayout.elfcore import ElfImage  # noqa: E402
from elflayout.tracefs import TraceSession, file_key  # noqa: E402

LIB = "/usr/lib/x86_64-linux-gnu/libLLVM-16.so.1"
RA = Path("/sys/block/vda/queue/read_ahead_kb")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("-o", required=True)
    a = ap.parse_args()
    argv = ["llc-16", "--version"]
    with ElfImage(LIB) as img:
        ident = img.identity()
    old = RA.read_text().strip()
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    try:
        RA.write_text("128")
        fd = os.open(LIB, os.O_RDONLY)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        os.close(fd)
        with TraceSession([LIB], kinds=("add", "fault")) as ts:
            t0 = time.monotonic()
            r = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            dur = time.monotonic() - t0
    finally:
        RA.write_text(old)
    ev = ts.result.of(file_key(LIB))
    seq = np.arange(ev.size)  # one global sequence over reads and faults
    faults = ev["kind"] == 1
    fp = ev["page"][faults]
    _, first_idx = np.unique(fp, return_index=True)
    first_idx.sort()
    fi = np.flatnonzero(faults)[first_idx]
    pages = [{"page": int(ev["page"][i]), "kind": "t", "first": int(seq[i]), "t": round(float(ev["t"][i] - t0), 6)}
             for i in fi]
    ri = np.flatnonzero(ev["kind"] == 0)
    reads = [{"page": int(ev["page"][i]), "npages": int(ev["npages"][i]), "first": int(seq[i]),
              "t": round(float(ev["t"][i] - t0), 6)} for i in ri]
    meta = {"argv": argv, "backend": "trace", "granularity": "page", "kernel": platform.release(),
            "read_ahead_kb": 128, "started": started, "duration_s": dur, "exit_status": r.returncode,
            "notes": ["made by tests/data/report-make-profile.py (stand-in for elflayout profile --backend trace)",
                      "fault-around and read-ahead hide some first touches"]}
    target = {**ident, "map": None, "functions": [], "sections": [], "objects": [], "pages": pages, "reads": reads}
    doc = fileio.envelope("profile", 1, meta, targets=[target])
    data = json.dumps(doc, separators=(",", ":")).encode() + b"\n"
    if a.o.endswith(".gz"):
        data = gzip.compress(data, mtime=0)
    fileio.atomic_write_bytes(a.o, data)
    print(f"{a.o}: {len(pages)} pages touched, {len(reads)} reads, {len(data)} bytes")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
