#!/usr/bin/env python3
"""Figures of ``elflayout split`` on libpython3.11 (Debian's libpython3.11-pic.a).

1. Split time of the archive's 179 objects (goal ≤ 10 s), library call
   ``elflayout.split.api.split_inputs`` timed on this machine.
2. ``split --check`` with lld, gold and GNU ld (original-order links identical).
3. The pipeline on split objects: libpython linked from the split objects with lld
   (``libpython.prepare("lld", split=True)``), profiled with valgrind on
   ``python3.11 -c "import json, decimal, asyncio, re"``, ordered at function granularity
   (``elflayout order --format lld`` / ``gold`` / ``ld-script``), relinked with lld,
   gold and GNU ld, packed, and measured selective at read_ahead_kb 128 against the
   object-ordered+packed variant of bench_pipeline (goal: ≤ 950 pages with lld, gold
   and GNU ld within 5% of lld).
4. CPython's regression tests through the function-ordered split library
   (``--regrtest``; Debian's libpython3.11-testsuite), compared with Debian's python3.11.
5. A second archive, OpenSSL's libcrypto.a: split --check with three linkers and
   libcrypto.so.3 relinked in reversed function order, compared with Debian's library.

6. The default path (``elflayout link --profile P --linker lld -- CMD``, in-process
   ``order.relink.relink``, as ``make demo`` runs it) measured beside the best recipe
   (``--default-path``: those two and the baseline alone, one session).

7. The floor (``--floor``): the best recipe, stripped and packed, against itself with
   each data-script lever (the touched objects' merged constants in the hot pool, big
   sparsely touched tables at the tail of the hot data), with hot string pools
   (``split.hotstrings``, as ``link --hot-strings``) alone and with them, and the default
   path with and without ``--hot-strings`` and with a profile that recorded the strings
   and read-only bytes read (``profile --strings``: link's defaults then move those
   strings and place the read-only data by those bytes; goal ≤ 900 pages), one session;
   every variant's output compared with Debian's python3.11.

Usage: python3 bench/bench_split.py [--runs N] [--regrtest] [--skip-measure] [--default-path] [--floor]
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(ROOT / "bench"))

import bench_pipeline as bp  # noqa: E402

DEBIAN_PYTHON = "/usr/bin/python3.11"
# Profile under the conditions every measured run has (controls.FixedEnv keeps
# PATH, HOME, TERM, TMPDIR, USER and sets LC_ALL=C; measure.runner sends stdout to
# /dev/null): a caller's PYTHONUNBUFFERED=1 makes Python build its standard streams
# without BufferedWriter (code the measured runs execute), and in the C locale Python
# decodes through UTF-8 mode (_Py_DecodeUTF8Ex, the _codecs ASCII decoder), code a profile
# taken in a C.UTF-8 shell never runs. And repeat the run: hash randomisation moves the
# garbage collector's passes, so each run traverses some other types (iter_traverse,
# gen_traverse, super_traverse).
MEASURED_CONDITIONS = ["--clean-env", "--env", "LC_ALL=C", "--stdout", "null"]
PROFILE_RUNS = 3
REGRTESTS = ["test_json", "test_decimal", "test_re", "test_asyncio", "test_struct", "test_unicode"]


def split_time() -> None:
    from elflayout.split.api import split_inputs, summary
    from elflayout.targets import libpython

    objs = libpython.objects()
    with tempfile.TemporaryDirectory() as td:
        t, c = time.monotonic(), time.process_time()
        reps = split_inputs(objs, td)
        dt, dc = time.monotonic() - t, time.process_time() - c
    s = summary(reps)
    load = os.getloadavg()[0]
    print(f"split of {len(objs)} libpython objects: {dt:.1f} s wall, {dc:.1f} s CPU (goal ≤ 10 s; load average "
          f"{load:.1f} on {os.cpu_count()} CPUs) — {s['objects_split']} split, "
          f"{s['units']:,} functions and data objects -> {s['sections']:,} sections, "
          f"{s['new_relocations']:,} new relocations, {s['glued']:,} neighbours kept together, "
          f"{s['sections_kept_whole']} sections kept whole", flush=True)


def split_check(archive: Path, of: str = "") -> None:
    """``split --check`` of ARCHIVE with lld, gold and GNU ld, its lines indented; a failure
    ends the bench (OF names the archive in that message)."""
    with tempfile.TemporaryDirectory() as td:
        r = bp.cli("split", archive, "-o", td, "--check", "--linker", "lld", "--linker", "gold", "--linker", "bfd",
                   check=False)
    print("\n".join("    " + ln for ln in r.stdout.strip().splitlines()), flush=True)
    if r.returncode:
        raise SystemExit(f"bench_split: split --check{of} failed: {r.stderr.strip()}")


def check_all() -> None:
    from elflayout.targets.libpython import ARCHIVE, DEV_PACKAGES
    from elflayout.targets import fetch_debs

    split_check(fetch_debs(DEV_PACKAGES, "libpython3.11") / ARCHIVE)


def split_profiles(w: Path, base: dict, argv: list, envs: list) -> tuple[Path, Path]:
    """One run in the caller's conditions (the first recipe, kept for comparison), and the
    improved recipe: PROFILE_RUNS runs under the measurement's own conditions, merged."""
    prof1 = bp.cached_profile(w / "python-split.profile.json", base["lib"],
                              ["profile", "--target", base["lib"], "--map", base["map"], "--data", *envs,
                               "-o", w / "python-split.profile.json", "--force", "--", *argv])
    prof = bp.cached_profile(w / "python-split-clean.profile.json", base["lib"],
                             ["profile", "--target", base["lib"], "--map", base["map"], "--data", *envs,
                              *MEASURED_CONDITIONS, "--repeat", PROFILE_RUNS,
                              "-o", w / "python-split-clean.profile.json", "--force", "--", *argv])
    return prof1, prof


