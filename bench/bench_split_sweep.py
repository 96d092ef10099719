#!/usr/bin/env python3
"""Sweep: ``split --check`` with lld, gold and GNU ld over the static archives of Debian
-dev packages (C, C++, hand-written assembly, glibc); prints the counts.

The packages are fetched with ``apt-get download`` and unpacked into the cache
(``targets.fetch_debs``), never into the repository. Every archive goes through
``elflayout split ARCHIVE -o DIR --check --linker lld --linker gold --linker bfd --json``
(a child process, ``--timeout`` seconds); each linker's verdict is counted:

  identical         the original-order links of the originals and the split objects agree;
  could not check   the linker refused the *original* objects (its first error line is
                    printed: the archive is not linkable on its own that way);
  differs           the links differ (target 0).

An archive ``split`` refuses as a whole (not x86-64 objects, a thin archive) is counted
apart with its one-line reason.

Run:  python3 bench/bench_split_sweep.py [--only NAME...] [--max N] [--timeout 1800]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

from elflayout.targets import fetch_debs  # noqa: E402

LINKERS = ("lld", "gold", "bfd")
# Debian 12 -dev packages with static archives, by what their code is written in.
PACKAGES = {
    "C": ["zlib1g-dev", "libbz2-dev", "liblzma-dev", "libexpat1-dev", "libpcre2-dev", "libsqlite3-dev",
          "libncurses-dev", "libreadline-dev", "libfuse3-dev", "uuid-dev", "libselinux1-dev", "libsepol-dev",
          "libxml2-dev", "libyaml-dev", "libpng-dev", "libidn2-dev", "libtasn1-6-dev", "libmagic-dev",
          "libbrotli-dev", "libfreetype-dev", "libtirpc-dev", "libx11-dev", "libxcb1-dev", "libxau-dev",
          "libxdmcp-dev", "libxext-dev", "libice-dev", "libsm-dev", "libxrender-dev", "libxfixes-dev",
          "libgpg-error-dev", "libxmlsec1-dev", "tcl8.6-dev", "libpq-dev"],
    "C++": ["libgtest-dev", "libgnutls28-dev"],
    "assembly": ["libssl-dev", "libgmp-dev", "nettle-dev", "libjpeg62-turbo-dev", "libffi-dev", "libgcrypt20-dev"],
    "glibc": ["libc6-dev", "libcrypt-dev"],
}
# Archives that are not code of their own package's build (or are linker stubs).
SKIP = {"libc_nonshared.a", "libpthread_nonshared.a"}


def archives(root: Path) -> list[Path]:
    out = []
    for p in sorted(root.glob("usr/lib/**/*.a")):
        # libm.a is a GNU ld script naming libm-2.36.a and libmvec.a; glibc >= 2.34 ships
        # libpthread.a, libdl.a, librt.a, libutil.a, libanl.a empty (their code is in libc.a).
        if p.is_file() and not p.is_symlink() and p.name not in SKIP and p.read_bytes()[:8] == b"!<arch>\n" \
                and p.stat().st_size > 8:
            out.append(p)
    return out


def sweep_one(archive: Path, timeout: float) -> dict:
    """One archive through split --check with every linker: the JSON document's verdicts."""
    with tempfile.TemporaryDirectory(prefix="elflayout-sweep-") as td:
        cmd = [sys.executable, "-m", "elflayout", "split", str(archive), "-o", td, "--json", "--check"]
        for lk in LINKERS:
            cmd += ["--linker", lk]
        env = dict(os.environ, PYTHONPATH=str(ROOT / "tools"), OPENBLAS_NUM_THREADS="1")
        t0 = time.time()
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
        except subprocess.TimeoutExpired:
            return {"archive": archive.name, "outcome": "timeout", "seconds": timeout}
        secs = round(time.time() - t0, 1)
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("elflayout")]
    if r.returncode not in (0, 1) or not r.stdout.strip():
        return {"archive": archive.name, "outcome": f"exit {r.returncode}", "seconds": secs,
                "message": lines[-1] if lines else r.stderr.strip()[-300:]}
    doc = json.loads(r.stdout)
    verdicts = {}
    for c in doc["check"] or []:
        if c["could_not_check"]:
            verdicts[c["linker"]] = ("could not check", c["could_not_check"])
        elif c["identical"]:
            verdicts[c["linker"]] = ("identical", f"{c['style']} link, {c['bytes_compared']:,} bytes")
        else:
            verdicts[c["linker"]] = ("differs", c["first_difference"])
    # The check's second part: the split objects linked in other orders (reversed, shuffled).
    others = [("identical" if o["identical"] else "differs", f"{o['linker']} {o['order']} order: "
               f"{o.get('first_difference') or ''}") for o in doc.get("other_orders") or []]
    return {"archive": archive.name, "outcome": f"exit {r.returncode}", "seconds": secs, "verdicts": verdicts,
            "other_orders": others, "objects": doc["summary"]["objects"], "units": doc["summary"]["units"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", nargs="*", help="archive names to sweep (default: all)")
    ap.add_argument("--max", type=int, help="sweep at most N archives (smallest first)")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per archive (default 1800)")
    ap.add_argument("--json", metavar="FILE", help="also write every archive's verdicts to FILE")
    a = ap.parse_args()
    found = []
    for kind, pkgs in PACKAGES.items():
        root = fetch_debs(pkgs, f"split-sweep-{kind.lower().replace('+', 'x')}")
        found += [(kind, p) for p in archives(root)]
    if a.only:
        found = [(k, p) for k, p in found if p.name in a.only]
    found.sort(key=lambda kp: kp[1].stat().st_size)
    if a.max:
        found = found[:a.max]
    print(f"# bench_split_sweep: {len(found)} archives ("
          + ", ".join(f"{k} {n}" for k, n in Counter(k for k, _ in found).items()) + f"), linkers {', '.join(LINKERS)}")
    counts, rows = Counter(), []
    t0 = time.time()
    for k, (kind, p) in enumerate(found, 1):
        res = dict(sweep_one(p, a.timeout), kind=kind)
        rows.append(res)
        for lk, (v, why) in res.get("verdicts", {}).items():
            counts[v] += 1
            counts[(lk, v)] += 1
            if v != "identical":
                print(f"  {p.name} ({kind}) {lk}: {v}: {why}")
        for v, why in res.get("other_orders", []):
            counts[("other", v)] += 1
            if v != "identical":
                print(f"  {p.name} ({kind}) other order differs: {why}")
        if "verdicts" not in res:
            counts[res["outcome"]] += 1
            print(f"  {p.name} ({kind}): {res['outcome']}: {res.get('message', '')}")
        print(f"  [{k}/{len(found)}] {p.name}: {res['outcome']} in {res['seconds']} s", file=sys.stderr, flush=True)
    print(f"archives:                                 {len(rows)}")
    for v in ("identical", "could not check", "differs"):
        per = ", ".join(f"{lk} {counts[(lk, v)]}" for lk in LINKERS)
        print(f"{v + ':':<42}{counts[v]:>4}   ({per})" + ("   (target 0)" if v == "differs" else ""))
    print(f"{'other-order links compared:':<42}{counts[('other', 'identical')] + counts[('other', 'differs')]:>4}"
          f"   (differ {counts[('other', 'differs')]}; target 0)")
    other = {k: v for k, v in counts.items() if isinstance(k, str) and k.startswith(("exit", "timeout"))}
    print(f"archives split refused or timed out:      {sum(other.values())} {dict(other) or ''}")
    print(f"time: {time.time() - t0:.0f} s")
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1))
    return 1 if counts["differs"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
