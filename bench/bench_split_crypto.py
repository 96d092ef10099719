#!/usr/bin/env python3
"""A second archive through the whole pipeline: OpenSSL's libcrypto.a (Debian's libssl-dev,
built without function sections, with perlasm assembly).

``libcrypto.so.3`` is relinked from the archive (``elflayout.targets.libcrypto``; Debian's
symbol versions, ``-z now -z nodelete``), profiled with valgrind (``--data``) on
``openssl dgst -sha256 FILE`` under the measurement's own conditions (``profile
--clean-env``, LC_ALL=C, stdout on /dev/null), ordered and relinked, each relink's digests and ciphers checked equal to
Debian's library's, then measured selective at read_ahead_kb 128 in one session:

* Debian's library (a private copy: measuring evicts the file under test);
* the default relink (archive order) with lld;
* object order (``elflayout order --format objects``) with lld;
* split + function order (``elflayout order --format lld``, after ``elflayout split``),
  unpacked and packed, with lld, and packed with gold and GNU ld (``--linkers``; GNU ld
  with its data part, `.data.elflayout` after `.data`, out of PT_GNU_RELRO); and lld with
  hot-last code and .dynstr order, without and with the data script (``--data-script``), packed.

Debian's library is stripped, so the relinks are measured stripped too (``strip
--strip-all``, before packing); the packed lld relink also unstripped, to show what the
symbol table costs (read-around past the last loaded page reads it).

``--default-path``: the default path alone (``elflayout link --profile P --linker lld --
CMD`` on Debian's objects as they are, in-process ``order.relink.relink``, stripped as
Debian ships it) beside the best recipe (split + lld hot-last + data script + .dynstr,
packed, stripped) and the default relink, in one session.

``--levers``: held out from the libpython floor, the best recipe with each of its
data-script levers (``bench_split.FLOOR_LEVERS``), one session.

Usage: python3 bench/bench_split_crypto.py [--runs N] [--linkers lld,gold,bfd] [--skip-measure] [--default-path]
       [--levers]
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(ROOT / "bench"))

import bench_pipeline as bp  # noqa: E402
import bench_split  # noqa: E402
from bench_split import MEASURED_CONDITIONS  # noqa: E402


def profile(out: Path, d: dict) -> Path:
    """valgrind profile of the dgst workload under the measured runs' conditions."""
    envs = sum((["--env", f"{k}={v}"] for k, v in d["env"].items()), [])
    return bp.cached_profile(out, d["lib"], ["profile", "--target", d["lib"], "--map", d["map"], "--data", *envs,
                                             *MEASURED_CONDITIONS, "-o", out, "--force", "--",
                                             *d["workloads"]["dgst"]])


def stripped(lib: Path, dest: Path) -> Path:
    """``bench_split.stripped``, verified against Debian's outputs."""
    from elflayout.targets import libcrypto

    out = bench_split.stripped(lib, dest)
    libcrypto.verify(dest)
    return out


def default_path(w: Path, base: dict, sprof: Path, tag: str = "", **opts) -> Path:
    """libcrypto.so.3 relinked by `elflayout link`'s default path (``order.relink.relink``):
    the link command of Debian's objects as they are, with SPROF (the split build's profile:
    its data sections are the split objects') and the linker, nothing else (``opts``: other
    ``LinkOptions``, e.g. ``hot_strings=True``); then stripped as Debian ships it and
    verified. Returns the stripped library."""
    from elflayout.targets import libcrypto

    tag = "".join(f"-{k.replace('_', '-')}" for k in opts) + tag
    out = w / "libs" / f"default-path-lld{tag}-unstripped" / libcrypto.SONAME
    out.parent.mkdir(parents=True, exist_ok=True)
    cmd = list(base["link_cmd"])
    cmd[cmd.index("-o") + 1] = str(out)
    bp.default_link([c.replace(str(base["map"]), f"{out}.map") for c in cmd], sprof, **opts)
    libcrypto.verify(out.parent)
    return stripped(out, w / "libs" / f"default-path-lld{tag}")


