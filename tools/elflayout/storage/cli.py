"""``elflayout storage``: serve a directory through an emulated slow disk (FUSE)."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time

from elflayout.errors import ElflayoutError
from elflayout.storage import SlowStorage
from elflayout.storage import server
from elflayout.storage.model import PRESETS

SUMMARY = "serve a directory through an emulated slow disk (FUSE)"
EPILOG = """\
examples:
  # Serve libLLVM's directory as if from a 7200 rpm disk, until Ctrl-C:
  mkdir -p /tmp/llvm-src /tmp/llvm-hdd
  cp /usr/lib/x86_64-linux-gnu/libLLVM-16.so.1 /tmp/llvm-src/
  elflayout storage mount /tmp/llvm-src /tmp/llvm-hdd --preset hdd
  # in another shell: evict the library from the mount's page cache, then time cold vs hot
  python3 -c 'import os; fd=os.open("/tmp/llvm-hdd/libLLVM-16.so.1", os.O_RDONLY); \\
      os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)'
  time LD_LIBRARY_PATH=/tmp/llvm-hdd llc-16 --version     # cold: seconds
  time LD_LIBRARY_PATH=/tmp/llvm-hdd llc-16 --version     # hot: tens of ms

  # A/B: two builds of one library under their soname, on one emulated disk:
  elflayout storage mount /tmp/ab --preset hdd \\
      --file before/libLLVM-16.so.1=/usr/lib/x86_64-linux-gnu/libLLVM-16.so.1 \\
      --file after/libLLVM-16.so.1=build/packed/libLLVM-16.so.1
  LD_LIBRARY_PATH=/tmp/ab/after llc-16 --version

  # An eMMC with a slower seek, and a larger read-ahead:
  elflayout storage mount SRC MNT --preset emmc --seek-ms 0.8 --read-ahead-kb 512

  elflayout storage presets            # the device models
  elflayout storage list               # our active mounts
  elflayout storage cleanup            # unmount mounts left by dead servers

notes:
  latency of each read request = seek(distance from the previous request's end) +
  size / bandwidth, one request at a time (docs/storage.md). Only reads that miss the
  page cache reach the emulated disk: hot runs are unaffected. Needs /dev/fuse and
  fusermount3 (root to set read_ahead_kb).
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="action", metavar="ACTION", required=True)
    m = sub.add_parser("mount", help="serve SRC at MNT until Ctrl-C / SIGTERM",
                       formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EPILOG)
    m.add_argument("src", metavar="SRC", nargs="?", help="directory to serve (read-only); omit with --file")
    m.add_argument("mnt", metavar="MNT", help="mount point (an existing directory)")
    m.add_argument("--file", action="append", default=[], metavar="NAME=PATH",
                   help="serve file PATH as MNT/NAME instead of a directory (repeatable; one emulated disk)")
    m.add_argument("--preset", default="hdd", help="device model: hdd, emmc, sata-ssd, cloud, none (default hdd)")
    m.add_argument("--seek-ms", type=float, help="override the average (far) seek, ms")
    m.add_argument("--short-seek-ms", type=float, help="override the shortest non-sequential seek, ms")
    m.add_argument("--seek-span-mb", type=float, help="override the distance (MiB) from which a seek is full")
    m.add_argument("--bandwidth-mb-s", type=float, help="override the transfer rate, MB/s (10^6 B/s)")
    m.add_argument("--read-ahead-kb", type=int, default=128,
                   help="read_ahead_kb of the mount (default 128, as in the experiments; -1 keeps the kernel's)")
    m.add_argument("--max-read-kb", type=int, help="largest read request (mount option max_read)")
    m.add_argument("--info", action="store_true", help="print the mount's info as JSON on stdout once mounted")
    sp = sub.add_parser("presets", help="list the device models")
    sp.add_argument("--json", action="store_true", help="as JSON")
    sl = sub.add_parser("list", help="list active elflayout storage mounts")
    sl.add_argument("--json", action="store_true", help="as JSON")
    sub.add_parser("cleanup", help="unmount storage mounts whose server or owner is gone")


