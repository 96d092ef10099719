#!/usr/bin/env python3
"""Headline figures: pages/bytes read and seeks at startup for libpython3.11 and
libLLVM-16 in each variant, next to the physical-limit estimate.

    python3 bench/bench_pipeline.py [python] [llvm] [--runs 3] [--json OUT] [--default-path]

Every figure comes from the product's CLI (``python -m elflayout profile / pack-relocs /
measure``) or, for ordering, from the function ``elflayout order`` runs
(``order.pipeline.order_files``, in-process; the equivalent command is printed); the
libraries are (re)linked by ``elflayout.targets`` (cached).
Measurement: ``elflayout measure --state selective --state hot --read-ahead-kb 128
--census none``: before each selective run only the library under test is evicted
(fsync + posix_fadvise DONTNEED), pages inserted into the page cache for it are counted
with the ``filemap:mm_filemap_add_to_page_cache`` tracepoint; read_ahead_kb of the
device is set to 128 for the session and restored. Variants are interleaved (seeded).

- python: libpython3.11 relinked from Debian's PIC objects with lld, GNU ld (bfd) and
  gold; workload ``python3.11 -c "import json, decimal, asyncio, re"``; variants
  baseline / object-ordered / packed / ordered+packed per linker. The objects lack
  -ffunction-sections, so object order (``elflayout order --format objects``) is the
  ordering lever.
- llvm: libLLVM-16, ``llc-16 --version``: the system library, packed; relinked from
  LLVM 16's archives with lld in default order, packed; function-ordered (lld
  ``--symbol-ordering-file`` from ``elflayout order --format lld`` of a valgrind
  profile of the default relink), ordered+packed; and gold with ``--section-ordering-file``
  from ``elflayout order --format gold`` (input sections, so ``.rodata.<fn>`` data too),
  +packed (``--no-gold`` skips these); lld with ``order --algorithm hot-last --data-script
  --dynstr-out`` (data sections and .dynstr names placed too), +packed
  (``--no-data-script`` skips these). Pages by section. ``--default-path``: the default
  path alone (``elflayout link --profile P --linker lld -- CMD``, in-process
  ``order.relink.relink``) beside the best recipe (lld hot-last + data script + .dynstr,
  packed) and the default lld relink, one session; for libLLVM also the default path
  with a profile that recorded the strings and read-only bytes read (``profile --strings``).

Physical-limit estimate ("touched bytes packed densely"), from a valgrind ``--data``
profile of the same library (``elflayout.order.limit.physical_limit``):
    bytes of executed functions
  + 4096 x distinct file pages touched as data (read or written; ld.so's reads of
    .dynsym/.dynstr/.gnu.hash/.dynamic/.got..., .data.rel.ro written by relocation),
    leaving out relocation tables and executable sections (counted by bytes instead)
  + 4096 x executable pages run outside any known function (PLT stubs, .init)
  + 4096 for the ELF header page (ld.so read()s it) when not already counted
  + relocation table bytes after packing (non-RELATIVE RELA entries + optimal RELR
    table + .rela.plt)
  divided by 4096, rounded up. It assumes a perfect layout of exactly those bytes
with no read-around waste. Data is counted in pages of the *profiled* layout, so a
layout that also packs the touched data more densely (order --data-script, the .dynstr
name order) can read fewer pages than the estimate in those sections.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from _common import cache_dir, cli, show_cmd
from _common import measure as measure_plan

from elflayout.elfcore import PAGE, ElfImage
from elflayout.errors import ElflayoutError
from elflayout.order.limit import physical_limit
from elflayout.profile import model

RA_KB = 128
IMPORTS = "import json, decimal, asyncio, re"
SECTION_GROUPS = {  # columns of the libLLVM table
    ".text": (".text",),
    ".rodata": (".rodata", ".rodata.*"),  # .rodata.elflayout: order --data-script's output section
    ".rela.dyn/.relr.dyn": (".rela.dyn", ".relr.dyn"),
    ".data.rel.ro": (".data.rel.ro",),
    ".dynsym+.dynstr+.gnu.hash": (".dynsym", ".dynstr", ".gnu.hash"),
}


def work_dir() -> Path:
    return cache_dir("bench-pipeline")


def write_order(out, prof, fmt, data_script=None, dynstr_out=None, levers=None, **request) -> None:
    """``elflayout order`` in-process (``order.pipeline.order_files``, what the verb runs);
    print the command it equals. ``request``: the other ``pipeline.Request`` fields;
    ``levers``: the data script's options (``Ordering.data_script``, ``order --hot-constants
    --sparse-last``)."""
    from elflayout.order import pipeline

    req = pipeline.Request(prof, fmt, **request)
    t = time.monotonic()
    pipeline.order_files(req, out, data_script=data_script, dynstr_out=dynstr_out, **(levers or {}))
    print(f"  $ {show_cmd(req.argv(out, data_script, dynstr_out, levers))}   ({time.monotonic() - t:.1f} s, in-process)",
          flush=True)


def describe_limit(lim: dict) -> str:
    top = ", ".join(f"{k} {v:,}" for k, v in list(lim["data_pages_by_section"].items())[:6])
    r = lim["reloc_bytes"]
    warn = "" if lim["has_data"] else " (profile without --data: data pages missing, the estimate is too low)"
    return (f"{lim['pages']:,} pages{warn} = code {lim['code_bytes']:,} B ({lim['functions']:,} functions) "
            f"+ {lim['data_pages']:,} data pages ({top}) + {lim['exec_pages_outside_functions']} exec pages "
            f"outside functions + {lim['header_pages']} header page + relocations "
            f"{r['rela']:,} B RELA + {r['relr']:,} B RELR + {r['plt']:,} B .rela.plt")


# -- helpers ---------------------------------------------------------------------------------

def profile_target(path: Path):
    return model.load(path).targets[0]


def profiles_build(out: Path, lib: Path, data: bool | None = None) -> bool:
    """Whether OUT is a profile of this very build of LIB (same build-id; ``data``: and
    taken with or without --data)."""
    if not out.exists():
        return False
    try:
        doc = model.load(out)
        with ElfImage(lib) as img:
            bid = img.build_id
    except ElflayoutError:  # damaged or of another version
        return False
    return doc.targets[0].build_id == bid and (data is None or bool(doc.metadata.get("data")) == data)


def cached_profile(out: Path, lib: Path, profile_args: list, data=True) -> Path:
    """Profile with valgrind unless OUT already profiles this very build (same build-id)."""
    if profiles_build(out, lib, data):
        print(f"  $ {show_cmd(profile_args)}   (cached: same build-id)", flush=True)
        return out
    cli(*profile_args)
    return out


def with_recorded_strings(prof: Path, lib: Path, argv: list, profile_args: list, out: Path) -> Path:
    """PROF with, on its target, the strings ARGV reads from LIB (``profile --strings``,
    cached; ``profile_args``: its --env and conditions): what ``link --hot-strings`` then
    moves instead of the strings the profiled code reaches. Returns OUT."""
    run = out.with_name(out.stem + ".strings-run.json")
    if run.exists() and model.RODATA_READ not in json.loads(run.read_text())["targets"][0]:
        run.unlink()    # made before profile --strings recorded the bytes read
    cached_profile(run, lib, ["profile", "--target", lib, "--strings", *profile_args, "-o", run, "--force", "--",
                              *argv], data=False)
    doc = json.loads(Path(prof).read_text())
    got = json.loads(run.read_text())["targets"][0]
    doc["targets"][0]["strings"] = got["strings"]
    if model.RODATA_READ in got:    # the bytes read, which place the read-only data
        doc["targets"][0][model.RODATA_READ] = got[model.RODATA_READ]
    out.write_text(json.dumps(doc))
    print(f"  {out}: {prof.name} with the {len(doc['targets'][0]['strings']):,} strings the run read", flush=True)
    return out


def file_sha(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            h.update(chunk)
    return h.hexdigest()


def hashed_copy(path: Path) -> Path:
    """A copy named by content: targets cache relinks by argument text, not file content."""
    h = hashlib.sha256(path.read_bytes()).hexdigest()[:12]
    dest = path.with_name(f"{path.stem}-{h}{path.suffix}")
    if not dest.exists():
        shutil.copyfile(path, dest)
    return dest


def pack(lib: Path, dest_dir: Path) -> Path:
    """Packed copy of LIB in DEST_DIR, proved (``targets.pack_verified``)."""
    from elflayout.targets import pack_verified

    out = dest_dir / lib.name
    how = pack_verified(lib, out)
    if how != "pack-relocs --check":
        print(f"  note: {out}: {how}", flush=True)
    return out


def full_recipe_args(stem: Path, prof: Path, lib, objects_from, wl: str = "", levers=None) -> list:
    """The product's fullest lld recipe as link arguments: hot-last code order, a data
    script placing the touched data sections, hot ``.dynstr`` names first. Its files are
    ``STEM.lld/.ld/.rsp``, passed by content-hashed copies so a cache keyed on the
    arguments sees the same order under the same name. ``wl``: ``"-Wl,"`` when the
    ordering options go through a compiler driver that does not pass them itself.
    ``levers``: options of the data script (``Ordering.data_script``)."""
    full = {k: stem.with_name(f"{stem.name}.{k}") for k in ("lld", "ld", "rsp")}
    write_order(full["lld"], prof, "lld", data_script=full["ld"], dynstr_out=full["rsp"], lib=lib,
                objects_from=objects_from, algorithm="hot-last", levers=levers)
    h = {k: hashed_copy(v) for k, v in full.items()}
    return [f"{wl}--symbol-ordering-file={h['lld']}", f"{wl}--no-warn-symbol-ordering", f"-Wl,-T,{h['ld']}",
            f"-Wl,@{h['rsp']}"]


def default_link(cmd: list, prof: Path, what: str = "", **opts) -> None:
    """``elflayout link --profile PROF --linker lld [OPTS] -- CMD``: the default path, in-process
    (``order.relink.relink``); OPTS are further ``LinkOptions`` (``move_symtab=True`` is
    ``--move-symtab``); prints the command and each step's summary line."""
    from elflayout.order.relink import LinkOptions, relink

    flags = "".join(f" --{'no-' if v is False else ''}{k.replace('_', '-')}" + ("" if isinstance(v, bool) else f" {v}")
                    for k, v in opts.items())
    print(f"  $ elflayout link --profile {prof} --linker lld{flags} -- {shlex.join(map(str, cmd[:8]))} ... "
          f"(in-process: order.relink.relink){what}", flush=True)
    res = relink([str(c) for c in cmd], LinkOptions(profile=str(prof), linker="lld", **opts))
    if res.status:
        raise SystemExit(f"the default link failed (exit {res.status})")
    for st in res.steps:
        print("    " + st.line(), flush=True)