def best_recipe(w: Path, sbase: dict, sprof: Path, levers=None, tag: str = "") -> Path:
    """The best recipe: split + lld hot-last code, data script and .dynstr order, stripped
    then packed. ``levers``: the data script's options; ``tag`` names their files."""
    from elflayout.targets import libcrypto

    extra = bp.full_recipe_args(w / f"crypto-split-full{tag}", sprof, sbase["lib"], sbase["map"], levers=levers)
    print(f"  relink: libcrypto.prepare('lld', split=True, extra_link_args={extra})", flush=True)
    d = libcrypto.prepare("lld", split=True, extra_link_args=extra)
    p = bp.pack(stripped(d["lib"], w / "libs" / f"split-ordered-stripped-lld-hot-last-data-dynstr{tag}"),
                w / "libs" / f"split-ordered-packed-lld-hot-last-data-dynstr{tag}")
    libcrypto.verify(p.parent)
    return p


def levers_floor(w: Path, runs: int) -> None:
    """Held out: the libpython floor's data-script levers (``bench_split.FLOOR_LEVERS``)
    on the best recipe, the best recipe with ``--order-dynsym`` (and with its bloom filter
    kept at 8 bits a symbol), and the default path with and without ``--hot-strings``,
    one session; every variant's digests and ciphers verified."""
    from elflayout.targets import libcrypto

    sbase = libcrypto.prepare("lld", split=True)
    sprof = profile(w / "crypto-split-clean.profile.json", sbase)
    argv_ = libcrypto.system_copy()["workloads"]["dgst"]
    variants = {}
    for name, levers in bench_split.FLOOR_LEVERS.items():
        tag = "".join(f"-{k}" for k, v in levers.items() if v)
        lib = best_recipe(w, sbase, sprof, levers, tag)
        variants[name] = (lib, bp.variant_cmd(lib.parent, argv_, {}))
        if not tag:  # the dynamic-symbol order held out (bench_pipeline's libLLVM rows)
            for row, q in bench_split.dynsym_rows(lib, argv_[0]).items():
                libcrypto.verify(q.parent)
                variants[f"{name}, {row}"] = (q, bp.variant_cmd(q.parent, argv_, {}))
    base = libcrypto.prepare("lld")
    envs = sum((["--env", f"{k}={v}"] for k, v in sbase["env"].items()), [])
    rprof = bp.with_recorded_strings(sprof, sbase["lib"], sbase["workloads"]["dgst"], [*envs, *MEASURED_CONDITIONS],
                                     w / "crypto-split-clean+strings.profile.json")
    for name, prof, opts in ((DEFAULT, sprof, {}), ("default path, --hot-strings, stripped", sprof, {"hot_strings": True}),
                             ("default path, --hot-strings, strings recorded (profile --strings), stripped", rprof,
                              {"hot_strings": True, "tag": "-recorded"})):
        lib = default_path(w, base, prof, **opts)
        variants[name] = (lib, bp.variant_cmd(lib.parent, argv_, {}))
    bench_split.measured_table(w / "crypto-floor.results.json", variants, runs, sprof, sbase["lib"], "best recipe",
                               f"libcrypto.so.3 (split, stripped, packed): the best recipe and the data-script "
                               f"levers — selective, read_ahead_kb {bp.RA_KB}")


BEST = "split+function order+packed lld+hot-last+data+dynstr"
DEFAULT = "default path (elflayout link, no flag), stripped"


