#!/usr/bin/env python3
"""Held-out figures: how an order does on libLLVM-16 startups it was not trained on.

    python3 bench/bench_heldout.py [--training corpus|broad|small|wide|held-out] [--read-ahead-kb 128] [--combine phased]
                                   [--no-alternatives]
    python3 bench/bench_heldout.py --measure [--training ...] [--only WORKLOAD] [--runs 3]

Profiles Debian's libLLVM-16 (the shipped, unordered library) with the valgrind backend
as one profile set (``elflayout.profile.record.record_set``): five held-out workloads
(``llc-16 -O2`` on a small ``.ll``, ``opt-16 --version``, and ``llc-16 --version`` with
stdout on ``/dev/null``, on a pipe and on a file) and workloads that only train (never
the held-out module): with ``--training corpus`` (the default), ``llc -O2`` of a corpus
of modules, one per family of features (``training_corpus``), and ``training_only``
(compiles of another module, other tools); ``broad``, ``small`` and ``wide`` are the
smaller sets compared. Then cross-validates (``elflayout.order.heldout.cross_validate``,
rule ``phased`` by default): for each held-out workload, the pages the readahead model
predicts for the library as it is, ordered by every other workload
(``heldout.training_set``: never one that runs its exact command), and ordered by the
workload itself (virtual code layouts; see docs/ordering.md, "Held-out evaluation").
Prints the table and the two checks: within 3% of the self-trained order, never more
than unordered; then the same figures under every other combination rule and training
set (``alternatives``), so that the choice is shown beside what it gives. Predictions,
not measurements; ``--measure`` measures the same on real lld relinks of libLLVM
(ordered by the others' profile set, and by the workload itself, via ``elflayout order
--format lld``). Profile sets are cached (by the library's build-id and the workloads)
in the elflayout cache.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(ROOT / "bench"))

from _common import cache_root  # noqa: E402
from elflayout.elfcore import ElfImage  # noqa: E402
from elflayout.order import heldout  # noqa: E402
from elflayout.profile import model, record  # noqa: E402
from elflayout.targets import libllvm  # noqa: E402

TRAININGS = ("held-out", "broad", "small", "wide", "corpus")
WORK = cache_root() / "bench-heldout"
TOLERANCE = 0.03  # goal: within 3% of an order trained on the held-out workload itself


def workloads(s: dict) -> list[record.Workload]:
    """The held-out workloads of the table (each is also training for the others)."""
    llc, opt, ll = str(s["llc"]), str(s["opt"]), str(s["example_ll"])
    return [record.Workload("llc -O2 small.ll", [llc, "-O2", ll, "-o", "/dev/null"]),
            record.Workload("opt --version", [opt, "--version"]),
            record.Workload("llc --version >null", [llc, "--version"], "null"),
            record.Workload("llc --version >pipe", [llc, "--version"], "pipe"),
            record.Workload("llc --version >file", [llc, "--version"], "file")]


def training_only(s: dict) -> list[record.Workload]:
    """Workloads that only train: compiles of another module (never the held-out
    example), ``opt -O2`` on it, other LLVM tools' ``--version``. Without compiles in
    the training set, nothing places the code the held-out compile runs; which ones were
    chosen, and what the others cost, is in docs/ordering.md ("Held-out evaluation")."""
    llc, opt, tl = str(s["llc"]), str(s["opt"]), str(libllvm.training_ll())
    t = {n: str(libllvm.tool(n)) for n in ("llvm-dis", "llvm-mc")}
    return [record.Workload("llc -O2 training.ll", [llc, "-O2", tl, "-o", "/dev/null"]),
            record.Workload("llc -O3 training.ll", [llc, "-O3", tl, "-o", "/dev/null"]),
            record.Workload("opt -O2 -S training.ll", [opt, "-O2", "-S", tl, "-o", "/dev/null"]),
            record.Workload("llvm-dis --version >null", [t["llvm-dis"], "--version"], "null"),
            record.Workload("llvm-mc --version >pipe", [t["llvm-mc"], "--version"], "pipe")]


def training_wide(s: dict) -> list[record.Workload]:
    """``training_only`` and more kinds of compile (``-O0``, object output, assembling):
    more code covered, more of it that the held-out compile does not run."""
    llc, tl = str(s["llc"]), str(libllvm.training_ll())
    return training_only(s) + [
        record.Workload("llc -O0 training.ll", [llc, "-O0", tl, "-o", "/dev/null"]),
        record.Workload("llc -O3 -filetype=obj training.ll", [llc, "-O3", "-filetype=obj", tl, "-o", "/dev/null"]),
        record.Workload("llvm-as training.ll", [str(libllvm.tool("llvm-as")), tl, "-o", "/dev/null"])]


def training_small(s: dict) -> list[record.Workload]:
    """``training_only`` and ``llc -O2`` on a second, small training module
    (``libllvm.TRAINING_SMALL_LL``, integer code; still not the held-out example): code
    every small compile runs is then shared by more training workloads than code only
    the larger module's compiles need, and the support-first rules place it before it."""
    return training_only(s) + [record.Workload("llc -O2 training-small.ll", [
        str(s["llc"]), "-O2", str(libllvm.training_small_ll()), "-o", "/dev/null"])]


