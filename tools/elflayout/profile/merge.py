"""Merge several profiles (runs or workloads) of the same build into one.

Goal: one profile whose order serves every workload it was recorded from, so that code
any workload touches lands in the hot region, and which still remembers each
workload's own order (for held-out evaluation and for re-combining).

Definitions:
- *rank* of an entry in workload w: its first-access position in w scaled to [0, 1)
  (``first / (last first of w + 1)``); None when w never touched it. Every merged entry
  keeps its ranks, one per workload, in ``ranks`` (order of ``metadata.workloads``).
- *rule*: how the ranks become the merged ``first``:
  - ``concat``: workload k's sequence is shifted past every earlier one's, so earlier
    workloads win and later ones only append what they never touched (icegrind's way
    of combining runs: Hommey 2011).
  - ``earliest`` (alias ``rank``): the smallest rank over the workloads that touched
    it — every workload's first accesses interleave near the front, like the startup
    traces of lld's balanced partitioning, where a function used early by any trace is
    pulled early (``--bp-startup-sort``; Hoag et al., "Optimizing Function Layout for
    Mobile Applications", LCTES 2023).
  - ``shared``: first what every workload touches, then what all but one touch, and so
    on; the earliest rank orders each group. Code all startups share stays dense at the
    front, and what only one workload needs does not dilute it (the "common to both
    phases" part of Chromium's phased orderfile, tools/cygprofile/phased_orderfile.py).
  - ``phased``: ``shared`` within phases. Workloads are put in phases by footprint
    (functions touched; entries of every list if none): in increasing footprint, a
    workload touching more than PHASE_FACTOR times as much as the smallest of the current
    phase starts the next. Everything the first phase touches comes first (itself by
    ``shared``), then what the next phase adds, and so on: code only short workloads run
    (a ``--version`` printing its banner) stays with their code rather than after all
    the code longer workloads share, which costs those a few pages. Chromium's phased
    orderfile puts the startup phase before the interactive one the same way
    (tools/cygprofile/phased_orderfile.py); here the phases come from the footprints.
  - ``mean``: the mean rank, a workload that never touched the entry counting 1.0:
    what most workloads need early comes first (Chromium's orderfile pipeline averages
    symbol positions over its profiled runs, tools/cygprofile).

Steps:
1. Targets are matched by build-id (else sha256, else path); the same path with a
   different build-id or content is refused unless ``force``.
2. For every list, each key's ranks are collected per workload (keys: see KEYS).
3. The rule turns ranks into one key; ties keep workload order, then list order.
4. ``first`` is renumbered 0..N-1 over all entries of all targets; every list stays in
   first-access order (docs/formats/profile.md, "merge").
"""

from __future__ import annotations

import dataclasses

import numpy as np

from elflayout.errors import ElflayoutError
from elflayout.profile.model import ENTRY_TYPES, LISTS, RODATA_READ, Profile, Target, byte_runs, new_profile

KEYS = {
    "functions": lambda e: (e.name, e.offset),
    "sections": lambda e: (e.name, e.object),
    "objects": lambda e: e.object,
    "pages": lambda e: (e.page, e.kind),
    "reads": lambda e: e.page,
    "data_objects": lambda e: e.object,
    "windows": lambda e: (e.page, e.npages),
}
RULES = ("earliest", "shared", "phased", "mean", "concat", "rank")
# ``phased``: a workload touching more than this many times the footprint of the smallest
# workload of its phase starts a new phase (a startup against a run that does work; held-
# out predictions on libLLVM were the same for factors 1.5 to 3, docs/ordering.md).
PHASE_FACTOR = 2.0


def _ident(t: Target):
    return t.build_id or t.sha256 or t.path


def _max_first(p: Profile) -> int:
    m = -1
    for t in p.targets:
        for k in KEYS:
            for e in getattr(t, k):
                m = max(m, e.first)
    return m


def phases(footprints: list[int]) -> list[int]:
    """The phase of each workload from its footprint (see ``phased``): 0 for the smallest."""
    out = [0] * len(footprints)
    phase, lo = -1, None
    for w in sorted(range(len(footprints)), key=lambda w: footprints[w]):
        if lo is None or footprints[w] > PHASE_FACTOR * lo:
            phase, lo = phase + 1, footprints[w]
        out[w] = phase
    return out


def footprints(entries_ranks: dict, n: int) -> list[int]:
    """Entries each of ``n`` workloads touched: ``entries_ranks`` maps a list name to the
    rank vectors of its entries; functions if any workload has them, else every list."""
    def count(lists):  # None -> nan: the touched entries per workload, counted in numpy
        got = np.zeros(n, np.int64)
        for k in lists:
            if entries_ranks.get(k):
                got += np.count_nonzero(~np.isnan(np.array(entries_ranks[k], dtype=float)), axis=0)
        return got.tolist()

    f = count(["functions"])
    return f if any(f) else count(KEYS)