def variant_cmd(libdir: Path | None, argv: list, env: dict) -> str:
    """Shell command of one variant; libdir None: the library the program finds itself."""
    from elflayout.measure.session import command

    return command(argv, env, libdir)


def measure(out: Path, variants: dict, runs: int, seed: int = 1) -> dict:
    """variants: name -> (lib, shell command). One interleaved measurement session
    (``measure.session``, in-process), its results also written to OUT."""
    from elflayout.measure import session

    plan = session.MeasurePlan(variants=[(n, cmd) for n, (_lib, cmd) in variants.items()], states=["selective", "hot"],
                               runs=runs, read_ahead_kb=RA_KB, census="none",
                               files=[str(lib) for lib, _ in variants.values()], seed=seed, retries=4)
    return measure_plan(plan, out)


def section_counts(reads: list, sections: list) -> dict:
    """Pages of one run by section, from results' runs[].files[P].reads + metadata sections."""
    from elflayout import results as model

    return model.pages_by_section(sections, model.run_pages(reads)) if reads else {}


def _clean(run, path: str) -> bool:
    """A run (``model.Run``) counts unless the harness saw interference on the variant's own
    library (another engineer's llc-16 mapping the system libLLVM does not disturb a relink's run)."""
    why = run.interference
    return (not why or f"{path}:" not in why) and path not in run.evict_left