def full_recipe(w: Path, base: dict, tag: str, p: Path, levers=None) -> list:
    """The product's fullest lld recipe (as bench_pipeline's libLLVM): hot-last code
    order, a data script placing the touched data sections, hot .dynstr names first.
    ``levers``: the data script's options. Returns the link arguments."""
    stem = "python-split-full-" + "".join(c if c.isalnum() else "-" for c in tag)
    return bp.full_recipe_args(w / stem, p, base["lib"], base["map"], levers=levers)


def link(lk: str, extra: list) -> dict:
    """libpython relinked from the split objects by LK's linker with EXTRA arguments."""
    from elflayout.targets import libpython

    print(f"  relink: libpython.prepare({lk.split('+')[0]!r}, split=True, extra_link_args={extra})",
          flush=True)
    return libpython.prepare(lk.split("+")[0], split=True, extra_link_args=extra)


def ordered_links(w: Path, base: dict, prof: Path, prof1: Path, envs: list) -> dict:
    """{link name: libpython.prepare record} of the function-ordered relinks: lld, gold and
    GNU ld, lld's fullest recipe from either profile and from the profile with the faults
    of a traced run fed back."""
    files = {}
    for fmt in ("lld", "gold", "ld-script"):
        files[fmt] = w / f"python-split.{fmt}"
        bp.write_order(files[fmt], prof, fmt, lib=base["lib"], objects_from=base["map"])
    extra = {
        "lld": [f"--symbol-ordering-file={bp.hashed_copy(files['lld'])}", "--no-warn-symbol-ordering"],
        "gold": [f"--section-ordering-file={bp.hashed_copy(files['gold'])}"],
        "bfd": [f"-Wl,-T,{bp.hashed_copy(files['ld-script'])}"],
    }
    extra["lld+data"] = full_recipe(w, base, "lld+data", prof)
    extra["lld+data, 1 run"] = full_recipe(w, base, "lld+data, 1 run", prof1)
    linked = {lk: link(lk, extra[lk]) for lk in ("lld", "gold", "bfd", "lld+data", "lld+data, 1 run")}
    # Feedback: the lld+data build traced natively as it is measured; the functions on its
    # code pages that faulted outside the profile are appended to it (merge --faults).
    d = linked["lld+data"]
    trace, fbp = w / "python-split-faults.trace.json", w / "python-split-clean+faults.profile.json"
    bp.cli("profile", "--backend", "trace", "--evict", "--read-ahead-kb", bp.RA_KB, "--target", d["lib"],
           "--map", d["map"], *envs, *MEASURED_CONDITIONS, "-o", trace, "--force", "--", d["launcher"], "-c",
           bp.IMPORTS)
    r = bp.cli("merge", prof, "--faults", trace, "-o", fbp, "--force")
    print("    " + r.stdout.strip().splitlines()[0], flush=True)
    linked["lld+data+faults"] = link("lld+data+faults", full_recipe(w, base, "lld+data+faults", fbp))
    return linked


