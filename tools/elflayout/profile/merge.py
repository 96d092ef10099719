"""Merge several profiles (runs or workloads) of the same build into one.

Rule (docs/formats/profile.md, "merge"): profiles are taken in the order given.
``concat`` (default): profile k's sequence numbers are shifted past every earlier
profile's, so an entry's merged first access is its earliest one, with earlier profiles
winning — the first workload's order is kept and later workloads only append what it
never touched (icegrind's way of combining runs). ``rank``: each profile's sequence
numbers are scaled to [0, 1) of its own length and the earliest relative position wins,
interleaving workloads of similar length. Either way ``first`` is renumbered 0..N-1
over all entries of all targets, and every list stays in first-access order.

Targets are matched by build-id (else sha256, else path); the same path with a
different build-id or content is refused unless ``force``.
"""

from __future__ import annotations

from elflayout.errors import ElflayoutError
from elflayout.profile.model import LISTS, new_profile

KEYS = {
    "functions": lambda e: (e.get("name"), e.get("offset")),
    "sections": lambda e: (e.get("name"), e.get("object")),
    "objects": lambda e: e.get("object"),
    "pages": lambda e: (e.get("page"), e.get("kind")),
    "reads": lambda e: e.get("page"),
    "data_objects": lambda e: e.get("object"),
    "windows": lambda e: (e.get("page"), e.get("npages")),
}
RULES = ("concat", "rank")


def _ident(t: dict):
    return t.get("build_id") or t.get("sha256") or t["path"]


def _max_first(doc: dict) -> int:
    m = -1
    for t in doc["targets"]:
        for k in KEYS:
            for e in t.get(k, []):
                m = max(m, e["first"])
    return m


def merge(docs: list[dict], names: list[str] | None = None, *, force: bool = False, rule: str = "concat") -> dict:
    if rule not in RULES:
        raise ElflayoutError(f"unknown merge rule {rule!r} (known: {', '.join(RULES)})")
    if not docs:
        raise ElflayoutError("nothing to merge")
    names = names or [f"profile {i}" for i in range(len(docs))]
    # build-id check: one path, one build
    seen_path: dict = {}
    for name, d in zip(names, docs):
        for t in d["targets"]:
            p, ident = t["path"], _ident(t)
            if p in seen_path and seen_path[p][0] != ident and not force:
                raise ElflayoutError(f"{name}: {p} is a different build (build-id/sha256 {str(ident)[:16]}…) than in "
                                     f"{seen_path[p][1]} ({str(seen_path[p][0])[:16]}…); use --force to merge anyway")
            seen_path.setdefault(p, (ident, name))
    # merged key per entry
    shift, order_t, merged = 0.0, [], {}
    for d in docs:
        mf = _max_first(d)
        for t in d["targets"]:
            ident = _ident(t)
            if ident not in merged:
                base = {k: v for k, v in t.items() if k not in KEYS and k not in ("stats",)}
                merged[ident] = (base, {k: {} for k in KEYS})
                order_t.append(ident)
            lists = merged[ident][1]
            for k, keyf in KEYS.items():
                for e in t.get(k, []):
                    key = (shift + e["first"]) if rule == "concat" else e["first"] / (mf + 1)
                    kk = keyf(e)
                    old = lists[k].get(kk)
                    if old is None or key < old[0]:
                        lists[k][kk] = (key, e)
        shift += mf + 1
    allkeys = sorted({v[0] for ident in order_t for k in KEYS for v in merged[ident][1][k].values()})
    rank = {v: i for i, v in enumerate(allkeys)}
    targets = []
    for ident in order_t:
        base, lists = merged[ident]
        t = dict(base)
        for k in KEYS:
            items = sorted(lists[k].values(), key=lambda v: v[0])
            out = []
            for key, e in items:
                e = dict(e)
                e["first"] = rank[key]
                out.append(e)
            if k in LISTS or out:
                t[k] = out
        targets.append(t)
    metas = [d["metadata"] for d in docs]
    backends = sorted({m.get("backend") for m in metas})
    meta = {
        "argv": metas[0].get("argv"),
        "backend": backends[0] if len(backends) == 1 else "mixed",
        "granularity": metas[0].get("granularity") if len(backends) == 1 else "mixed",
        "kernel": metas[0].get("kernel"),
        "read_ahead_kb": metas[0].get("read_ahead_kb"),
        "started": min((m.get("started") or "") for m in metas) or None,
        "duration_s": sum((m.get("duration_s") or 0) for m in metas),
        "exit_status": next((m.get("exit_status") for m in metas if m.get("exit_status")), 0),
        "notes": [f"merged from {len(docs)} profiles with rule {rule!r} (earliest first access wins; "
                  f"see docs/formats/profile.md)"],
        "merge": {"rule": rule, "inputs": [{"name": n, "argv": m.get("argv"), "backend": m.get("backend"),
                                            "started": m.get("started")} for n, m in zip(names, metas)]},
    }
    return new_profile(meta, targets)