def training_corpus(s: dict) -> list[record.Workload]:
    """``training_only`` and ``llc -O2`` on each module of a training corpus: the small
    integer module (``TRAINING_SMALL_LL``) and one module per family of features
    (``libllvm.training_corpus``: floating point, vectors, aggregates, calls and varargs,
    exceptions, atomics, switches, and typical integer and pointer code; never the
    held-out example). As an orderfile pipeline
    trains on several representative workloads: code that every compile runs is shared
    by many training compiles, code one feature needs by few, so the support-first rule
    (``shared``) places the first before the second."""
    llc = str(s["llc"])
    mods = {"training-small": libllvm.training_small_ll()} | libllvm.training_corpus()
    return training_only(s) + [record.Workload(f"llc -O2 {n}.ll", [llc, "-O2", str(m), "-o", "/dev/null"])
                               for n, m in mods.items()]


def set_key(lib: Path, wls: list[record.Workload]) -> str:
    """Cache key of a profile set: the library's build-id and the workloads recorded."""
    import hashlib

    with ElfImage(lib) as img:
        bid = img.build_id
    h = hashlib.sha256(json.dumps([w.describe() for w in wls]).encode()).hexdigest()
    return f"{bid[:16]}-{h[:12]}"


def profile_set(lib: Path, wls: list[record.Workload], combine: str, maps=(), env=None) -> Path:
    """The profile set of ``wls`` on ``lib`` (cached; the rule only sets ``first``:
    cross-validation re-combines)."""
    out = WORK / f"set-{set_key(lib, wls)}.json"
    if out.exists():
        return out
    WORK.mkdir(parents=True, exist_ok=True)
    setup = record.prepare(record.Setup(targets=[str(lib)], maps=list(maps), env=env or {}))
    t0 = time.monotonic()
    doc, statuses = record.record_set(setup, wls, combine, progress=lambda m: print("  " + m, file=sys.stderr))
    bad = [(n, rc) for n, rc in statuses if rc]
    if bad:
        raise SystemExit(f"workloads failed: {bad}")
    model.save(doc, out)
    print(f"profiled {len(wls)} workloads in {time.monotonic() - t0:.0f} s → {out}", file=sys.stderr)
    return out


# --measure: the same question on real relinks, measured. Each stdout condition as a
# shell redirection of the measured command.
REDIRECT = {"inherit": "", "null": " > /dev/null", "pipe": " | cat > /dev/null", "file": " > {tmp}/heldout.out"}


