#!/usr/bin/env python3
"""The link-time self form side by side with the relr link: pages read at a selectively-cold start.

libpython3.11 is linked with lld 16 from Debian's PIC objects (libpython3.11-pic.a) three
ways through the library functions behind `elflayout link --pack`: plain, `relr`
(-z pack-relative-relocs) and `self` (relocs/linkself.py: relrhack's way, loads on any
glibc). The python3.11 launcher runs `import json, decimal, asyncio, re` through each; only
the library is evicted before a run, pages added to the page cache for it are counted
with tracefs (filemap:mm_filemap_add_to_page_cache), read_ahead_kb 128 (restored
afterwards), runs interleaved in a seeded shuffled order.

Run:  python3 bench/bench_pack_linkself.py [--runs 5]   (root, tracefs, lld 16)
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(ROOT / "bench"))

from bench_pack_forms import RA_KB, one_run, parse_args, print_pages, readahead_session  # noqa: E402
from elflayout.relocs import linkself  # noqa: E402
from elflayout.targets import libpython  # noqa: E402
from elflayout.tracefs import tracefs_status  # noqa: E402


def _run(cmd: list[str]) -> int:
    return subprocess.run(cmd, stdout=subprocess.DEVNULL).returncode


def main() -> int:
    a = parse_args(__doc__)
    why = tracefs_status()
    if why or not shutil.which("ld.lld-16"):
        print(f"skipped: {why or 'ld.lld-16 is not installed'}")
        return 0
    d = libpython.prepare("lld")
    env_extra = dict(d["env"])
    argv = d["workloads"]["imports"]
    with tempfile.TemporaryDirectory(prefix="elflayout-linkself-") as td:
        td = Path(td)
        (td / "bin").mkdir()
        (td / "bin" / "ld.lld").symlink_to(shutil.which("ld.lld-16"))
        base = [a for a in d["link_cmd"] if not a.startswith("-Wl,-Map=")]
        base = base[:1] + ["-B", str(td / "bin")] + base[1:]
        libs = {}
        for v in ("plain", "relr", "self"):
            (td / v).mkdir()
            out = td / v / libpython.SONAME
            cmd = linkself.with_output(base, str(out))
            if v == "plain":
                rc = _run(cmd)
            elif v == "relr":
                rc = linkself.link_relr(cmd, True, str(out), _run)
            else:
                st = linkself.link(cmd, True, str(out), _run)
                rc = st if isinstance(st, int) else 0
                print(f"# self: {st['self_applied']:,} of {st['relr_relocations']:,} DT_RELR relocations applied by "
                      f"the routine, {st['kept_for_ld_so']:,} back to RELA; tables {st['tables']}; "
                      f"{st['links']} links")
            if rc:
                print(f"link of the {v} variant failed (exit {rc})")
                return 1
            libs[v] = out
        (td / "deps").mkdir()
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")} | env_extra
        outs = {v: subprocess.run(argv, capture_output=True, check=True, env=env | {"LD_LIBRARY_PATH": str(p.parent)}
                                  ).stdout for v, p in libs.items()}
        print(f"# program output identical across variants: {len(set(outs.values())) == 1}")
        rng = random.Random(a.seed)
        order = [v for _ in range(a.runs) for v in rng.sample(list(libs), len(libs))]
        res = {v: [] for v in libs}
        with readahead_session() as old:
            for v in order:
                res[v].append(one_run(libs[v], libs[v].parent, argv, td / "deps", env_extra))
    print(f"## pages of {libpython.SONAME} (lld 16) read at a selectively-cold start of "
          f"`python3.11 -c 'import json, decimal, asyncio, re'`, read_ahead_kb {RA_KB} (restored to {old})")
    print_pages(res, "plain")
    return 0


if __name__ == "__main__":
    sys.exit(main())