def default_path(w: Path, prof: Path, tag: str = "", **opts) -> tuple[Path, str]:
    """libpython relinked by `elflayout link`'s default path (``order.relink.relink``, what
    `make demo` runs): the link command of Debian's objects as they are, with PROF (the
    split build's profile under the measured conditions: its data sections are the split
    objects') and the linker, nothing else (``opts``: other ``LinkOptions``, e.g.
    ``hot_strings=True``). Returns (library, variant command)."""
    from elflayout.targets import libpython

    plain = libpython.prepare("lld")
    argv = [str(plain["launcher"]), "-c", bp.IMPORTS]
    out = w / "libs" / ("default-lld" + "".join(f"-{k.replace('_', '-')}" for k in opts) + tag) / plain["lib"].name
    out.parent.mkdir(parents=True, exist_ok=True)
    cmd = list(plain["link_cmd"])
    cmd[cmd.index("-o") + 1] = str(out)
    bp.default_link([c.replace(str(plain["map"]), f"{out}.map") for c in cmd], prof, **opts)
    return out, bp.variant_cmd(out.parent, argv, plain["env"])


def default_vs_best(runs: int) -> None:
    """The default path against the best recipe (lld+data, packed) and the split baseline,
    measured in one session."""
    from elflayout.targets import libpython

    w = bp.work_dir() / "split"
    w.mkdir(parents=True, exist_ok=True)
    base = libpython.prepare("lld", split=True)
    argv = [str(base["launcher"]), "-c", bp.IMPORTS]
    envs = sum((["--env", f"{k}={v}"] for k, v in base["env"].items()), [])
    _prof1, prof = split_profiles(w, base, argv, envs)
    best = link("lld+data", full_recipe(w, base, "lld+data", prof))
    packed = bp.pack(best["lib"], w / "libs" / "split-ordered-packed-lld+data")
    variants = {"split baseline lld": (base["lib"], bp.variant_cmd(base["lib"].parent, argv, base["env"])),
                BEST: (packed, bp.variant_cmd(packed.parent, [best["launcher"], "-c", bp.IMPORTS], best["env"])),
                DEFAULT: default_path(w, prof)}
    summ, _lim, _rows = measured_table(w / "python-default.results.json", variants, runs, prof, base["lib"],
                                       "split baseline lld", "libpython3.11: the default path against the best recipe "
                                       "— selective, read_ahead_kb 128")
    print_default_goal(summ)


def print_default_goal(summ: dict) -> None:
    b, d = (summ.get(n, {}).get("pages") for n in (BEST, DEFAULT))
    if b and d:
        print(f"\nGoal: the default path ≤ 960 pages and within 2% of the best recipe: {d:,.0f} pages, best recipe "
              f"{b:,.0f} ({(d / b - 1) * 100:+.1f}%)", flush=True)


BEST = "split+function order+packed lld+data"
DEFAULT = "default path (elflayout link, no flag)"


def split_variants(w: Path, base: dict, argv: list, linked: dict) -> dict:
    """{variant name: (library, command)}: the split baseline, each ordered link with and
    without packing, and the last stripped and packed (checked to use its C accelerators)."""
    from elflayout.targets import libpython

    variants = {"split baseline lld": (base["lib"], bp.variant_cmd(base["lib"].parent, argv, base["env"]))}
    for lk, d in linked.items():
        a = [d["launcher"], "-c", bp.IMPORTS]
        variants[f"split+function order {lk}"] = (d["lib"], bp.variant_cmd(d["lib"].parent, a, d["env"]))
        p = bp.pack(d["lib"], w / "libs" / f"split-ordered-packed-{lk}")
        variants[f"split+function order+packed {lk}"] = (p, bp.variant_cmd(p.parent, a, d["env"]))
    # As Debian ships it: stripped (an unstripped library's .symtab follows the last
    # PT_LOAD, and read-around past .data reads it), then packed.
    d = linked["lld+data+faults"]
    p = bp.pack(stripped(d["lib"], w / "libs" / "split-ordered-stripped-lld+data+faults"),
                w / "libs" / "split-ordered-stripped-packed-lld+data+faults")
    a = [d["launcher"], "-c", bp.IMPORTS]
    r = subprocess.run([*a[:2], libpython.CHECK], env=dict(os.environ, LD_LIBRARY_PATH=str(p.parent), **d["env"]),
                       capture_output=True, text=True)
    if "True True" not in r.stdout:
        raise SystemExit(f"bench_split: {p}: C accelerators not in use: {r.stdout.strip()} {r.stderr.strip()}")
    variants["split+function order+packed lld+data+faults, stripped"] = (p, bp.variant_cmd(p.parent, a, d["env"]))
    return variants