def combine(ranks: list, rule: str, index: int = 0, phase: list[int] | None = None) -> float:
    """One sort key from an entry's per-workload ranks (None = not touched); ``phase``:
    each workload's phase, for ``phased``."""
    got = [r for r in ranks if r is not None]
    if rule == "phased":
        p = min(phase[w] for w, r in enumerate(ranks) if r is not None) if phase else 0
        return p * (len(ranks) + 1) + combine(ranks, "shared")
    if rule in ("earliest", "rank"):
        return min(got)
    if rule == "mean":
        return sum(1.0 if r is None else r for r in ranks) / len(ranks)
    if rule == "shared":  # fewest workloads missing it first, then earliest
        return (len(ranks) - len(got)) + min(got)
    # concat: the first workload that touched it, shifted past the earlier ones
    k = next(i for i, r in enumerate(ranks) if r is not None)
    return k + ranks[k]


def merge(profiles: list[Profile], names: list[str] | None = None, *, force: bool = False,
          rule: str = "concat", workloads: list[dict] | None = None) -> dict:
    """The merged profile document (JSON) of ``profiles`` taken in priority order.

    ``workloads``: what to record in ``metadata.workloads`` for each input (name, argv,
    conditions); by default its name, argv and backend."""
    if rule not in RULES:
        raise ElflayoutError(f"unknown merge rule {rule!r} (known: {', '.join(RULES)})")
    if not profiles:
        raise ElflayoutError("nothing to merge")
    names = names or [f"profile {i}" for i in range(len(profiles))]
    n = len(profiles)
    # 1. one path, one build
    _check_one_build(profiles, names, force)
    # 2. ranks per key: {ident: {list: {key: [entry of the earliest workload, ranks]}}}
    order_t, bases, lists, read, runs = [], {}, {}, {}, {}
    for w, d in enumerate(profiles):
        scale = _max_first(d) + 1
        for t in d.targets:
            ident = _ident(t)
            if ident not in bases:
                bases[ident] = t
                lists[ident] = {k: {} for k in KEYS}
                order_t.append(ident)
                read[ident] = set()
            read[ident].update(t.extra.get("strings") or ())
            if (rr := t.rodata_read()) is not None:
                runs.setdefault(ident, []).extend(rr.tolist())
            for k, keyf in KEYS.items():
                got = lists[ident][k]
                for e in getattr(t, k):
                    kk = keyf(e)
                    r = e.first / scale
                    # an input that is itself merged: keep its workloads' ranks folded into one
                    slot = got.get(kk)
                    if slot is None:
                        got[kk] = slot = [e, [None] * n]
                    if slot[1][w] is None or r < slot[1][w]:
                        slot[1][w] = r
    # 3. the rule's key; 4. renumber
    ph = phases(footprints({k: [r for ident in order_t for _e, r in lists[ident][k].values()] for k in KEYS}, n)) \
        if rule == "phased" else None
    keyed = []
    for ti, ident in enumerate(order_t):
        for li, k in enumerate(KEYS):
            for pos, (kk, (e, ranks)) in enumerate(lists[ident][k].items()):
                keyed.append((combine(ranks, rule, phase=ph), ti, li, pos, ident, k, e, ranks))
    keyed.sort(key=lambda x: x[:4])
    out: dict = {ident: {k: [] for k in KEYS} for ident in order_t}
    for i, (_key, _ti, _li, _pos, ident, k, e, ranks) in enumerate(keyed):
        out[ident][k].append(dataclasses.replace(e, first=i, ranks=[None if r is None else round(r, 6) for r in ranks]))
    targets = []
    for ident in order_t:
        b = bases[ident]
        t = Target(path=b.path, build_id=b.build_id, size=b.size, sha256=b.sha256, map=b.map, phases=b.phases,
                   mappings=b.mappings, extra=dict(b.extra), **out[ident])
        if read[ident]:     # profile --strings: what any workload read
            t.extra["strings"] = sorted(read[ident])
        if ident in runs:
            t.extra[RODATA_READ] = byte_runs(runs[ident])
        d = t.to_dict()
        for k in LISTS:
            d.setdefault(k, [])
        targets.append(d)
    return new_profile(_merged_metadata(profiles, names, rule, workloads), targets)


def _check_one_build(profiles: list[Profile], names: list[str], force: bool) -> None:
    """Refuse (unless ``force``) two inputs that profiled different builds under one path."""
    seen_path: dict = {}
    for name, d in zip(names, profiles):
        for t in d.targets:
            p, ident = t.path, _ident(t)
            if p in seen_path and seen_path[p][0] != ident and not force:
                raise ElflayoutError(f"{name}: {p} is a different build (build-id/sha256 {str(ident)[:16]}…) than in "
                                     f"{seen_path[p][1]} ({str(seen_path[p][0])[:16]}…); use --force to merge anyway")
            seen_path.setdefault(p, (ident, name))