def measured(args, s: dict) -> list[dict]:
    """Relink libLLVM ordered by the other workloads and by each workload itself; measure
    pages read (selective, read_ahead_kb 128) of each held-out workload on the unordered
    relink, the cross-trained one and the self-trained one."""
    import tempfile

    import bench_pipeline as bp

    from elflayout.profile import merge

    base = libllvm.relink("lld")
    blib = Path(base["lib"])
    held, wls = all_workloads(args, s)
    prof = model.load(profile_set(blib, wls, args.combine, maps=[str(base["map"])],
                                  env={"LD_LIBRARY_PATH": str(blib.parent)}))
    desc = prof.workloads
    views = [merge.workload_view(prof, k) for k in range(len(wls))]
    pick = [k for k, w in enumerate(wls[:len(held)]) if not args.only or w.name in args.only]

    def relink_of(p: model.Profile, tag: str) -> Path:
        pf, of = WORK / f"{tag}.profile.json", WORK / f"{tag}.lld"
        model.save(p, pf)
        bp.write_order(of, pf, "lld", lib=blib)
        d = libllvm.relink("lld", extra_link_args=[f"--symbol-ordering-file={bp.hashed_copy(of)}",
                                                   "--no-warn-symbol-ordering"])
        return Path(d["lib"])

    rows = []
    tmp = tempfile.mkdtemp(prefix="elflayout-heldout-")
    for k in pick:
        idx = heldout.training_set(desc, k)
        train = heldout.train_on(prof, views, idx, args.combine)
        slug = f"k{k}"
        libs = {"unordered": blib, "others": relink_of(train, f"{slug}-others"), "itself": relink_of(views[k], f"{slug}-self")}
        w = wls[k]
        redirect = REDIRECT[w.stdout].format(tmp=tmp)
        variants = {f"{w.name} [{n}]": (lib, bp.variant_cmd(lib.parent, w.argv, {}) + redirect) for n, lib in libs.items()}
        summ = bp.summarise(bp.measure(WORK / f"{slug}.results.json", variants, args.runs),
                            {n: v[0] for n, v in variants.items()})
        pages = {n: (summ.get(f"{w.name} [{n}]") or {}).get("pages") for n in libs}
        # what the model says of the same split, on the profiled (unordered) relink
        with ElfImage(blib) as img:
            tp = prof.targets[0].path
            ev = heldout.evaluate(img, views[k].target(tp), train.target(tp), args.read_ahead_kb)
        rows.append({"workload": w.name, **pages, "trained_on": [desc[j]["name"] for j in idx],
                     "cold_functions": ev["cold_functions"], "cold_examples": ev["cold_examples"],
                     "in_hot_fraction": ev["in_hot_fraction"]})
        print(f"  {w.name}: unordered {pages['unordered']}, others {pages['others']}, itself {pages['itself']}",
              file=sys.stderr, flush=True)
    return rows