def default_vs_best(w: Path, runs: int) -> None:
    """The default path against the best recipe and the default relink, one session."""
    from elflayout.targets import libcrypto

    base = libcrypto.prepare("lld")
    sbase = libcrypto.prepare("lld", split=True)
    sprof = profile(w / "crypto-split-clean.profile.json", sbase)
    argv_ = libcrypto.system_copy()["workloads"]["dgst"]
    variants = {n: (lib, bp.variant_cmd(lib.parent, argv_, {})) for n, lib in (
        ("default relink lld", stripped(base["lib"], w / "libs" / "default-lld")),
        (BEST, best_recipe(w, sbase, sprof)),
        (DEFAULT, default_path(w, base, sprof)))}
    summ, _lim, _rows = bench_split.measured_table(
        w / "crypto-default.results.json", variants, runs, sprof, sbase["lib"], "default relink lld",
        f"libcrypto.so.3: the default path against the best recipe — selective, read_ahead_kb {bp.RA_KB}")
    b, d = (summ.get(n, {}).get("pages") for n in (BEST, DEFAULT))
    if b and d:
        print(f"\nGoal: the default path within 2% of the best recipe: {d:,.0f} pages, best recipe {b:,.0f} "
              f"({(d / b - 1) * 100:+.1f}%)", flush=True)