def print_goals(summ: dict, lim: dict, rows: list, prof: Path, prof1: Path, lib: Path) -> None:
    """The page goals of the split pipeline: lld and the other linkers, .text against the
    touched-code estimate."""
    pk = {lk: (summ.get(f"split+function order+packed {lk}") or {}).get("pages")
          for lk in ("lld", "gold", "bfd", "lld+data", "lld+data, 1 run", "lld+data+faults",
                     "lld+data+faults, stripped")}
    if pk["lld"]:
        print(f"\nGoal ≤ 950 pages with lld: {pk['lld']:,.0f} pages (function order), {pk['lld+data']:,.0f} "
              f"(+ data script and .dynstr order; {pk['lld+data, 1 run']:,.0f} from one run in the caller's "
              f"conditions; {pk['lld+data+faults']:,.0f} with the traced faults fed back, "
              f"{pk['lld+data+faults, stripped']:,.0f} stripped as Debian ships it); gold {pk['gold']:,.0f} "
              f"({(pk['gold'] / pk['lld'] - 1) * 100:+.1f}%), GNU ld {pk['bfd']:,.0f} "
              f"({(pk['bfd'] / pk['lld'] - 1) * 100:+.1f}%) — goal within 5% of lld")
    est = math.ceil(lim["code_bytes"] / bp.PAGE)
    est1 = math.ceil(bp.physical_limit(bp.profile_target(prof1), lib)["code_bytes"] / bp.PAGE)
    print(f".text pages read against the touched-code estimate ({est:,} pages, {lim['functions']:,} functions of "
          f"{prof.name}; {est1:,} from the one-run profile), goal within 15%:")
    for n, sm in rows:
        if sm and "packed" in n:
            t = text_pages(sm)
            print(f"  {n}: {t:,} ({(t / est - 1) * 100:+.1f}%)")
    print(bp.determinism_note(rows))


def pipeline(runs: int, regrtest: bool, skip_measure: bool) -> None:
    from elflayout.targets import libpython

    w = bp.work_dir() / "split"
    w.mkdir(parents=True, exist_ok=True)
    base = libpython.prepare("lld", split=True)
    argv = [str(base["launcher"]), "-c", bp.IMPORTS]
    envs = sum((["--env", f"{k}={v}"] for k, v in base["env"].items()), [])
    prof1, prof = split_profiles(w, base, argv, envs)
    linked = ordered_links(w, base, prof, prof1, envs)
    variants = split_variants(w, base, argv, linked)
    variants[DEFAULT] = default_path(w, prof)
    if regrtest:
        run_regrtests(linked["lld"])
    if skip_measure:
        return
    summ, lim, rows = measured_table(w / "python-split.results.json", variants, runs, prof, base["lib"],
                                     "split baseline lld",
                                     "libpython3.11 from split objects — selective, read_ahead_kb 128")
    print_goals(summ, lim, rows, prof, prof1, base["lib"])
    print_default_goal(summ)


def measured_table(out: Path, variants: dict, runs: int, prof: Path, lib: Path, base_name: str, title: str):
    """Measure VARIANTS in one session; print the physical limit (from PROF, on LIB) and
    the table by section. Returns (summary, limit, rows)."""
    doc = bp.measure(out, variants, runs)
    summ = bp.summarise(doc, {n: lb for n, (lb, _) in variants.items()})
    lim = bp.physical_limit(bp.profile_target(prof), lib)
    print(f"\n  physical limit (split lld baseline, from {prof.name}): {bp.describe_limit(lim)}")
    rows = [(n, summ.get(n)) for n in variants]
    print()
    print(bp.table(rows, lim, base_name, True, title))
    return summ, lim, rows


