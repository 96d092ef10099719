"""Many files under test: split event filters vs a device-only filter (lost events).

The kernel refuses a tracefs event filter of a page or more (about 250 inodes), so a long
list of files is either split over several instances (``tracefs.TraceSession``, what the
harness does) or filtered by device alone with the inodes chosen afterwards. This script
reads ``--files`` small files (evicted first) ``--iterations`` times while another
process writes and deletes 8 MiB temporary files on the same disk, and counts, for each
method, the events recorded, those of the files, and the events the kernel lost.

    python3 bench/bench_trace_filters.py [--files 320] [--buffer-kb 1024 128]

Needs root (tracefs).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools"))

from _common import cache_dir  # noqa: E402
from elflayout import tracefs  # noqa: E402
from elflayout.measure import cache  # noqa: E402
from elflayout.tracefs import TraceSession, file_key  # noqa: E402

CHURN = """
import os, sys
buf = os.urandom(1 << 20)
while True:
    with open(sys.argv[1], 'wb') as f:
        for _ in range(8):
            f.write(buf)
    os.unlink(sys.argv[1])
"""


class DeviceOnly(TraceSession):
    """One instance filtered by device alone (the inodes selected afterwards)."""

    def __enter__(self):
        keys, self.keys = self.keys, None
        try:
            super().__enter__()
        finally:
            self.keys = keys
        filt = "||".join(f"s_dev=={d}" for d in sorted({d for d, _ in keys}))
        for k in self.kinds:
            (self.dir / "events" / tracefs.EVENTS[k] / "filter").write_text(filt)
        return self


def measure(cls, files, iterations: int, buffer_kb: int, d: Path) -> tuple[int, int, int, int]:
    keys = {file_key(f) for f in files}
    total = mine = lost = 0
    with cls(files, kinds=("add", "delete"), buffer_kb=buffer_kb) as ts:
        for _ in range(iterations):
            ts.clear()
            for f in files:
                cache.evict(f, verify=False)
            subprocess.run(f"cat {d}/*.dat > /dev/null", shell=True, check=True)
            time.sleep(0.5)
            r = ts.stop()
            total += len(r.events)
            mine += sum((int(a), int(b)) in keys for a, b in zip(r.events["dev"], r.events["ino"]))
            lost += r.lost
    return len(ts.dirs), total, mine, lost


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=320)
    ap.add_argument("--iterations", type=int, default=10)
    ap.add_argument("--buffer-kb", type=int, nargs="+", default=[1024, 128])
    a = ap.parse_args(argv)
    why = tracefs.tracefs_status()
    if why:
        print(f"skipped: {why}")
        return 0
    d = cache_dir("bench-trace-filters")
    files = []
    for i in range(a.files):
        f = d / f"f{i:04d}.dat"
        if not f.exists():
            f.write_bytes(os.urandom(4096 * (1 + i % 4)))
        files.append(str(f))
    os.sync()
    subprocess.run(f"cat {d}/*.dat > /dev/null", shell=True, check=True)  # cached: each pass evicts them all
    tmp = d / "churn.tmp"
    churn = subprocess.Popen([sys.executable, "-c", CHURN, str(tmp)])
    try:
        print(f"{a.files} files read {a.iterations} times, another process writing and deleting 8 MiB files "
              f"on the same disk")
        print(f"{'method':22} {'buffer KiB':>10} {'instances':>9} {'events':>8} {'of the files':>12} {'lost':>7}")
        for kb in a.buffer_kb:
            for name, cls in (("split filters", TraceSession), ("device-only filter", DeviceOnly)):
                n, total, mine, lost = measure(cls, files, a.iterations, kb, d)
                print(f"{name:22} {kb:>10} {n:>9} {total:>8,} {mine:>12,} {lost:>7,}")
    finally:
        churn.kill()
        churn.wait()
        with contextlib.suppress(OSError):
            tmp.unlink()
    return 0


if __name__ == "__main__":
    sys.exit(main())
