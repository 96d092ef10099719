"""Pages read per file, from trace profiles and ``measure`` results.

Each timed run (or profile) of a file gives one :class:`Observation`: the file pages it
read and when each was first read, as a fraction of that run's read span (so runs of
different lengths, and valgrind's dilated clock, can be merged by rank).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import numpy as np

from elflayout import fileio
from elflayout.errors import ElflayoutError
from elflayout import results as results_model
from elflayout.profile import model as profile_model


@dataclass(frozen=True)
class Observation:
    path: str  # the file as it will be preloaded (the original when measured through a storage mount)
    build_id: str | None  # identity recorded by the input (None: not recorded)
    size: int | None
    pages: np.ndarray  # unique page numbers, increasing
    first: np.ndarray  # per page: first read time as a fraction [0, 1] of the run's read span
    source: str  # "FILE: variant/state round N" or "FILE: profile"


@dataclass
class Inputs:
    observations: list[Observation] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what was left out, and why
    sources: list[dict] = field(default_factory=list)  # per input file: {path, format, used, skipped}


def _observation(path, build_id, size, t, page, npages, source) -> Observation | None:
    t = np.asarray(t, dtype=float)
    page = np.asarray(page, dtype=np.int64)
    npages = np.asarray(npages, dtype=np.int64)
    if len(page) == 0:
        return None
    # expand folios into pages; each page keeps the time of its (first) read
    rep = np.repeat(np.arange(len(page)), npages)
    pages = page[rep] + (np.arange(len(rep)) - np.repeat(np.cumsum(npages) - npages, npages))
    times = t[rep]
    span = float(times.max() - times.min())
    frac = (times - times.min()) / span if span > 0 else np.zeros(len(times))
    order = np.lexsort((frac, pages))
    pages, frac = pages[order], frac[order]
    keep = np.r_[True, pages[1:] != pages[:-1]]  # earliest read of each page
    return Observation(path, build_id, size, pages[keep], frac[keep], source)


def _from_results(doc: dict, name: str, variants: set[str] | None, out: Inputs) -> None:
    md = doc.get("metadata", {})
    files_md = md.get("files", {}) or {}
    used = skipped = 0
    for r in doc["runs"]:
        if variants and r["variant"] not in variants:
            continue
        if r.get("interference"):
            skipped += 1
            continue
        for key, f in (r.get("files") or {}).items():
            if "reads" not in f:
                skipped += 1
                continue
            reads = f["reads"]
            if not reads:
                continue  # a hot run: nothing was read
            fm = files_md.get(key, {})
            path = fm.get("served_from") or key
            a = np.asarray(reads, dtype=float).reshape(-1, 3)
            ob = _observation(path, fm.get("build_id"), fm.get("size"), a[:, 0], a[:, 1], a[:, 2],
                              f"{name}: {r['variant']}/{r['state']} round {r.get('round')}")
            if ob is not None:
                out.observations.append(ob)
                used += 1
    if skipped:
        out.notes.append(f"{name}: {skipped} run file(s) without page-cache reads (mincore fallback or disturbed "
                         f"runs) left out")
    if variants:
        unknown = variants - {v.get("name") for v in doc["variants"]}
        if unknown:
            raise ElflayoutError(f"{name}: no variant {sorted(unknown)[0]!r} in this results file")
    out.sources.append({"path": name, "format": "elflayout-results", "used": used, "skipped": skipped})


def _from_profile(doc: dict, name: str, out: Inputs) -> None:
    used = 0
    for tg in doc["targets"]:
        if tg.get("reads"):
            ent = tg["reads"]
            ob = _observation(tg["path"], tg.get("build_id"), tg.get("size"), [e["t"] if e.get("t") is not None else e["first"] for e in ent],
                              [e["page"] for e in ent], [e.get("npages", 1) for e in ent], f"{name}: profile")
        elif tg.get("pages"):
            # valgrind backend: pages touched (no read-around seen); order by first access
            ent = tg["pages"]
            ob = _observation(tg["path"], tg.get("build_id"), tg.get("size"), [e["first"] for e in ent],
                              [e["page"] for e in ent], [1] * len(ent), f"{name}: profile (touched pages)")
        else:
            ob = None
        if ob is not None:
            out.observations.append(ob)
            used += 1
    out.sources.append({"path": name, "format": "elflayout-profile", "used": used, "skipped": 0})


def load(paths: list[str], variants: list[str] | None = None) -> Inputs:
    """Observations of every file in the given profiles / results files."""
    out = Inputs()
    vs = set(variants) if variants else None
    for p in paths:
        doc = fileio.load_json(p, ("profile", "results"))
        if doc["format"] == "elflayout-profile":
            _from_profile(profile_model.validate(doc, p), str(p), out)
        else:
            _from_results(results_model.load(p), str(p), vs, out)
    if not out.observations:
        raise ElflayoutError(f"{', '.join(map(str, paths))}: no pages read recorded (needs trace profiles "
                             f"or measure results with page-cache tracing)")
    bad = [ob for ob in out.observations if not os.path.isabs(ob.path)]
    if bad:
        # "MAJ:MIN:INO": a file the harness could not name; nothing to open at run time
        out.notes.append(f"{len(bad)} observation(s) of unnamed files left out ({bad[0].path})")
        out.observations = [ob for ob in out.observations if os.path.isabs(ob.path)]
    return out