def text_pages(sm: dict) -> int:
    """Code pages read: ``.text`` and the linkers' ordered ``.text.*`` output sections."""
    return sum(c for k, c in sm["by_section"].items() if k == ".text" or k.startswith(".text."))


def stripped(lib: Path, dest: Path) -> Path:
    """``strip --strip-all`` copy of LIB in DEST (as Debian ships its libraries)."""
    out = dest / lib.name
    dest.mkdir(parents=True, exist_ok=True)
    subprocess.run(["strip", "--strip-all", "-o", out, lib], check=True)
    return out


# What the floor variants must print exactly as Debian's python3.11 does: the moved
# tables at work (Unicode type records, unicodedata, float and decimal constants)
OUTPUT_CHECK = ("import json, decimal, re, unicodedata; s = 'Ünïcödé ΣΑΣ ß ǅ ﬁ 𝔘 ٣'; "
                "print(json.dumps({'a': [1.5, 2e-300, 0.1 + 0.2, 1 / 3]}), decimal.Decimal(1) / 7, "
                "re.findall(r'\\w+', s), s.upper(), s.lower(), s.title(), s.casefold(), "
                "[(c.isidentifier(), c.isprintable(), c.isnumeric()) for c in s], "
                "unicodedata.normalize('NFKD', s), [unicodedata.name(c, '?') for c in s], 2 ** 0.5, "
                "float('1e308') * 10, int('٣'))")
FLOOR_LEVERS = {  # row name -> data script options (Ordering.data_script)
    "best recipe": {"hot_constants": False, "sparse_last": False},
    "+ hot objects' merged constants": {"hot_constants": True, "sparse_last": False},
    "+ sparse tables at the tail of the hot data": {"hot_constants": False, "sparse_last": True},
    "+ both": {"hot_constants": True, "sparse_last": True},
}
FLOOR_HOT_STRINGS = {  # rows linked from objects with hot string pools (split.hotstrings): data script
    # options, and whether the touched objects' other strings still lead .rodata.elflayout
    "+ hot string pools": ({"hot_constants": False, "sparse_last": False}, True),
    "+ hot string pools, other strings left in .rodata": ({"hot_constants": False, "sparse_last": False}, False),
    "+ hot string pools, --hot-constants": ({"hot_constants": True, "sparse_last": False}, True),
    "+ hot string pools, both": ({"hot_constants": True, "sparse_last": True}, True),
}


def floor_profile(w: Path, base: dict, envs: list) -> Path:
    """The best recipe's profile (measured conditions, 3 runs, traced faults fed back),
    made by ``ordered_links`` unless it is there."""
    fbp = w / "python-split-clean+faults.profile.json"
    if not bp.profiles_build(fbp, base["lib"]):
        prof1, prof = split_profiles(w, base, [str(base["launcher"]), "-c", bp.IMPORTS], envs)
        ordered_links(w, base, prof, prof1, envs)
    print(f"  profile: {fbp} (best recipe's: 3 runs under the measured conditions, traced faults merged)", flush=True)
    return fbp