def main(argv=None) -> int:
    from elflayout.targets import libcrypto

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--linkers", default="lld,gold,bfd", help="linkers of the split + function order + packed rows")
    ap.add_argument("--skip-measure", action="store_true")
    ap.add_argument("--default-path", action="store_true",
                    help="only the default path (elflayout link, no flag) against the best recipe, one session")
    ap.add_argument("--levers", action="store_true",
                    help="only the best recipe and the data-script levers of bench_split --floor, one session")
    a = ap.parse_args(argv)
    linkers = [x for x in a.linkers.split(",") if x]
    w = bp.work_dir() / "split-crypto"
    w.mkdir(parents=True, exist_ok=True)
    if a.default_path:
        default_vs_best(w, a.runs)
        return 0
    if a.levers:
        levers_floor(w, a.runs)
        return 0
    workload = " ".join(libcrypto.WORKLOADS["dgst"])
    print(f"## libcrypto.so.3 from libcrypto.a (OpenSSL 3, libssl-dev), `openssl {workload}`, selective, "
          f"read_ahead_kb {bp.RA_KB}\n", flush=True)
    print("  relink: libcrypto.prepare(\"lld\") (elflayout.targets, cached; outputs verified against Debian's)",
          flush=True)
    base = libcrypto.prepare("lld")
    prof = profile(w / "crypto-clean.profile.json", base)
    objs = w / "crypto.objects.txt"
    bp.write_order(objs, prof, "objects", objects_from=base["map"])
    order = [ln for ln in objs.read_text().splitlines() if ln.strip()]
    print(f"  relink: libcrypto.prepare(\"lld\", object_order=<{objs.name}>)", flush=True)
    by_object = libcrypto.prepare("lld", object_order=order)
    sbase = libcrypto.prepare("lld", split=True)
    sprof = profile(w / "crypto-split-clean.profile.json", sbase)
    files = {}
    for fmt in ("lld", "gold", "ld-script"):
        files[fmt] = w / f"crypto-split.{fmt}"
        bp.write_order(files[fmt], sprof, fmt, lib=sbase["lib"], objects_from=sbase["map"])
    extra = {"lld": [f"--symbol-ordering-file={bp.hashed_copy(files['lld'])}", "--no-warn-symbol-ordering"],
             "gold": [f"--section-ordering-file={bp.hashed_copy(files['gold'])}"],
             "bfd": [f"-Wl,-T,{bp.hashed_copy(files['ld-script'])}"]}
    # lld with hot-last code, the data script and hot .dynstr names first
    full = {k: w / f"crypto-split-full.{k}" for k in ("lld", "ld", "rsp")}
    bp.write_order(full["lld"], sprof, "lld", data_script=full["ld"], dynstr_out=full["rsp"], lib=sbase["lib"],
                   objects_from=sbase["map"], algorithm="hot-last")
    h = {k: bp.hashed_copy(v) for k, v in full.items()}
    extra["lld+hot-last+dynstr"] = [f"--symbol-ordering-file={h['lld']}", "--no-warn-symbol-ordering",
                                    f"-Wl,@{h['rsp']}"]
    extra["lld+hot-last+data+dynstr"] = [*extra["lld+hot-last+dynstr"][:2], f"-Wl,-T,{h['ld']}",
                                         *extra["lld+hot-last+dynstr"][2:]]
    sys_d = libcrypto.system_copy()
    argv_ = sys_d["workloads"]["dgst"]

    def row(lib: Path) -> tuple:
        return lib, bp.variant_cmd(lib.parent, argv_, {})

    # Debian ships its library stripped; an unstripped relink's .symtab follows the last
    # PT_LOAD, and read-around past .data reads it. Relinks are measured stripped too
    # (strip --strip-all, then packed), and the best one also as linked.
    variants = {"Debian's libcrypto.so.3 (stripped)": row(sys_d["lib"]),
                "default relink lld": row(stripped(base["lib"], w / "libs" / "default-lld")),
                "object order lld": row(stripped(by_object["lib"], w / "libs" / "objects-lld")),
                "split baseline lld": row(stripped(sbase["lib"], w / "libs" / "split-lld"))}
    full_rows = ["lld+hot-last+dynstr", "lld+hot-last+data+dynstr"]
    for lk in [*linkers, *full_rows] if "lld" in linkers else linkers:
        ln = lk.split("+")[0]
        print(f"  relink: libcrypto.prepare({ln!r}, split=True, extra_link_args={extra[lk]})", flush=True)
        d = libcrypto.prepare(ln, split=True, extra_link_args=extra[lk])
        tag = lk.replace("+", "-")
        if lk == "lld":
            variants["split+function order lld"] = row(stripped(d["lib"], w / "libs" / f"split-ordered-{tag}"))
            p = bp.pack(d["lib"], w / "libs" / f"split-ordered-packed-unstripped-{tag}")
            libcrypto.verify(p.parent)
            variants["split+function order+packed lld, not stripped"] = row(p)
        p = bp.pack(stripped(d["lib"], w / "libs" / f"split-ordered-stripped-{tag}"),
                    w / "libs" / f"split-ordered-packed-{tag}")
        libcrypto.verify(p.parent)
        variants[f"split+function order+packed {lk}"] = row(p)
    print(f"  every relink and packed copy: {len(libcrypto.VERIFY)} openssl dgst/enc outputs identical to "
          f"Debian's library's (libcrypto.verify)", flush=True)
    if a.skip_measure:
        return 0
    summ, lim, rows = bench_split.measured_table(
        w / "crypto.results.json", variants, a.runs, sprof, sbase["lib"], "default relink lld",
        f"libcrypto.so.3, `openssl {workload}` — selective, read_ahead_kb {bp.RA_KB}")
    deb, best = summ.get("Debian's libcrypto.so.3 (stripped)"), summ.get("split+function order+packed lld")
    if deb and best:
        print(f"\nsplit + function order + packed (lld): {best['pages']:,.0f} pages against {deb['pages']:,.0f} for "
              f"Debian's library ({(best['pages'] / deb['pages'] - 1) * 100:+.1f}%); estimate {lim['pages']:,}")
    for lk in [*linkers, *full_rows]:
        s = summ.get(f"split+function order+packed {lk}")
        if lk != "lld" and s and best:
            print(f"  {lk}: {s['pages']:,.0f} pages ({(s['pages'] / best['pages'] - 1) * 100:+.1f}% vs lld)")
    print(f"code pages read (.text and ordered .text.* sections; touched code {math.ceil(lim['code_bytes'] / bp.PAGE)} "
          f"pages): " + ", ".join(f"{n} {bench_split.text_pages(sm):,}" for n, sm in rows if sm))
    print(bp.determinism_note(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