def summarise(doc, libs: dict) -> dict:
    """Per variant: median pages/bytes/seeks (selective), all values, wall medians, by section.
    ``doc``: the results (``model.Results`` or the document); ``libs``: variant name -> the
    library file it loads."""
    from elflayout import results as model

    res = model.as_results(doc)
    secs_of = {p: f.get("sections", []) for p, f in res.files.items()}
    out = {}
    for name in res.variant_names:
        path = str(libs[name])
        mine = [r for r in res.runs if r.variant == name]
        sel = [r for r in mine if r.state == "selective" and _clean(r, path)]
        hot = [r for r in mine if r.state == "hot" and _clean(r, path)]
        if not sel:
            out[name] = None
            continue
        pages = [r.files[path].pages_read for r in sel]
        seeks = [r.files[path].seeks for r in sel]
        med_run = sorted(sel, key=lambda r: r.files[path].pages_read)[len(sel) // 2]
        out[name] = {
            "lib": path, "left_out": sum(r.state == "selective" for r in mine) - len(sel), "pages": statistics.median(pages), "pages_all": pages,
            "bytes": statistics.median([r.files[path].bytes_read for r in sel]),
            "seeks": statistics.median(seeks), "seeks_all": seeks,
            "wall_selective_ms": 1e3 * statistics.median([r.wall_s for r in sel]),
            "wall_hot_ms": 1e3 * statistics.median([r.wall_s for r in hot]) if hot else None,
            "by_section": section_counts(med_run.files[path].reads, secs_of.get(path, [])),
            "runs": len(sel), "lost_events": sum(r.lost_events for r in sel),
        }
    return out


def _in_group(name: str, names) -> bool:
    return any(name == n or n.endswith("*") and name.startswith(n[:-1]) for n in names)


def group_sections(by: dict) -> dict:
    g = {k: sum(c for s, c in by.items() if _in_group(s, names)) for k, names in SECTION_GROUPS.items()}
    g["other"] = sum(by.values()) - sum(g.values())
    return g


def fmt_pages(s: dict) -> str:
    p = s["pages_all"]
    det = "" if min(p) == max(p) else f" ({min(p):,}–{max(p):,})"
    return f"{s['pages']:,.0f}{det}"


def table(rows: list, limit: dict | None, base_name: str, sections: bool, title: str) -> str:
    hdr = ["variant", "pages read", "vs baseline", "MB read", "seeks", "÷ limit"]
    if sections:
        hdr += list(SECTION_GROUPS) + ["other"]
    hdr += ["wall sel. ms", "wall hot ms"]
    lines = [f"**{title}**", "", "| " + " | ".join(hdr) + " |", "|" + "|".join("---" for _ in hdr) + "|"]
    base = next((s for n, s in rows if n == base_name and s), None)
    for name, s in rows:
        if not s:
            lines.append(f"| {name} | (no clean run) |" + " |" * (len(hdr) - 2))
            continue
        rel = f"{100 * (s['pages'] / base['pages'] - 1):+.1f}%" if base and name != base_name else "—"
        lim = f"{s['pages'] / limit['pages']:.2f}×" if limit else "—"
        cells = [name, fmt_pages(s), rel, f"{s['bytes'] / 1e6:.2f}", f"{s['seeks']:.0f}", lim]
        if sections:
            g = group_sections(s["by_section"])
            cells += [f"{g[k]:,}" for k in list(SECTION_GROUPS) + ["other"]]
        cells += [f"{s['wall_selective_ms']:.0f}", f"{s['wall_hot_ms']:.0f}" if s["wall_hot_ms"] is not None else "—"]
        lines.append("| " + " | ".join(cells) + " |")
    if limit:
        cells = ["physical limit (estimate)", f"{limit['pages']:,}",
                 f"{100 * (limit['pages'] / base['pages'] - 1):+.1f}%" if base else "—",
                 f"{limit['bytes'] / 1e6:.2f}", "—", "1.00×"]
        if sections:
            g = limit_by_group(limit)
            cells += [f"{g[k]:,}" for k in list(SECTION_GROUPS) + ["other"]]
        cells += ["", ""]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def gap_by_section(by_section: dict, lim: dict, top: int = 6) -> str:
    """Largest per-section differences between pages read and the estimate."""
    r = lim["reloc_bytes"]
    est = dict(lim["data_pages_by_section"])
    est[".text"] = math.ceil(lim["code_bytes"] / PAGE)
    est[".rela.dyn"] = math.ceil((r["rela"] + r["relr"]) / PAGE)
    est[".rela.plt"] = math.ceil(r["plt"] / PAGE)
    got = dict(by_section)
    got[".rela.dyn"] = got.get(".rela.dyn", 0) + got.pop(".relr.dyn", 0)
    gaps = sorted(((got.get(k, 0) - est.get(k, 0), k) for k in set(got) | set(est)), key=lambda x: -abs(x[0]))
    return ", ".join(f"{k} {d:+,} ({got.get(k, 0):,} read, {est.get(k, 0):,} est.)" for d, k in gaps[:top])


def limit_by_group(lim: dict) -> dict:
    """The estimate split like the measured columns (code and relocation bytes as pages)."""
    by = lim["data_pages_by_section"]
    r = lim["reloc_bytes"]
    g = {".text": math.ceil(lim["code_bytes"] / PAGE),
         ".rela.dyn/.relr.dyn": math.ceil((r["rela"] + r["relr"]) / PAGE)}
    for k, names in SECTION_GROUPS.items():
        if k not in g:
            g[k] = sum(c for s, c in by.items() if _in_group(s, names))
    g["other"] = lim["pages"] - sum(g.values())
    return g


def determinism_note(rows) -> str:
    left = [f"{n} {s['left_out']}" for n, s in rows if s and s["left_out"]]
    none = [n for n, s in rows if not s]
    pre = ""
    if left or none:
        pre = ("Selective runs left out because the harness saw another process disturb the variant's own "
               "library (eviction incomplete or pages read by someone else): " + ", ".join(left + [f"{n} all" for n in none])
               + ". ")
    varied = [n for n, s in rows if s and min(s["pages_all"]) != max(s["pages_all"])]
    if not varied:
        return pre + "Page counts were identical in every selective run of every variant (deterministic)."
    return pre + ("Page counts varied between runs for: " + ", ".join(varied)
            + " (median shown, range in brackets; another process touching the file or a late eviction).")


NOTE_WALL = ("Wall times are medians of the selective (library evicted) and hot runs; this VM's disk is "
             "cached by the host, so they hide most of the I/O cost and move with the machine's load — "
             "the page counts are the figure of merit.")


# -- libpython -------------------------------------------------------------------------------

def bench_python(runs: int) -> dict:
    from elflayout.targets import libpython

    w = work_dir() / "python"
    w.mkdir(parents=True, exist_ok=True)
    print(f"## libpython3.11, `python3.11 -c \"{IMPORTS}\"`, selective, read_ahead_kb {RA_KB}\n", flush=True)
    linkers = ("lld", "bfd", "gold")
    base = {lk: libpython.prepare(lk) for lk in linkers}
    lld = base["lld"]
    argv = [str(lld["launcher"]), "-c", IMPORTS]
    envs = sum((["--env", f"{k}={v}"] for k, v in lld["env"].items()), [])
    prof = cached_profile(w / "python.profile.json", lld["lib"],
                          ["profile", "--target", lld["lib"], "--map", lld["map"], "--data", *envs,
                           "-o", w / "python.profile.json", "--force", "--", *argv])
    objs = w / "python.objects.txt"
    write_order(objs, prof, "objects", objects_from=lld["map"])
    order = [line for line in objs.read_text().splitlines() if line.strip()]
    print(f"  relinks: libpython.prepare(linker) and libpython.prepare(linker, object_order=<{objs.name}>) "
          f"for {', '.join(linkers)} (elflayout.targets, cached)", flush=True)
    ordered = {lk: libpython.prepare(lk, object_order=order) for lk in linkers}
    # Function order on the same objects after `elflayout split` (docs/splitting.md).
    lorder = w / "python.split.lld"
    write_order(lorder, prof, "lld", lib=lld["lib"], objects_from=lld["map"])
    sextra = [f"--symbol-ordering-file={hashed_copy(lorder)}", "--no-warn-symbol-ordering"]
    print(f"  relink: libpython.prepare(\"lld\", split=True, extra_link_args={sextra})", flush=True)
    split = libpython.prepare("lld", split=True, extra_link_args=sextra)
    variants = {}
    for lk in linkers:
        b, o = base[lk], ordered[lk]
        env = b["env"]
        variants[f"baseline {lk}"] = (b["lib"], variant_cmd(b["lib"].parent, [b["launcher"], "-c", IMPORTS], env))
        variants[f"object-ordered {lk}"] = (o["lib"], variant_cmd(o["lib"].parent, [o["launcher"], "-c", IMPORTS], env))
        p = pack(b["lib"], w / "libs" / f"packed-{lk}")
        variants[f"packed {lk}"] = (p, variant_cmd(p.parent, [b["launcher"], "-c", IMPORTS], env))
        op = pack(o["lib"], w / "libs" / f"ordered-packed-{lk}")
        variants[f"ordered+packed {lk}"] = (op, variant_cmd(op.parent, [o["launcher"], "-c", IMPORTS], env))
    sp = pack(split["lib"], w / "libs" / "split-ordered-packed-lld")
    variants["split+function order+packed lld"] = (
        sp, variant_cmd(sp.parent, [split["launcher"], "-c", IMPORTS], split["env"]))
    doc = measure(w / "python.results.json", variants, runs)
    summ = summarise(doc, {n: lib for n, (lib, _) in variants.items()})
    lim = physical_limit(profile_target(prof), lld["lib"])
    print(f"\n  physical limit (lld baseline, from {prof.name}): {describe_limit(lim)}")
    rows = [(n, summ.get(n)) for n in variants]
    print()
    print(table([r for r in rows if r[0].endswith("lld")], lim, "baseline lld", False,
                "libpython3.11 (lld) — selective, read_ahead_kb 128"))
    print()
    print(table([r for r in rows if not r[0].endswith("lld")], lim, "baseline bfd", False,
                "libpython3.11 (GNU ld, gold) — selective, read_ahead_kb 128 (limit: of the lld build)"))
    print()
    best = min((s["pages"], n) for n, s in rows if s)
    print(f"Best: {best[1]} {best[0]:,.0f} pages; physical limit {lim['pages']:,} pages "
          f"(gap {best[0] - lim['pages']:,.0f} pages, {best[0] / lim['pages']:.2f}×). Issue: baseline 1,540, "
          f"estimate ≈790.")
    print(f"Gap of {best[1]} to the limit by section (pages read − estimate): "
          f"{gap_by_section(summ[best[1]]['by_section'], lim)}.")
    print(determinism_note(rows))
    print(NOTE_WALL)
    return {"variants": {n: s for n, s in rows}, "limit": lim, "results": str(w / "python.results.json")}


# -- libLLVM ---------------------------------------------------------------------------------

def llvm_relinks(w: Path, prof: Path, base: dict, algorithm: str | None, with_data_script: bool,
                 with_gold: bool) -> tuple:
    """The ordered relinks of libLLVM (``libllvm.relink`` records): lld with the function
    order; lld's fullest recipe (None without ``with_data_script``); gold (None without
    ``with_gold``)."""
    from elflayout.targets import libllvm

    lorder = w / "llvm.lld"
    # No --objects-from: with the map, order places only ~10 data sections instead of ~2,160
    # (reported); the profile's own attribution already comes from the map.
    write_order(lorder, prof, "lld", lib=base["lib"], algorithm=algorithm or "first-access")
    order_h = hashed_copy(lorder)
    extra = [f"--symbol-ordering-file={order_h}", "--no-warn-symbol-ordering"]
    print(f"  relink: libllvm.relink(\"lld\", extra_link_args={extra}) (cached by the file's content hash)",
          flush=True)
    ordd = libllvm.relink("lld", extra_link_args=extra)
    full = None
    if with_data_script:
        # The product's fullest lld recipe: hot-last code order, a data script placing the
        # touched data sections (symbol-less jump tables and hot strings included) and the
        # .dynstr names ld.so reads first.
        tmp = {k: w / f"llvm-full.{k}" for k in ("lld", "ld", "rsp")}
        write_order(tmp["lld"], prof, "lld", data_script=tmp["ld"], dynstr_out=tmp["rsp"], lib=base["lib"],
                    algorithm="hot-last")
        h = {k: hashed_copy(v) for k, v in tmp.items()}
        fextra = [f"--symbol-ordering-file={h['lld']}", "--no-warn-symbol-ordering", f"-Wl,-T,{h['ld']}",
                  f"-Wl,@{h['rsp']}"]
        print(f"  relink: libllvm.relink(\"lld\", extra_link_args={fextra})", flush=True)
        full = libllvm.relink("lld", extra_link_args=fextra)
    gold = None
    if with_gold:
        gorder = w / "llvm.gold"
        write_order(gorder, prof, "gold", lib=base["lib"], algorithm=algorithm or "first-access")
        gextra = [f"--section-ordering-file={hashed_copy(gorder)}"]
        print(f"  relink: libllvm.relink(\"gold\", extra_link_args={gextra}) (cached by the file's content hash)",
              flush=True)
        gold = libllvm.relink("gold", extra_link_args=gextra)
    return ordd, full, gold


def system_copy(w: Path, system_lib: Path) -> Path:
    """A byte-identical copy of the system library, ours alone to evict."""
    # The system library is mapped now and then by other users of this shared machine
    # (llc-16/opt-16 in their tests), which defeats eviction; a byte-identical copy on the
    # same file system reads the same pages and is ours alone.
    copy = w / "libs" / "system-copy" / system_lib.name
    copy.parent.mkdir(parents=True, exist_ok=True)
    if not copy.exists() or file_sha(copy) != file_sha(system_lib):
        shutil.copyfile(system_lib, copy)
    print(f"  system library measured through a byte-identical copy: {copy} (sha256 {file_sha(copy)[:16]}…, "
          f"same as {system_lib})", flush=True)
    return copy


def llvm_variants(w: Path, argv: list, copy: Path, system_lib: Path, base: dict, ordd: dict, full, gold) -> dict:
    """{variant name: (library, command)} of the libLLVM table, packed forms made here."""
    variants = {
        "system": (copy, variant_cmd(copy.parent, argv, {})),
    }
    sp = pack(system_lib, w / "libs" / "system-packed")
    variants["system packed"] = (sp, variant_cmd(sp.parent, argv, {}))
    variants["relink default"] = (base["lib"], variant_cmd(base["lib"].parent, argv, {}))
    bp = pack(base["lib"], w / "libs" / "relink-packed")
    variants["relink packed"] = (bp, variant_cmd(bp.parent, argv, {}))
    variants["relink function-ordered"] = (ordd["lib"], variant_cmd(ordd["lib"].parent, argv, {}))
    op = pack(ordd["lib"], w / "libs" / "ordered-packed")
    variants["ordered+packed"] = (op, variant_cmd(op.parent, argv, {}))
    if full:
        variants["lld hot-last+data script+dynstr"] = (full["lib"], variant_cmd(full["lib"].parent, argv, {}))
        fp = pack(full["lib"], w / "libs" / "full-packed")
        variants["lld full ordered+packed"] = (fp, variant_cmd(fp.parent, argv, {}))
    if gold:
        variants["gold section-ordered"] = (gold["lib"], variant_cmd(gold["lib"].parent, argv, {}))
        gp = pack(gold["lib"], w / "libs" / "gold-ordered-packed")
        variants["gold ordered+packed"] = (gp, variant_cmd(gp.parent, argv, {}))
    return variants


def print_llvm_figures(variants: dict, summ: dict, prof: Path, sprof: Path, system_lib: Path,
                       relink_lib: Path) -> tuple[dict, dict]:
    """The physical limits, both tables and the goal lines of the libLLVM part; returns the
    limits (system library, lld relink)."""
    lim_sys = physical_limit(profile_target(sprof), system_lib)
    lim = physical_limit(profile_target(prof), relink_lib)
    print(f"\n  physical limit, system library (from {sprof.name}): {describe_limit(lim_sys)}")
    print(f"  physical limit, lld relink (from {prof.name}): {describe_limit(lim)}")
    rows = [(n, summ.get(n)) for n in variants]
    print()
    print(table(rows[:2], lim_sys, "system", True, "libLLVM-16 system library — selective, read_ahead_kb 128"))
    print()
    print(table(rows[2:], lim, "relink default", True,
                "libLLVM-16 relinked from LLVM 16's archives — selective, read_ahead_kb 128 "
                "(baseline and limit: the default lld relink)"))
    print()
    cands = [(s["pages"], n) for n, s in rows if s and n.endswith("ordered+packed")]
    if cands:
        pages, name = min(cands)
        goal = "reached" if pages <= 4400 else "not reached"
        print(f"Goal ≤ 4,400 pages with function order + packed relocations: {name} {pages:,.0f} pages ({goal}); "
              f"system baseline {summ['system']['pages'] if summ.get('system') else float('nan'):,.0f} "
              f"(issue: 14,227); limit {lim['pages']:,} "
              f"(issue: ≈3,970).")
        g, gl = group_sections(summ[name]["by_section"]), limit_by_group(lim)
        print(f"Gap of {name} to the relink's limit by section (pages read − estimate): "
              + ", ".join(f"{k} {g[k] - gl[k]:+,}" for k in gl) + ".")
    print(determinism_note(rows))
    print(NOTE_WALL)
    return lim_sys, lim


def bench_llvm(runs: int, with_gold: bool = True, algorithm: str | None = None,
               with_data_script: bool = True) -> dict:
    from elflayout.targets import libllvm

    w = work_dir() / "llvm"
    w.mkdir(parents=True, exist_ok=True)
    sysd = libllvm.system()
    llc = str(sysd["llc"])
    argv = [llc, "--version"]
    print(f"## libLLVM-16, `{' '.join(argv)}`, selective, read_ahead_kb {RA_KB}\n", flush=True)
    print("  relink: libllvm.relink(\"lld\") (elflayout.targets, cached)", flush=True)
    base = libllvm.relink("lld")
    prof = cached_profile(w / "llvm.profile.json", base["lib"],
                          ["profile", "--target", base["lib"], "--map", base["map"], "--data",
                           "--env", f"LD_LIBRARY_PATH={base['lib'].parent}", "-o", w / "llvm.profile.json",
                           "--force", "--", *argv])
    sprof = cached_profile(w / "llvm-system.profile.json", sysd["lib"],
                           ["profile", "--target", sysd["lib"], "--data", "-o", w / "llvm-system.profile.json",
                            "--force", "--", *argv])
    ordd, full, gold = llvm_relinks(w, prof, base, algorithm, with_data_script, with_gold)
    copy = system_copy(w, sysd["lib"])
    variants = llvm_variants(w, argv, copy, sysd["lib"], base, ordd, full, gold)
    # Two sessions: other users of the system library (llc-16 elsewhere on this shared
    # machine) then only disturb the system variants' rounds.
    sys_v = {n: v for n, v in variants.items() if n.startswith("system")}
    rel_v = {n: v for n, v in variants.items() if n not in sys_v}
    summ = summarise(measure(w / "llvm-system.results.json", sys_v, runs), {n: lib for n, (lib, _) in sys_v.items()})
    summ |= summarise(measure(w / "llvm.results.json", rel_v, runs), {n: lib for n, (lib, _) in rel_v.items()})
    lim_sys, lim = print_llvm_figures(variants, summ, prof, sprof, sysd["lib"], base["lib"])
    rows = [(n, summ.get(n)) for n in variants]
    return {"variants": {n: s for n, s in rows}, "limit": lim, "limit_system": lim_sys,
            "results": [str(w / "llvm-system.results.json"), str(w / "llvm.results.json")]}


LLVM_BEST = "lld full ordered+packed"
LLVM_DEFAULT = "default path (elflayout link, no flag)"
LLVM_DEFAULT_RECORDED = "default path, strings and bytes recorded (profile --strings)"


def llvm_default_path(w: Path, prof: Path, tag: str = "") -> Path:
    """libLLVM relinked by `elflayout link`'s default path (``order.relink.relink``): the
    archives' link command with PROF and the linker, nothing else; llc/opt outputs checked
    against the shipped library's. Returns the library."""
    from elflayout.targets import libllvm

    out = w / "libs" / f"default-path-lld{tag}" / libllvm.SONAME
    out.parent.mkdir(parents=True, exist_ok=True)
    default_link(libllvm.link_command("lld", out), prof)
    libllvm.verify(out.parent)
    return out


def llvm_best() -> tuple:
    """(work dir, argv, default relink, its --data profile, the best recipe's packed
    output with llc/opt outputs checked), all cached."""
    from elflayout.targets import libllvm

    w = work_dir() / "llvm"
    w.mkdir(parents=True, exist_ok=True)
    argv = [str(libllvm.system()["llc"]), "--version"]
    base = libllvm.relink("lld")
    prof = cached_profile(w / "llvm.profile.json", base["lib"],
                          ["profile", "--target", base["lib"], "--map", base["map"], "--data",
                           "--env", f"LD_LIBRARY_PATH={base['lib'].parent}", "-o", w / "llvm.profile.json",
                           "--force", "--", *argv])
    _ordd, full, _gold = llvm_relinks(w, prof, base, None, True, False)
    fp = pack(full["lib"], w / "libs" / "full-packed")
    libllvm.verify(fp.parent)
    return w, argv, base, prof, fp


def llvm_default_vs_best(runs: int) -> None:
    """libLLVM: the default path against the best recipe and the default relink, one session."""
    w, argv, base, prof, fp = llvm_best()
    dp = llvm_default_path(w, prof)
    # the same with the strings and read-only bytes the run read (profile --strings): link
    # then moves those strings and places the read-only data by those bytes
    rprof = with_recorded_strings(prof, base["lib"], argv, ["--env", f"LD_LIBRARY_PATH={base['lib'].parent}"],
                                  w / "llvm+strings.profile.json")
    dr = llvm_default_path(w, rprof, "-recorded")
    variants = {n: (lib, variant_cmd(lib.parent, argv, {})) for n, lib in (
        ("relink default", base["lib"]), (LLVM_BEST, fp), (LLVM_DEFAULT, dp), (LLVM_DEFAULT_RECORDED, dr))}
    summ = summarise(measure(w / "llvm-default.results.json", variants, runs),
                     {n: lib for n, (lib, _) in variants.items()})
    lim = physical_limit(profile_target(prof), base["lib"])
    print()
    print(table([(n, summ.get(n)) for n in variants], lim, "relink default", True,
                f"libLLVM-16: the default path against the best recipe — selective, read_ahead_kb {RA_KB}"))
    b, d = (summ.get(n, {}).get("pages") for n in (LLVM_BEST, LLVM_DEFAULT))
    if b and d:
        print(f"\nGoal: the default path within 2% of the best recipe: {d:,.0f} pages, best recipe {b:,.0f} "
              f"({(d / b - 1) * 100:+.1f}%)", flush=True)


LLVM_FLOOR_LEVERS = ("--order-dynsym", "--move-symtab", "--order-dynsym --move-symtab", "strip --strip-all")
HOT_STRINGS = "hot strings"
# --order-dynsym as it was before the bloom filter could go below 8 bits a symbol (its row
# beside the hot-strings row measures that change on its own)
DYNSYM_BLOOM8 = "--order-dynsym --move-symtab, bloom filter >= 8 bits a symbol"
# the names ld.so reads at the end of .dynstr, next to .rela.dyn (dynstr.names_not_read first)
DYNSTR_LAST = "--order-dynsym --move-symtab, .dynstr names read last"


HOT_ADDEND = "hot strings, section + addend"
HOT_RECORDED = "hot strings recorded (profile --strings), section + addend"


def cached_rewrite(outdir: Path, arch, hot: set, only: set, by_addend: bool) -> tuple[dict, dict]:
    """``hotstrings.rewrite_inputs`` (minutes on libLLVM), its result kept beside the
    rewritten archives (keyed by the hot set, the objects and the mode) and reused while
    they are all there."""
    from elflayout.split import hotstrings

    key = hashlib.sha256(b"".join(sorted(hot)) + "\0".join(sorted(only)).encode() + bytes([by_addend])).hexdigest()[:16]
    rec = outdir / f"rewrite-{key}.json"
    if rec.exists():
        d = json.loads(rec.read_text())
        if all(Path(v).exists() for v in d["moved"].values()):
            print(f"  rewrite: cached ({rec})", flush=True)
            return {k: Path(v) for k, v in d["moved"].items()}, d["totals"]
    moved, tot = hotstrings.rewrite_inputs(arch, outdir, hot, only=only, by_addend=by_addend)
    outdir.mkdir(parents=True, exist_ok=True)
    rec.write_text(json.dumps({"moved": {k: str(v) for k, v in moved.items()}, "totals": tot}))
    return moved, tot


def llvm_hot_strings(w: Path, prof: Path, base: dict, extra_hot=None, by_addend: bool = False,
                     recorded: set | None = None) -> dict:
    """The best recipe relinked from archives whose hot string pieces moved into pools of
    their own (``split.hotstrings``: the strings relocations of the code and data that ran
    reach, plus ``extra_hot``), placed first by the data script (``string_pool``): with
    the touched objects' remaining strings still leading ``.rodata.elflayout`` (the data
    script as before) and without (``--no-hot-strings``). ``by_addend``: the other lever,
    strings reached by section + addend hot and moved too (a section symbol for each
    pool), one row; ``recorded``: the strings the run read (``profile --strings``)
    instead of the static set, moved as with ``by_addend``, one row. Packed, llc/opt
    outputs checked. Returns {row name: library}."""
    from elflayout.order import pipeline
    from elflayout.split import hotstrings
    from elflayout.targets import libllvm

    t = time.monotonic()
    o = pipeline.order(pipeline.Request(prof, "lld", lib=base["lib"], algorithm="hot-last"))
    secs = hotstrings.hot_sections(o.layout)
    by_addend = by_addend or recorded is not None
    hot = (recorded if recorded is not None else hotstrings.static_hot_strings(secs, by_addend)) | set(extra_hot or ())
    print(f"  hot strings: {len(hot):,} strings, {sum(map(len, hot)):,} bytes, "
          f"{'recorded from the run' if recorded is not None else 'reached from'} {len(secs):,} objects' "
          f"sections that ran{' (section + addend too)' if by_addend else ''}"
          f"{' + the given file' if extra_hot else ''} ({time.monotonic() - t:.0f} s)", flush=True)
    arch = libllvm.archives()
    moved, tot = cached_rewrite(w / "hotstrings", arch, hot, set(secs), by_addend)
    print(f"  rewritten: {len(moved)} archives, {tot['objects_changed']:,} of {tot['objects']:,} objects, "
          f"{tot['moved_pieces']:,} pieces ({tot['moved_bytes']:,} bytes) moved ({tot['addend_pieces']:,} reached by "
          f"section + addend), {tot['pinned_pieces']:,} ({tot['pinned_bytes']:,} bytes) kept (section + addend or "
          f"global), whole: {tot['kept']} ({time.monotonic() - t:.0f} s)", flush=True)
    order = [moved.get(str(a), a) for a in arch]
    out = {}
    for pools in ((True,) if by_addend else (True, False)):
        tag = "hs-recorded" if recorded is not None else "hs-addend" if by_addend else "hs" if pools else "hs-nopools"
        files = {k: w / f"llvm-{tag}.{k}" for k in ("lld", "ld", "rsp")}
        write_order(files["lld"], prof, "lld", dynstr_out=files["rsp"], lib=base["lib"], algorithm="hot-last")
        dtext, _ = o.data_script(hot_strings=pools, string_pool=True)
        files["ld"].write_text(hotstrings.retarget_script(dtext, moved))
        h = {k: hashed_copy(v) for k, v in files.items()}
        fextra = [f"--symbol-ordering-file={h['lld']}", "--no-warn-symbol-ordering", f"-Wl,-T,{h['ld']}",
                  f"-Wl,@{h['rsp']}"]
        print(f"  relink: libllvm.relink(\"lld\", extra_link_args={fextra}, archive_order=<{len(moved)} "
              f"rewritten>)", flush=True)
        lib = libllvm.relink("lld", extra_link_args=fextra, archive_order=order)
        packed = pack(lib["lib"], w / "libs" / f"{tag}-packed")
        libllvm.verify(packed.parent)
        with ElfImage(packed) as img:
            sec = img.section(hotstrings.HOT_PREFIX)
        print(f"  {packed}: {hotstrings.HOT_PREFIX} {sec.size if sec else 0:,} bytes", flush=True)
        out[HOT_RECORDED if recorded is not None else HOT_ADDEND if by_addend else
            HOT_STRINGS if pools else f"{HOT_STRINGS}, no per-object pools"] = packed
    return out


def order_dynsym_bloom8(lib: Path, meta: dict) -> None:
    """``relink.order_dynsym`` with the bloom filter kept at 8 bits a symbol or more."""
    from elflayout.order import dynstr, dynsym

    names, _ = dynstr.read_names(str(lib), dynstr.workload_executable(meta))
    st = dynsym.reorder_in_place(str(lib), names, min_bloom_bits=8)
    print(f"  {DYNSYM_BLOOM8}: {st['buckets'][0]:,} -> {st['buckets'][1]:,} buckets, {st['bloom_words'][0]:,} -> "
          f"{st['bloom_words'][1]:,} bloom words", flush=True)


def dynstr_names_last(lib: Path, meta: dict) -> None:
    """``dynstr_order`` of LIB in place with the names ld.so reads last (``dynstr.names_not_read`` first)."""
    from elflayout.order import dynstr, dynstr_order

    names, _ = dynstr.read_names(str(lib), dynstr.workload_executable(meta))
    st = dynstr_order.reorder_in_place(str(lib), dynstr.names_not_read(lib, names))
    print(f"  {DYNSTR_LAST}: {st['strings'] - st['first']:,} of {st['strings']:,} strings last, "
          f"{st['references']:,} references mapped and proved", flush=True)


def llvm_recorded_strings(w: Path, best: Path) -> set:
    """The strings ``llc-16 --version`` reads from the best recipe's library, byte by byte
    (``profile --strings``, cached)."""
    from elflayout.split import hotstrings
    from elflayout.targets import libllvm

    out = w / "llvm-best.strings.profile.json"
    cached_profile(out, best, ["profile", "--target", best, "--strings", "--env", f"LD_LIBRARY_PATH={best.parent}",
                               "-o", out, "--force", "--", str(libllvm.system()["llc"]), "--version"], data=False)
    return hotstrings.recorded_strings(json.loads(out.read_text())["targets"][0])


def llvm_floor_libs(w: Path, best: Path, hot: dict | None = None) -> dict:
    """The best recipe's output and each post-link lever applied to a copy of it, as
    ``elflayout link`` applies them (``relink.order_dynsym``/``relink.move_symtab``, in that
    order; ``order_dynsym`` reads the workload's executable from the profile's argv)."""
    from elflayout.order.relink import move_symtab, order_dynsym
    from elflayout.targets import libllvm

    meta = {"argv": [str(libllvm.system()["llc"]), "--version"]}
    libs = {LLVM_BEST: best}
    levers = [(LLVM_BEST, best, lv) for lv in LLVM_FLOOR_LEVERS]
    for name, lib in (hot or {}).items():
        libs[f"best, {name}"] = lib
        levers.append((f"best, {name}", lib, "--order-dynsym --move-symtab"))
        if name in (HOT_STRINGS, HOT_RECORDED):
            levers += [(f"best, {name}", lib, DYNSYM_BLOOM8), (f"best, {name}", lib, DYNSTR_LAST)]
    stems = {DYNSYM_BLOOM8: "floor-dynsym-bloom8+move-symtab", DYNSTR_LAST: "floor-order-dynsym+move-symtab+dynstr-last"}
    for base_name, src, lever in levers:
        stem = stems.get(lever) or "floor-" + lever.strip("-").replace(" --", "+").replace(" ", "-")
        out = w / "libs" / (stem if src == best else f"{stem}-{src.parent.name}") / best.name
        out.parent.mkdir(parents=True, exist_ok=True)
        if lever.startswith("strip"):
            subprocess.run(["strip", "--strip-all", "-o", str(out), str(best)], check=True)
        else:
            shutil.copyfile(src, out)
            if lever == DYNSYM_BLOOM8:
                order_dynsym_bloom8(out, meta)
            for step in (order_dynsym(str(out), meta) if "dynsym" in lever and lever != DYNSYM_BLOOM8 else None,
                         move_symtab(str(out)) if "symtab" in lever else None):
                if step is not None:
                    print(f"  {lever}: {step.line()}", flush=True)
                    if not step.value:
                        raise SystemExit(f"bench_pipeline: {out}: {step.line()}")
            if lever == DYNSTR_LAST:
                dynstr_names_last(out, meta)
        libllvm.verify(out.parent)
        libs[f"{base_name}, {lever}" if src != best else f"best, {lever}"] = out
    return libs


def llvm_floor(runs: int, hot_strings: bool = False, extra_hot=None) -> None:
    """libLLVM: the best recipe against itself with each post-link lever, one session;
    ``hot_strings``: also the hot string pools (strings reached by symbols; and by
    section + addend too) alone and with the other levers."""
    w, argv, base, prof, best = llvm_best()
    hot = None
    if hot_strings:
        hot = llvm_hot_strings(w, prof, base, extra_hot=extra_hot)
        hot.update(llvm_hot_strings(w, prof, base, extra_hot=extra_hot, by_addend=True))
        hot.update(llvm_hot_strings(w, prof, base, extra_hot=extra_hot, recorded=llvm_recorded_strings(w, best)))
    libs = llvm_floor_libs(w, best, hot)
    variants = {n: (lib, variant_cmd(lib.parent, argv, {})) for n, lib in libs.items()}
    summ = summarise(measure(w / "llvm-floor.results.json", variants, runs), dict(libs))
    lim = physical_limit(profile_target(prof), base["lib"])
    print()
    print(table([(n, summ.get(n)) for n in variants], lim, LLVM_BEST, True,
                f"libLLVM-16: the best recipe and its post-link levers — selective, read_ahead_kb {RA_KB}"))
    print("\n| variant | pages read | .dynsym | .gnu.version | .gnu.hash | .symtab+.strtab | .rodata.hotstr | "
          ".rodata.elflayout | .rodata |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n in variants:
        by = (summ.get(n) or {}).get("by_section", {})
        print(f"| {n} | {(summ.get(n) or {}).get('pages', float('nan')):,.0f} | {by.get('.dynsym', 0)} | "
              f"{by.get('.gnu.version', 0)} | {by.get('.gnu.hash', 0)} | {by.get('.symtab', 0) + by.get('.strtab', 0)} | "
              f"{by.get('.rodata.hotstr', 0)} | {by.get('.rodata.elflayout', 0)} | {by.get('.rodata', 0)} |")
    print("Every variant's llc-16/opt-16 output is byte-identical to the shipped library's (libllvm.verify).")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("parts", nargs="*", help="python, llvm (default: both)")
    ap.add_argument("--runs", type=int, default=3, help="rounds of measure (page counts are deterministic; default 3)")
    ap.add_argument("--json", help="also write the figures as JSON here")
    ap.add_argument("--algorithm", help="llvm: elflayout order --algorithm (default: the product's default)")
    ap.add_argument("--no-data-script", action="store_true",
                    help="llvm: skip the lld hot-last + --data-script + --dynstr-out variants")
    ap.add_argument("--no-gold", action="store_true",
                    help="llvm: skip the gold --section-ordering-file variants (a gold relink takes minutes)")
    ap.add_argument("--floor", action="store_true",
                    help="llvm: only the best recipe and each post-link lever on it (--order-dynsym, --move-symtab, "
                         "both, strip), one session")
    ap.add_argument("--hot-strings", action="store_true",
                    help="llvm --floor: also the best recipe with hot string pools (split.hotstrings), alone and with "
                         "--order-dynsym --move-symtab")
    ap.add_argument("--hot-strings-file", metavar="FILE",
                    help="with --hot-strings: strings to add to the static set (one a line, C-escaped)")
    ap.add_argument("--default-path", action="store_true",
                    help="llvm: only the default path (elflayout link, no flag) against the best recipe, one session")
    a = ap.parse_args(argv)
    parts = a.parts or ["python", "llvm"]
    bad = [p for p in parts if p not in ("python", "llvm")]
    if bad:
        ap.error(f"unknown part {bad[0]!r} (choose python, llvm)")
    from elflayout.tracefs import tracefs_status

    why = tracefs_status()
    if why or os.geteuid() != 0:
        print(f"bench_pipeline: skipped: needs root and tracefs ({why or 'not root'})")
        return 0
    if a.default_path:
        llvm_default_vs_best(a.runs)
        return 0
    if a.floor:
        from elflayout.split.hotstrings import read_strings_file

        llvm_floor(a.runs, a.hot_strings, read_strings_file(a.hot_strings_file) if a.hot_strings_file else None)
        return 0
    t0 = time.monotonic()
    shown = argv if argv is not None else sys.argv[1:]
    print(f"# bench_pipeline   (python3 bench/bench_pipeline.py {shlex.join(shown)})")
    print(f"  load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs\n", flush=True)
    res = {}
    for part in parts:
        res[part] = bench_python(a.runs) if part == "python" else bench_llvm(a.runs, not a.no_gold, a.algorithm,
                                                                                       not a.no_data_script)
        print()
    print(f"bench_pipeline: {time.monotonic() - t0:.0f} s", flush=True)
    if a.json:
        from elflayout.fileio import atomic_write_text

        atomic_write_text(a.json, json.dumps(res, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
