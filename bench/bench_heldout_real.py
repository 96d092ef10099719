#!/usr/bin/env python3
"""Held-out figures on real compiles: libLLVM-16 ordered by compiles of some projects,
measured on compiles of others.

    python3 bench/bench_heldout_real.py [--train zlib --train lua ...] [--held-out bzip2 --held-out pcre2]
                                        [--combine phased] [--profile-only] [--model-only | --no-model]
                                        [--runs 3] [--json OUT]

Workloads: ``llc-16 -O2 FILE.ll -o /dev/null`` of IR that clang-16 makes (``-O2 -S
-emit-llvm``) from C files of real projects (``elflayout.targets.llvm_realir``: upstream
sources of Debian's source packages). Training and held-out projects are disjoint. Each
workload is profiled once (valgrind, on the unordered lld relink of libLLVM; cached by
build-id and command). Then:

* the training order: the training workloads merged by ``--combine`` (``phased`` by
  default, as ``profile``), written with ``elflayout order --format lld``;
* for each held-out workload, the order trained on itself;
* pages read (selective, read_ahead_kb 128, median of ``--runs``), measured on the lld
  relinks: unordered, the training order, and the workload's own order; and the pages
  the readahead model predicts for the same code layouts (``order.heldout.evaluate``).

Goals: the training order within 10% of the workload's own order on every held-out
compile, and never above unordered. ``--profile-only`` stops after profiling;
``--model-only`` after the model's table of training subsets (the learning curve) and
combination rules; ``--no-model`` skips that table.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
sys.path.insert(0, str(ROOT / "bench"))

import bench_heldout as bh  # noqa: E402
from elflayout.elfcore import ElfImage  # noqa: E402
from elflayout.order import heldout  # noqa: E402
from elflayout.profile import model, record  # noqa: E402
from elflayout.targets import libllvm, llvm_realir  # noqa: E402

TOLERANCE = 0.10  # goal: within 10% of the order trained on the held-out compile itself
WORK = bh.WORK


def profiles(base: dict, wls: list[tuple[str, list[str]]]) -> dict[str, model.Profile]:
    """{name: profile} of each workload on the unordered relink (cached one by one)."""
    lib = Path(base["lib"])
    out = {}
    for i, (name, argv) in enumerate(wls):
        t0 = time.monotonic()
        wl = record.Workload(name, argv)
        path = bh.profile_set(lib, [wl], "phased", maps=[str(base["map"])], env={"LD_LIBRARY_PATH": str(lib.parent)})
        out[name] = model.load(path)
        print(f"  profile {i + 1}/{len(wls)} {name}: {time.monotonic() - t0:.0f} s", file=sys.stderr, flush=True)
    return out


def train(profs: dict[str, model.Profile], names: list[str], rule: str) -> model.Profile:
    """The training profile: the workloads ``names`` merged by ``rule``."""
    from elflayout.profile.merge import merge

    if len(names) == 1:
        return profs[names[0]]
    descs = [p.workloads[0] if p.workloads else {"name": n} for n, p in ((n, profs[n]) for n in names)]
    return model.parse(merge([profs[n] for n in names], names, rule=rule, workloads=descs))


def relink_ordered(prof: model.Profile, tag: str, blib: Path) -> Path:
    """libLLVM relinked with lld ordered by ``prof`` (``elflayout order --format lld``)."""
    import bench_pipeline as bp

    import hashlib

    pf = WORK / f"real-{tag}.profile.json"
    model.save(prof, pf)
    # the order file is named by the profile's content: written once per profile
    of = WORK / f"real-{tag}-{hashlib.sha256(pf.read_bytes()).hexdigest()[:12]}.lld"
    if not of.exists():
        tmp = of.with_name(of.name + ".tmp")
        bp.write_order(tmp, pf, "lld", lib=blib)
        tmp.replace(of)
    d = libllvm.relink("lld", extra_link_args=[f"--symbol-ordering-file={bp.hashed_copy(of)}",
                                               "--no-warn-symbol-ordering"])
    return Path(d["lib"])


class Model:
    """The readahead model's pages for held-out workloads on the unordered relink (its
    image and function extents read once): unordered, trained, itself."""

    def __init__(self, blib: Path, read_ahead_kb: int):
        self.img = ElfImage(blib)
        self.base = heldout.functions_of(self.img)
        self.ra = read_ahead_kb
        self.own: dict[int, tuple[int, int]] = {}

    def close(self) -> None:
        self.img.close()

    def predict(self, held: model.Profile, trained: model.Profile) -> dict:
        tp = held.targets[0].path
        h = held.target(tp)
        ev = heldout.evaluate(self.img, h, trained.target(tp), self.ra, self.base)
        if id(held) not in self.own:
            self.own[id(held)] = (heldout.predict(self.img, h, self.base, self.ra)["pages"], heldout.predict(
                self.img, h, heldout.ordered_layout(self.img, self.base, h), self.ra)["pages"])
        plain, own = self.own[id(held)]
        return {"unordered": plain, "trained": ev["predicted_pages"], "itself": own,
                "in_hot_fraction": ev["in_hot_fraction"], "cold_functions": ev["cold_functions"],
                "cold_examples": ev["cold_examples"], "foreign_pages": ev["foreign_pages"]}


def measure_rows(args, base: dict, profs: dict, train_names: list[str], held_names: list[str],
                 wls: dict) -> list[dict]:
    import bench_pipeline as bp

    blib = Path(base["lib"])
    trained = train(profs, train_names, args.combine)
    tlib = relink_ordered(trained, f"train-{'+'.join(args.train)}{'+corpus' if args.with_corpus else ''}-{args.combine}", blib)
    m = Model(blib, args.read_ahead_kb)
    preds = {name: m.predict(profs[name], trained) for name in held_names}
    m.close()  # the image is mapped: a mapping keeps its pages from being evicted before a run
    rows = []
    for k, name in enumerate(held_names):
        pred = preds[name]
        libs = {"unordered": blib, "trained": tlib,
                "itself": relink_ordered(profs[name], f"self-{Path(wls[name][2]).stem}", blib)}
        variants = {f"{name} [{n}]": (lib, bp.variant_cmd(lib.parent, wls[name], {})) for n, lib in libs.items()}
        summ = bp.summarise(bp.measure(WORK / f"real-{k}.results.json", variants, args.runs),
                            {n: v[0] for n, v in variants.items()})
        pages = {n: (summ.get(f"{name} [{n}]") or {}).get("pages") for n in libs}
        rows.append({"workload": name, "measured": pages, "predicted": pred})
        print(f"  {name}: measured {pages}, predicted {pred['unordered']}/{pred['trained']}/{pred['itself']}",
              file=sys.stderr, flush=True)
    return rows


def alternatives(blib: Path, profs: dict, training: dict[str, list[str]], held_names: list[str],
                 read_ahead_kb: int) -> list[dict]:
    """Model only: predicted pages of each held-out compile, ordered by each training
    subset (``training``: label -> workload names) under each combination rule, against
    its own order: which rule, and how much training, closes the gap."""
    from elflayout.profile.merge import RULES

    rules = [r for r in RULES if r not in ("rank", "phased")]
    out = []
    m = Model(blib, read_ahead_kb)
    for label, names, rule in ([(lb, ns, "phased") for lb, ns in training.items()]
                               + [(lb, ns, r) for lb, ns in list(training.items())[-1:] for r in rules]):
        trained = train(profs, names, rule)
        cells = {h: m.predict(profs[h], trained) for h in held_names}
        out.append({"training": label, "compiles": len(names), "combine": rule,
                    "rows": {h: {k: c[k] for k in ("unordered", "trained", "itself", "cold_functions", "foreign_pages")}
                             for h, c in cells.items()}})
    m.close()
    return out


def corpus_workloads() -> list[tuple[str, list[str]]]:
    """``llc-16 -O2`` of each module of the hand-written feature corpus
    (``libllvm.training_corpus``: floating point, vectors, atomics, exceptions …)."""
    llc = str(libllvm.tool("llc"))
    return [(f"llc -O2 corpus/{n}.ll", [llc, "-O2", str(m), "-o", "/dev/null"])
            for n, m in libllvm.training_corpus().items()]


def subsets(train_projects: list[str], extra: list[str] = ()) -> dict[str, list[str]]:
    """Training subsets for the learning curve: the first 2, 4, 8, 16 … compiles taken
    in turn from each project (one file of each project before a second of any), the
    first two projects whole, then all of them (and with ``extra``, e.g. the feature
    corpus, all of them and those)."""
    per = [[n for n, _ in llvm_realir.workloads([p])] for p in train_projects]
    turns = [n for group in itertools.zip_longest(*per) for n in group if n]
    out = {}
    k = 2
    while k < len(turns):
        out[f"first {k} in turn"] = turns[:k]
        k *= 2
    if len(per) > 2:
        out["+".join(train_projects[:2])] = per[0] + per[1]
    out["all" if len(per) > 2 else "+".join(train_projects)] = turns
    if extra:
        out["+".join(train_projects) + "+corpus"] = turns + list(extra)
    return out


def alternatives_lines(alt: list[dict], held_names: list[str]) -> list[str]:
    out = ["\n### Model: training subsets and rules (predicted pages, trained vs itself)", "",
           "| training | compiles | combine | " + " | ".join(held_names) + " | within 10% |",
           "|---|---:|---|" + "---:|" * len(held_names) + "---:|"]
    for a in alt:
        rs = [a["rows"][h] for h in held_names]
        cells = [f"{r['trained']:,} ({100 * (r['trained'] / r['itself'] - 1):+.1f}%; {r['cold_functions']:,} cold)"
                 for r in rs]
        ok = sum(r["trained"] / r["itself"] - 1 <= TOLERANCE for r in rs)
        out.append(f"| {a['training']} | {a['compiles']} | {a['combine']} | " + " | ".join(cells) + f" | {ok}/{len(rs)} |")
    return out


def table(rows: list[dict], args, n_train: int) -> list[str]:
    f = lambda x: "—" if x is None else f"{x:,.0f}"  # noqa: E731
    out = [f"## libLLVM-16 (lld relink) on held-out real compiles: trained on {', '.join(args.train)}"
           f"{' and the feature corpus' if args.with_corpus else ''} "
           f"({n_train} compiles), held out {', '.join(args.held_out)}; combine {args.combine}, selective, "
           f"read_ahead_kb {args.read_ahead_kb}, median of {args.runs}", "",
           "| held-out compile | unordered | trained | itself | trained vs itself | ≤ unordered | "
           "model: unordered / trained / itself | its functions in the trained region |",
           "|---|---:|---:|---:|---:|---|---:|---:|"]
    ok = worse = 0
    for r in rows:
        m, p = r["measured"], r["predicted"]
        u, t, i = m["unordered"], m["trained"], m["itself"]
        vs = f"{100 * (t / i - 1):+.1f}%" if t and i else "—"
        ok += bool(t and i and t / i - 1 <= TOLERANCE)
        worse += bool(t and u and t > u)
        out.append(f"| {r['workload']} | {f(u)} | {f(t)} | {f(i)} | {vs} | "
                   f"{'—' if not (t and u) else ('yes' if t <= u else 'NO')} | "
                   f"{f(p['unordered'])} / {f(p['trained'])} / {f(p['itself'])} | "
                   f"{100 * (p['in_hot_fraction'] or 0):.1f}% |")
    out.append(f"\nwithin {TOLERANCE:.0%} of the self-trained order: {ok}/{len(rows)}; above unordered: {worse}/{len(rows)}")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--train", action="append",
                    help=f"training project (default: {', '.join(llvm_realir.TRAINING)})")
    ap.add_argument("--held-out", action="append",
                    help=f"held-out project (default: {', '.join(llvm_realir.HELD_OUT)})")
    ap.add_argument("--combine", default="phased", choices=("earliest", "shared", "phased", "mean", "concat"))
    ap.add_argument("--read-ahead-kb", type=int, default=128)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--with-corpus", action="store_true",
                    help="also train on llc -O2 of the hand-written feature corpus (targets/llvm_corpus)")
    ap.add_argument("--profile-only", action="store_true", help="stop after profiling every workload")
    ap.add_argument("--model-only", action="store_true", help="predicted pages only: no relinks, no measurement")
    ap.add_argument("--no-model", action="store_true", help="skip the model's table of training subsets and rules")
    ap.add_argument("--json", metavar="OUT")
    args = ap.parse_args()
    args.train, args.held_out = llvm_realir.split(args.train or llvm_realir.TRAINING,
                                                  args.held_out or llvm_realir.HELD_OUT)
    base = libllvm.relink("lld")
    held = llvm_realir.workloads(args.held_out)
    training = llvm_realir.workloads(args.train) + (corpus_workloads() if args.with_corpus else [])
    profs = profiles(base, held + training)
    if args.profile_only:
        return 0
    wls = dict(held + training)
    held_names = [n for n, _ in held]
    alt = [] if args.no_model else alternatives(
        Path(base["lib"]), profs, subsets(args.train, [n for n, _ in corpus_workloads()] if args.with_corpus else []),
        held_names, args.read_ahead_kb)
    if alt:
        print("\n".join(alternatives_lines(alt, held_names)), flush=True)
    if args.model_only:
        return 0
    rows = measure_rows(args, base, profs, [n for n, _ in training], held_names, wls)
    print("\n".join(table(rows, args, len(training))))
    if args.json:
        Path(args.json).write_text(json.dumps({"train": args.train, "held_out": args.held_out,
                                               "combine": args.combine, "rows": rows, "alternatives": alt}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