def check_output(lib: Path, d: dict, want: str) -> None:
    """The variant prints what Debian's python3.11 prints for OUTPUT_CHECK; else the bench ends."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON") and k != "LD_LIBRARY_PATH"}
    r = subprocess.run([str(d["launcher"]), "-c", OUTPUT_CHECK], capture_output=True, text=True,
                       env=env | d["env"] | {"LD_LIBRARY_PATH": str(lib.parent)})
    if r.returncode or r.stdout != want:
        raise SystemExit(f"bench_split: {lib}: output differs from Debian's python3.11: {r.stdout[:200]!r} "
                         f"{r.stderr[-300:]}")


def hot_strings_link(w: Path, base: dict, prof: Path, levers: dict, per_object_pools: bool = True) -> dict:
    """The best recipe (with ``levers``) linked from split objects whose strings the
    profiled code and data reach moved into hot pools (``split.hotstrings``, each object
    proved), led by the data script (``string_pool``), as ``link --hot-strings`` does;
    ``per_object_pools``: the touched objects' other strings still lead
    ``.rodata.elflayout``. Returns {lib, launcher, env} (the launcher of the split
    baseline: it finds the library by LD_LIBRARY_PATH)."""
    from elflayout.order import pipeline
    from elflayout.split import hotstrings

    o = pipeline.order(pipeline.Request(prof, "lld", lib=base["lib"], objects_from=base["map"], algorithm="hot-last"))
    secs = {k: v for k, v in hotstrings.hot_sections(o.layout).items() if os.path.isfile(k.split("(", 1)[0])}
    hot = hotstrings.static_hot_strings(secs)
    names = {Path(k).name for k in secs}  # the profile's objects and this link's, same members
    mine = [str(x) for x in base["objects"] if Path(x).name in names]
    moved, tot = hotstrings.rewrite_inputs(base["objects"], w / "hotstrings", hot, only=set(mine))
    print(f"  hot strings: {len(hot):,} strings; {tot['moved_pieces']:,} pieces ({tot['moved_bytes']:,} bytes) moved in "
          f"{tot['objects_changed']} of {tot['objects']} objects, {tot['pinned_pieces']:,} left", flush=True)
    tag = "floor-hot-strings-" + "-".join(k for k, v in levers.items() if v) + ("" if per_object_pools else "-nopools")
    files = {k: w / f"python-split-{tag}.{k}" for k in ("lld", "ld", "rsp")}
    bp.write_order(files["lld"], prof, "lld", dynstr_out=files["rsp"], lib=base["lib"], objects_from=base["map"],
                   algorithm="hot-last")
    dtext, _ = o.data_script(per_object_pools, string_pool=True, **levers)
    files["ld"].write_text(hotstrings.retarget_script(dtext, {k: v for k, v in moved.items()}))
    out = w / "libs" / tag / base["lib"].name
    out.parent.mkdir(parents=True, exist_ok=True)
    cmd = [str(moved.get(str(a), a)) for a in base["link_cmd"]]
    cmd[cmd.index("-o") + 1] = str(out)
    cmd = [f"-Wl,-Map={out}.map" if a.startswith("-Wl,-Map=") else a for a in cmd]
    cmd += [f"-Wl,--symbol-ordering-file={files['lld']}", "-Wl,--no-warn-symbol-ordering", f"-Wl,-T,{files['ld']}",
            f"-Wl,@{files['rsp']}"]
    print(f"  relink: {' '.join(cmd[:6])} ... ({len(moved)} objects rewritten)", flush=True)
    subprocess.run(cmd, check=True)
    return {"lib": out, "launcher": base["launcher"], "env": base["env"]}


def dynsym_rows(lib: Path, launcher) -> dict:
    """LIB with ``link --order-dynsym`` applied (``relink.order_dynsym``, the launcher's
    imports included), with its bloom filter kept at 8 bits a symbol or more, and with
    the names ld.so reads last in .dynstr as well, as ``bench_pipeline``'s libLLVM rows:
    {row name: library}."""
    from elflayout.order.relink import order_dynsym

    out = {}
    for row, tag in ((bp.DYNSYM_BLOOM8.replace(" --move-symtab", ""), "dynsym-bloom8"), ("--order-dynsym", "dynsym"),
                     (bp.DYNSTR_LAST.replace(" --move-symtab", ""), "dynsym-dynstr-last")):
        q = lib.parent.with_name(f"{lib.parent.name}-{tag}") / lib.name
        q.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(lib, q)
        meta = {"argv": [str(launcher)]}
        if tag == "dynsym-bloom8":
            bp.order_dynsym_bloom8(q, meta)
        else:
            print(f"  --order-dynsym: {order_dynsym(str(q), meta).line()}", flush=True)
        if tag == "dynsym-dynstr-last":
            bp.dynstr_names_last(q, meta)
        out[row] = q
    return out


def floor(runs: int) -> None:
    """libpython (split, stripped as Debian ships it): the best recipe against itself
    with each data-script lever, one session; every variant's output checked."""
    from elflayout.targets import libpython

    w = bp.work_dir() / "split"
    w.mkdir(parents=True, exist_ok=True)
    base = libpython.prepare("lld", split=True)
    envs = sum((["--env", f"{k}={v}"] for k, v in base["env"].items()), [])
    fbp = floor_profile(w, base, envs)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON") and k != "LD_LIBRARY_PATH"}
    want = subprocess.run([DEBIAN_PYTHON, "-c", OUTPUT_CHECK], capture_output=True, text=True, env=env,
                          check=True).stdout
    variants = {}
    for name, levers in FLOOR_LEVERS.items():
        tag = "floor-" + "-".join(k for k, v in levers.items() if v) if any(levers.values()) else "lld+data+faults"
        d = link("lld+data+faults", full_recipe(w, base, tag, fbp, levers))
        p = bp.pack(stripped(d["lib"], w / "libs" / f"split-ordered-stripped-{tag}"),
                    w / "libs" / f"split-ordered-stripped-packed-{tag}")
        check_output(p, d, want)
        variants[name] = (p, bp.variant_cmd(p.parent, [d["launcher"], "-c", bp.IMPORTS], d["env"]))
    for name, (levers, pools) in FLOOR_HOT_STRINGS.items():
        d = hot_strings_link(w, base, fbp, levers, pools)
        tag = d["lib"].parent.name
        p = bp.pack(stripped(d["lib"], w / "libs" / f"{tag}-stripped"), w / "libs" / f"{tag}-stripped-packed")
        check_output(p, d, want)
        variants[name] = (p, bp.variant_cmd(p.parent, [d["launcher"], "-c", bp.IMPORTS], d["env"]))
        if name == "+ hot string pools":
            for row, q in dynsym_rows(p, d["launcher"]).items():
                check_output(q, d, want)
                variants[f"{name}, {row}"] = (q, bp.variant_cmd(q.parent, [d["launcher"], "-c", bp.IMPORTS], d["env"]))
    plain = libpython.prepare("lld")
    rprof = bp.with_recorded_strings(fbp, base["lib"], [base["launcher"], "-c", bp.IMPORTS],
                                     [*envs, *MEASURED_CONDITIONS], w / "python-split-clean+faults+strings.profile.json")
    for name, prof, opts in (("default path, stripped", fbp, {}),
                             ("default path --hot-strings, stripped", fbp, {"hot_strings": True}),
                             # link's defaults with such a profile: --hot-strings --hot-constants
                             ("default path, strings and bytes recorded (profile --strings), stripped", rprof,
                              {"tag": "-recorded"})):
        lib, _cmd = default_path(w, prof, **opts)
        p = stripped(lib, w / "libs" / f"{lib.parent.name}-stripped")
        check_output(p, plain, want)
        variants[name] = (p, bp.variant_cmd(p.parent, [plain["launcher"], "-c", bp.IMPORTS], plain["env"]))
    print(f"  every variant prints what {DEBIAN_PYTHON} prints for: python3.11 -c {OUTPUT_CHECK!r}", flush=True)
    summ, lim, rows = measured_table(w / "python-floor.results.json", variants, runs, fbp, base["lib"],
                                     "best recipe", "libpython3.11 (split, stripped, packed): the best recipe and "
                                     "its data-script levers — selective, read_ahead_kb 128")
    print("\n| variant | pages read | .rodata.hotstr | .rodata.elflayout | .rodata | .data.rel.ro |\n"
          "|---|---:|---:|---:|---:|---:|")
    for n, sm in rows:
        by = (sm or {}).get("by_section", {})
        print(f"| {n} | {(sm or {}).get('pages', float('nan')):,.0f} | {by.get('.rodata.hotstr', 0)} | "
              f"{by.get('.rodata.elflayout', 0)} | {by.get('.rodata', 0)} | {by.get('.data.rel.ro', 0)} |")
    print(bp.determinism_note(rows))