def _merged_metadata(profiles: list[Profile], names: list[str], rule: str, workloads: list[dict] | None) -> dict:
    """The merged profile's metadata: the inputs' conditions, warnings and workloads."""
    n = len(profiles)
    metas = [d.metadata for d in profiles]
    backends = sorted({m.get("backend") for m in metas})
    wl = workloads or [{"name": nm, "argv": m.get("argv"), "backend": m.get("backend"), "env": m.get("env", []),
                        "started": m.get("started")} for nm, m in zip(names, metas)]
    meta = {
        "argv": metas[0].get("argv"),
        "backend": backends[0] if len(backends) == 1 else "mixed",
        "granularity": metas[0].get("granularity") if len(backends) == 1 else "mixed",
        "kernel": metas[0].get("kernel"),
        "read_ahead_kb": metas[0].get("read_ahead_kb"),
        "started": min((m.get("started") or "") for m in metas) or None,
        "duration_s": sum((m.get("duration_s") or 0) for m in metas),
        "exit_status": next((m.get("exit_status") for m in metas if m.get("exit_status")), 0),
        "notes": [f"merged from {n} profiles with rule {rule!r} (see docs/formats/profile.md, merge)"],
        "warnings": [w for m in metas for w in m.get("warnings", [])],
        "merge": {"rule": rule, "inputs": [{"name": nm, "argv": m.get("argv"), "backend": m.get("backend"),
                                            "started": m.get("started")} for nm, m in zip(names, metas)]},
        "workloads": wl,
    }
    # Whether data accesses were recorded: kept when every input says the same, so a merge
    # of --data runs is known as one (bench_pipeline.cached_profile compares it).
    data = {m.get("data") for m in metas}
    if len(data) == 1 and None not in data:
        meta["data"] = data.pop()
    return meta


def recombine(profile: Profile, rule: str) -> Profile:
    """The same profile with ``first`` recomputed from the entries' ``ranks`` by ``rule``
    (``order --combine``); a profile without ranks (one workload) is returned as is."""
    if rule not in RULES:
        raise ElflayoutError(f"unknown combination rule {rule!r} (known: {', '.join(RULES)})")
    if not profile.workloads:
        return profile
    for ti, t in enumerate(profile.targets):
        for k in KEYS:
            for pos, e in enumerate(getattr(t, k)):
                if e.ranks is None or all(r is None for r in e.ranks):
                    raise ElflayoutError(f"{profile.source}: {t.name}: {k} entry {pos} has no per-workload ranks")
    ph = phases(footprints({k: [e.ranks for t in profile.targets for e in getattr(t, k)] for k in KEYS},
                           len(profile.workloads))) if rule == "phased" else None
    keyed = []
    for ti, t in enumerate(profile.targets):
        for li, k in enumerate(KEYS):
            for pos, e in enumerate(getattr(t, k)):
                keyed.append((combine(e.ranks, rule, phase=ph), ti, li, pos, t, k, e))
    keyed.sort(key=lambda x: x[:4])
    out = [{k: [] for k in KEYS} for _ in profile.targets]
    for i, (_key, ti, _li, _pos, _t, k, e) in enumerate(keyed):
        out[ti][k].append(dataclasses.replace(e, first=i))
    targets = [dataclasses.replace(t, **out[ti]) for ti, t in enumerate(profile.targets)]
    return Profile(profile.metadata, targets, profile.source)


def workload_view(profile: Profile, index: int) -> Profile:
    """The part of a merged profile that workload ``index`` touched, in its own order
    (its ranks), as a one-workload profile: held-out evaluation of a merged profile."""
    wl = profile.workloads
    if not 0 <= index < len(wl):
        raise ElflayoutError(f"{profile.source}: no workload {index} (has {len(wl)})")
    targets = []
    for t in profile.targets:
        lists = {}
        for k in KEYS:
            got = [e for e in getattr(t, k) if e.ranks is not None and e.ranks[index] is not None]
            got.sort(key=lambda e: e.ranks[index])
            lists[k] = [dataclasses.replace(e, first=i, ranks=None) for i, e in enumerate(got)]
        targets.append(dataclasses.replace(t, **lists))
    meta = dict(profile.metadata)
    meta.pop("workloads", None)
    meta["argv"] = wl[index].get("argv")
    return Profile(meta, targets, f"{profile.source}[{wl[index].get('name', index)}]")


assert set(KEYS) == set(ENTRY_TYPES)
