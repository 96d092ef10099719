"""The child program of the real-load check (realload.py): loads a library with the
system's own ld.so and reports what it saw.

Run as a file by any python3 (also a system root's own, under chroot, e.g. Debian 11's
3.9), so it uses the standard library only and imports nothing from elflayout:

  python3 loadprobe.py dlopen LIB
      dlopen LIB (RTLD_GLOBAL | RTLD_NOW: binds and version-checks everything);
      exit 0, or print ld.so's message and exit 1.
  python3 loadprobe.py state LIB RANGES OUT PAD
      after malloc(PAD) (PAD > 0 shifts the C heap: bytes that move with it are heap
      addresses, not relocations), dlopen LIB (RTLD_LOCAL | RTLD_NOW) and write to OUT
      the bytes at LIB's link-time ranges RANGES (JSON [[lo, hi], ...]) plus its load
      base; print {"base": B}, or {"error": MESSAGE} and exit 1.
"""

import ctypes
import json
import os
import sys


def _message(e):
    """ld.so's refusal; its text may quote bytes of a damaged file that are not UTF-8
    (ctypes then raises UnicodeDecodeError instead of OSError)."""
    if isinstance(e, UnicodeDecodeError):
        return e.object.decode("utf-8", "replace")
    return str(e)


def dlopen(path):
    try:
        ctypes.CDLL(path, mode=os.RTLD_GLOBAL | os.RTLD_NOW)
    except (OSError, UnicodeDecodeError) as e:
        print(_message(e))
        return 1
    return 0


def state(path, ranges, out, pad):
    if pad:
        libc = ctypes.CDLL(None)
        libc.malloc.restype = ctypes.c_void_p
        state.keep = libc.malloc(pad)
    try:
        h = ctypes.CDLL(path, mode=os.RTLD_LOCAL | os.RTLD_NOW)
    except (OSError, UnicodeDecodeError) as e:
        print(json.dumps(dict(error=_message(e))))
        return 1
    # glibc's handle is the object's struct link_map, whose first field is l_addr (<link.h>):
    # the load base, without /proc (absent in a bare chroot).
    base = ctypes.c_void_p.from_address(h._handle).value or 0
    with open(out, "wb") as f:
        for lo, hi in ranges:
            f.write(ctypes.string_at(base + lo, hi - lo))
    print(json.dumps(dict(base=base)))
    return 0


def main(argv):
    if len(argv) == 3 and argv[1] == "dlopen":
        return dlopen(argv[2])
    if len(argv) == 6 and argv[1] == "state":
        return state(argv[2], json.loads(argv[3]), argv[4], int(argv[5]))
    print("usage: loadprobe.py dlopen LIB | state LIB RANGES OUT PAD", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