def run_regrtests(d: dict) -> None:
    """CPython's own tests through the relinked split library, and through Debian's."""
    if not Path("/usr/lib/python3.11/test/test_json").exists():
        print("  regrtest: skipped (apt-get install libpython3.11-testsuite)")
        return
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON") and k != "LD_LIBRARY_PATH"}
    out = {}
    for name, exe, e in (("split+function order lld", str(d["launcher"]), env | d["env"]),
                         ("Debian python3.11", DEBIAN_PYTHON, env)):
        t = time.monotonic()
        r = subprocess.run([exe, "-m", "test", *REGRTESTS], capture_output=True, text=True, env=e)
        tail = [ln for ln in r.stdout.splitlines() if ln.startswith(("Total tests", "Result", "Tests result"))
                or ln.strip().endswith(("tests OK.", "skipped:", "failed:"))]
        out[name] = (r.returncode, " ".join(tail))
        print(f"  $ {exe} -m test {' '.join(REGRTESTS)}   ({time.monotonic() - t:.0f} s): exit {r.returncode}; "
              f"{' '.join(tail)}", flush=True)
    same = len({v for v in out.values()}) == 1
    print(f"  regrtest results {'identical' if same else 'DIFFER'} through the split library and Debian's")


CRYPTO_TESTS = ["test_hashlib", "test_hmac", "test_ssl"]