def all_workloads(args, s: dict) -> tuple[list[record.Workload], list[record.Workload]]:
    """(held-out workloads, every workload recorded: the held-out ones first)."""
    held = workloads(s)
    extra = {"broad": training_only, "small": training_small, "wide": training_wide, "corpus": training_corpus,
             "held-out": lambda _s: []}[args.training](s)
    return held, held + extra


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--read-ahead-kb", type=int, default=128)
    ap.add_argument("--combine", default="phased", choices=("earliest", "shared", "phased", "mean", "concat"))
    ap.add_argument("--json", metavar="OUT", help="also write the rows as JSON")
    ap.add_argument("--measure", action="store_true",
                    help="also relink libLLVM (lld) ordered by the others / by itself per held-out workload and "
                         "measure pages read (root, tracefs; minutes per workload)")
    ap.add_argument("--training", choices=TRAININGS, default="corpus",
                    help="train on the other held-out workloads, the training-only ones and -O2 compiles of a "
                         "corpus of modules, one per family of features (corpus, default); the other held-out "
                         "workloads and the training-only ones (compiles of another module, other tools: broad), "
                         "those and an -O2 compile of a second, small training module (small), those and more "
                         "kinds of compile (wide), or the other held-out workloads alone (held-out)")
    ap.add_argument("--no-alternatives", action="store_true",
                    help="skip the table of the other combination rules and training sets (model only)")
    ap.add_argument("--only", action="append", metavar="WORKLOAD", help="--measure: only these held-out workloads")
    ap.add_argument("--runs", type=int, default=3, help="--measure: rounds of measure (default 3)")
    args = ap.parse_args()
    s = libllvm.system()
    if args.measure:
        held, wls = all_workloads(args, s)
        rows = measured(args, s)
        print(f"## Held-out startups of libLLVM-16 relinked with lld, measured (selective, read_ahead_kb 128, "
              f"median of {args.runs}), combine {args.combine}")
        print(f"training: the other held-out workloads and {len(wls) - len(held)} training-only ones "
              f"({', '.join(w.name for w in wls[len(held):]) or 'none'})\n")
        print("| held-out workload | unordered relink | ordered by the others | ordered by itself | vs itself | "
              "≤ unordered | its functions in the hot region | cold functions |")
        print("|---|---:|---:|---:|---:|---|---:|---:|")
        within = worse = 0
        for r in rows:
            u, o, i = r["unordered"], r["others"], r["itself"]
            vs = f"{100 * (o / i - 1):+.1f}%" if o and i else "—"
            ok = "—" if not (u and o) else ("yes" if o <= u else "NO")
            within += bool(o and i and o / i - 1 <= TOLERANCE)
            worse += bool(u and o and o > u)
            f = lambda x: "—" if x is None else f"{x:,.0f}"  # noqa: E731
            print(f"| {r['workload']} | {f(u)} | {f(o)} | {f(i)} | {vs} | {ok} | "
                  f"{100 * (r['in_hot_fraction'] or 0):.1f}% | {r['cold_functions']:,} |")
        print(f"\nwithin {TOLERANCE:.0%} of the self-trained order: {within}/{len(rows)}; "
              f"more than unordered: {worse}/{len(rows)}")
        for r in rows:
            if r["others"] and r["itself"] and r["others"] / r["itself"] - 1 > TOLERANCE and r["cold_examples"]:
                print(f"- {r['workload']}: cold functions outside the others' hot region: "
                      + ", ".join(r["cold_examples"]))
        if args.json:
            Path(args.json).write_text(json.dumps({"measured": rows}, indent=1))
        return 0
    lib = Path(s["lib"]).resolve()
    held, wls = all_workloads(args, s)
    prof = model.load(profile_set(lib, wls, args.combine))
    with ElfImage(lib) as img:
        rows = heldout.cross_validate(img, prof, args.combine, args.read_ahead_kb,
                                      progress=lambda m: print("  " + m, file=sys.stderr),
                                      held_out=[w.name for w in held])
    print(f"## Held-out startups of {lib.name} (Debian's build, unordered), read_ahead_kb {args.read_ahead_kb}, "
          f"combine {args.combine}")
    print("\n".join(heldout.table_lines(rows)))
    within = [r for r in rows if r["vs_self"] is not None and r["vs_self"] <= TOLERANCE]
    never_worse = [r for r in rows if not r["worse_than_unordered"]]
    print(f"within {TOLERANCE:.0%} of the self-trained order: {len(within)}/{len(rows)}; "
          f"never more than unordered: {len(never_worse)}/{len(rows)}")
    alt = [] if args.no_alternatives else alternatives(args, s, lib, held)
    if args.json:
        Path(args.json).write_text(json.dumps({"lib": str(lib), "read_ahead_kb": args.read_ahead_kb,
                                               "combine": args.combine, "rows": rows, "alternatives": alt},
                                              indent=1))
    return 0


def alternatives(args, s: dict, lib: Path, held: list[record.Workload]) -> list[dict]:
    """The same cross-validation under every other combination rule (this training set)
    and every other training set (this rule): predicted pages vs the self-trained order,
    so that the choice of rule and training set is shown beside the figures it gives."""
    from elflayout.profile.merge import RULES

    out = []
    combos = [(args.training, r) for r in RULES if r != "rank"] + [(t, args.combine) for t in TRAININGS
                                                                    if t != args.training]
    for training, rule in combos:
        wls = all_workloads(argparse.Namespace(training=training), s)[1]
        prof = model.load(profile_set(lib, wls, rule))
        with ElfImage(lib) as img:
            rows = heldout.cross_validate(img, prof, rule, args.read_ahead_kb, held_out=[w.name for w in held])
        out.append({"training": training, "combine": rule, "rows": [
            {k: r[k] for k in ("workload", "predicted_pages", "self_pages", "vs_self", "cold_functions")} for r in rows]})
    print(f"\n### Other rules ({args.training} training) and training sets ({args.combine}): predicted pages, "
          "ordered by the others vs by itself")
    print("| training | combine | " + " | ".join(w.name for w in held) + " | within 3% |")
    print("|---|---|" + "---:|" * len(held) + "---:|")
    for a in out:
        cells = [f"{r['predicted_pages']:,} ({100 * r['vs_self']:+.1f}%)" for r in a["rows"]]
        ok = sum(r["vs_self"] <= TOLERANCE for r in a["rows"])
        print(f"| {a['training']} | {a['combine']} | " + " | ".join(cells) + f" | {ok}/{len(a['rows'])} |")
    return out


if __name__ == "__main__":
    sys.exit(main())