def _mount(args) -> int:
    ra = None if args.read_ahead_kb is not None and args.read_ahead_kb < 0 else args.read_ahead_kb
    if args.file and args.src:
        raise ElflayoutError("storage mount: give either SRC or --file NAME=PATH, not both")
    if not args.file and not args.src:
        raise ElflayoutError("storage mount: nothing to serve (SRC or --file NAME=PATH)")
    src = args.src
    if args.file:
        src = {}
        for spec in args.file:
            name, eq, path = spec.partition("=")
            if not eq or not name or not path:
                raise ElflayoutError(f"--file {spec}: expected NAME=PATH")
            if name in src:
                raise ElflayoutError(f"--file {spec}: {name} given twice")
            src[name] = path
    st = SlowStorage(src, preset=args.preset, read_ahead_kb=ra, mountpoint=args.mnt,
                     max_read_kb=args.max_read_kb, seek_ms=args.seek_ms, short_seek_ms=args.short_seek_ms,
                     seek_span_mb=args.seek_span_mb, bandwidth_mb_s=args.bandwidth_mb_s)
    # Signals only set a flag: raising from a handler could cut start-up or unmounting
    # short at any point. SIGINT explicitly: a shell's background job starts with it ignored.
    stop = {"why": None}

    def on_signal(signum, frame):
        stop["why"] = signal.Signals(signum).name

    sigs = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    old = {sig: signal.signal(sig, on_signal) for sig in sigs}
    try:
        with st:
            if not stop["why"]:
                info = st.info()
                mr = info["max_request_bytes"]
                what = st.src if st.files is None else f"{len(st.files)} file(s)"
                print(f"elflayout storage: serving {what} at {st.path} ({st.preset}: {st.model.describe()}; "
                      f"read_ahead_kb {info['read_ahead_kb']}, largest request "
                      f"{mr // 1024 if mr else '?'} KiB); Ctrl-C to unmount", file=sys.stderr)
                if args.info:
                    print(json.dumps(info, indent=2), flush=True)
            while st.running and not stop["why"]:
                time.sleep(0.1)
            why = stop["why"] or "server exited"
        s = st.stats()
        print(f"elflayout storage: unmounted {args.mnt} ({why}); {s['requests']} read requests, "
              f"{s['bytes'] / 1e6:.1f} MB, {s['delay_s']:.3f} s modelled delay", file=sys.stderr)
    finally:
        for sig, h in old.items():
            signal.signal(sig, h)
    if why == "server exited":
        raise ElflayoutError(f"{args.mnt}: the storage server exited unexpectedly (mount removed)")
    return 0


def run(args: argparse.Namespace) -> int:
    if args.action == "mount":
        return _mount(args)
    if args.action == "presets":
        if args.json:
            print(json.dumps({k: {"description": d, **m.params()} for k, (m, d) in PRESETS.items()}, indent=2))
            return 0
        print(f"{'preset':<9} {'seek ms':>8} {'short':>6} {'span MiB':>9} {'MB/s':>6}  description")
        for k, (m, d) in PRESETS.items():
            print(f"{k:<9} {m.seek_ms:>8g} {m.short_seek_ms:>6g} {m.seek_span_mb:>9g} "
                  f"{m.bandwidth_mb_s:>6g}  {d}")
        return 0
    if args.action == "list":
        rows = []
        for m in server.fuse_mounts():
            rows.append({"mount": m.path, "dev": m.dev, "dead": server.is_dead(m.path),
                         "read_ahead_kb": server.read_ahead_kb(m)})
        if args.json:
            print(json.dumps(rows, indent=2))
        else:
            for r in rows:
                print(f"{r['mount']}  bdi {r['dev']}  read_ahead_kb {r['read_ahead_kb']}"
                      f"{'  (server gone)' if r['dead'] else ''}")
        return 0
    if args.action == "cleanup":
        for p in server.cleanup_stale():
            print(f"removed {p}")
        return 0
    raise ElflayoutError(f"storage: unknown action {args.action}")