def crypto(regrtest: bool) -> None:
    """The second archive: OpenSSL's libcrypto.a (libssl-dev; built without function
    sections, with perlasm assembly). Split + --check with the three linkers, then
    libcrypto.so.3 relinked from the split objects in *reversed* symbol order (every
    moved reference exercised; ``targets.libcrypto``, Debian's symbol versions) and
    compared with Debian's library on digests, ciphers and (--regrtest) CPython's
    hashlib/hmac/ssl tests. Its page figures: bench/bench_split_crypto.py."""
    from elflayout.targets import libcrypto

    print("\n## second archive: libcrypto.a (OpenSSL 3, libssl-dev)\n", flush=True)
    archive = libcrypto.archive()
    w = bp.work_dir() / "split-crypto"
    w.mkdir(parents=True, exist_ok=True)
    split_check(archive, " of libcrypto.a")
    nm = subprocess.run(["nm", "--defined-only", *libcrypto.split_objects()], capture_output=True, text=True).stdout
    names = [ln.split()[2] for ln in nm.splitlines() if len(ln.split()) == 3 and ln.split()[1] in "tTdDbBrR"]
    rev = w / "reversed.order"
    rev.write_text("\n".join(dict.fromkeys(reversed(names))) + "\n")
    extra = [f"--symbol-ordering-file={bp.hashed_copy(rev)}", "--no-warn-symbol-ordering"]
    print(f"  relink: libcrypto.prepare('lld', split=True, extra_link_args={extra})", flush=True)
    d = libcrypto.prepare("lld", split=True, extra_link_args=extra)
    n = libcrypto.verify(d["outdir"])
    print(f"  openssl dgst/enc of 1 MiB through the reversed split libcrypto: {n}/{n} outputs identical "
          f"to Debian's library", flush=True)
    if regrtest:
        res = {}
        env = dict(os.environ, **d["env"])
        for name, e in (("reversed split libcrypto", env), ("Debian libcrypto", dict(os.environ))):
            t = time.monotonic()
            r = subprocess.run([DEBIAN_PYTHON, "-m", "test", *CRYPTO_TESTS], capture_output=True, text=True, env=e)
            tail = [ln for ln in r.stdout.splitlines() if ln.startswith(("Tests result", "Result"))
                    or ln.strip().endswith(("tests OK.", "skipped:", "failed:"))]
            res[name] = (r.returncode, " ".join(tail))
            print(f"  $ {'LD_LIBRARY_PATH=' + str(d['outdir']) + ' ' if e is env else ''}{DEBIAN_PYTHON} -m test "
                  f"{' '.join(CRYPTO_TESTS)}   ({time.monotonic() - t:.0f} s): exit {r.returncode}; {' '.join(tail)}",
                  flush=True)
        print(f"  regrtest results {'identical' if len(set(res.values())) == 1 else 'DIFFER'}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--regrtest", action="store_true", help="run CPython's regression tests through the split build")
    ap.add_argument("--skip-measure", action="store_true")
    ap.add_argument("--no-crypto", action="store_true", help="skip the second archive (libcrypto.a)")
    ap.add_argument("--default-path", action="store_true",
                    help="only the default path (elflayout link, no flag) against the best recipe, one session")
    ap.add_argument("--floor", action="store_true",
                    help="only the best recipe (stripped, packed) and each data-script lever on it, one session")
    a = ap.parse_args(argv)
    if a.default_path:
        default_vs_best(a.runs)
        return 0
    if a.floor:
        floor(a.runs)
        return 0
    print("## elflayout split on libpython3.11-pic.a\n", flush=True)
    split_time()
    check_all()
    pipeline(a.runs, a.regrtest, a.skip_measure)
    if not a.no_crypto:
        crypto(a.regrtest)
    return 0


if __name__ == "__main__":
    sys.exit(main())
