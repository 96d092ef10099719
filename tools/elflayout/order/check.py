"""How well a linked library honours a profile's order.

Metrics (docs/ordering.md):
- ``in_order_fraction``: length of the longest increasing subsequence of the touched
  functions' addresses, taken in profile (first-access) order, over the number placed.
  1.0 = every function where the order wants it; a random layout of n functions gives
  about 2·sqrt(n)/n.
- ``kendall_tau``: rank correlation of first-access rank with address (scipy).
- ``contiguity``: total size of the touched functions / bytes from the first touched
  byte to the last; ``pages`` / ``pages_min``: distinct 4 KiB pages holding touched
  functions vs the fewest they could fit in.
- ``missing``: profiled names the library does not define (stale entries when the
  profile is of another build); ``ambiguous``: names defined more than once (local
  symbols of several objects) that the order metrics leave out unless the profile is of
  this very build (then offsets identify them).
"""

from __future__ import annotations

import bisect

import numpy as np

from elflayout.elfcore import PAGE, ElfImage
from elflayout.layouts import SHF_EXECINSTR
from elflayout.profile.model import Target
from elflayout.order.resolve import clone_base, ctor_alias, elf_symbols, is_fde_only, thunk_target


def lis_length(seq) -> int:
    """Longest strictly increasing subsequence (patience sorting, O(n log n))."""
    tails: list = []
    for x in seq:
        i = bisect.bisect_left(tails, x)
        if i == len(tails):
            tails.append(x)
        else:
            tails[i] = x
    return len(tails)


def lib_functions(img: ElfImage) -> dict[str, list[tuple[int, int]]]:
    """name → [(file offset, size)] of the library's function symbols (.symtab, else .dynsym)."""
    arr, names = elf_symbols(img)
    out: dict[str, list[tuple[int, int]]] = {}
    sel = np.flatnonzero((arr["type"] == 2) & (arr["offset"] >= 0))
    offs, sizes = arr["offset"][sel].tolist(), arr["size"][sel].tolist()
    for i, o, s in zip(sel.tolist(), offs, sizes):
        lst = out.setdefault(names[i], [])
        if (o, s) not in lst:
            lst.append((o, s))
    return out


def check(lib, target: Target) -> dict:
    with ElfImage(lib) as img:
        ident = img.identity()
        same_build = bool(target.build_id) and target.build_id == ident["build_id"]
        funcs_by_name = lib_functions(img)
        exec_secs = [s for s in img.sections if s.occupies_file and (s.flags & SHF_EXECINSTR)]
    entries = target.functions
    placed: list[tuple[int, int]] = []  # (offset, size) in profile order
    missing, ambiguous, fde_only = [], [], 0
    how = {"exact": 0, "clone": 0, "thunk": 0, "offset": 0}
    seen = set()
    for e in entries:
        name = e.name
        if same_build and e.offset is not None:
            ext = (e.offset, e.size or 1)
            h = "offset"
        else:
            if is_fde_only(name):
                fde_only += 1
                continue
            cands, h = _candidates(name, funcs_by_name)
            if not cands:
                missing.append(name)
                continue
            if len(cands) > 1:
                ambiguous.append(name)
                continue
            ext = cands[0]
        if ext in seen:
            continue
        seen.add(ext)
        how[h] += 1
        placed.append(ext)
    n = len(placed)
    res = {
        "lib": ident,
        "profile_target": {"path": target.path, "build_id": target.build_id},
        "same_build": same_build,
        "profiled": len(entries),
        "placed": n,
        "matched_by": how,
        "missing": len(missing),
        "missing_examples": missing[:10],
        "stale": not same_build and len(missing) > 0,
        "ambiguous": len(ambiguous),
        "ambiguous_examples": list(dict.fromkeys(ambiguous))[:10],
        "fde_only": fde_only,
    }
    if n == 0:
        res.update(in_order_fraction=None, kendall_tau=None, contiguity=None, pages=0, pages_min=0, span_bytes=0,
                   touched_bytes=0)
        return res
    res.update(_order_metrics(placed))
    res["text_bytes"] = sum(s.size for s in exec_secs)
    return res


def _candidates(name: str, funcs_by_name: dict) -> tuple[list | None, str]:
    """The extents a profiled name may stand for in the library, and how it matched
    (exact name, else its clone base, thunk target or constructor alias)."""
    cands = funcs_by_name.get(name)
    if cands:
        return cands, "exact"
    b, t = clone_base(name), thunk_target(name)
    if b != name and funcs_by_name.get(b):
        return funcs_by_name[b], "clone"
    if t and funcs_by_name.get(t):
        return funcs_by_name[t], "thunk"
    if ctor_alias(name) and funcs_by_name.get(ctor_alias(name)):
        return funcs_by_name[ctor_alias(name)], "clone"
    return cands, "exact"


def _order_metrics(placed: list[tuple[int, int]]) -> dict:
    """How ordered and compact the placed (offset, size) extents, in profile order, are."""
    n = len(placed)
    offs = np.array([p[0] for p in placed], dtype=np.int64)
    sizes = np.maximum(np.array([p[1] for p in placed], dtype=np.int64), 1)
    from scipy.stats import kendalltau

    tau = float(kendalltau(np.arange(n), offs).statistic) if n > 1 else 1.0
    touched = int(sizes.sum())
    span = int((offs + sizes).max() - offs.min())
    first_pg, last_pg = offs // PAGE, (offs + sizes - 1) // PAGE
    return dict(
        in_order_fraction=lis_length(offs.tolist()) / n,
        kendall_tau=tau,
        touched_bytes=touched,
        span_bytes=span,
        contiguity=touched / span if span else 1.0,
        pages=_count_pages(first_pg, last_pg),
        pages_min=-(-touched // PAGE),
    )


def _count_pages(first_pg: np.ndarray, last_pg: np.ndarray) -> int:
    """Distinct pages covered by [first, last] ranges (vectorised union of intervals)."""
    o = np.argsort(first_pg, kind="stable")
    f, l = first_pg[o], last_pg[o]
    run_end = np.maximum.accumulate(l)
    new = np.ones(len(f), dtype=bool)
    new[1:] = f[1:] > run_end[:-1]
    starts = f[new]
    ends = np.maximum.reduceat(l, np.flatnonzero(new))
    return int((ends - starts + 1).sum())


def honoured(res: dict, min_order: float) -> bool:
    return res.get("in_order_fraction") is not None and res["in_order_fraction"] >= min_order


def summary_lines(res: dict) -> list[str]:
    lines = [f"library:   {res['lib']['path']} (build-id {res['lib']['build_id']})",
             f"profile:   {res['profile_target']['path']} (build-id {res['profile_target']['build_id']})"
             + ("" if res["same_build"] else "  [different build]")]
    lines.append(f"functions: {res['placed']} placed of {res['profiled']} profiled; {res['missing']} missing"
                 + (" (stale profile entries)" if res["stale"] else "")
                 + f", {res['ambiguous']} ambiguous, {res['fde_only']} FDE-only")
    if res["in_order_fraction"] is None:
        lines.append("order:     nothing to check (no profiled function found in the library)")
        return lines
    lines.append(f"order:     {100 * res['in_order_fraction']:.1f}% in profile order (LIS), Kendall tau {res['kendall_tau']:.3f}")
    lines.append(f"packing:   {res['touched_bytes']:,} touched bytes spread over {res['span_bytes']:,} "
                 f"(contiguity {100 * res['contiguity']:.1f}%); {res['pages']:,} pages, {res['pages_min']:,} at best")
    if res["missing_examples"]:
        lines.append("missing:   " + ", ".join(res["missing_examples"][:5]) + (" …" if res["missing"] > 5 else ""))
    return lines


def object_order_fraction(lib, target: Target, objects=None) -> float | None:
    """Share of touched objects (LIS) whose code starts in the profile's object order.

    An object's place is the lowest address of its profiled functions in ``lib``;
    functions whose name is defined more than once are left out. ``objects`` (the link's
    object arguments), when given, restricts the check to objects of this link.
    """
    from elflayout.order.resolve import same_object

    with ElfImage(lib) as img:
        funcs = lib_functions(img)
    where: dict[str, int] = {}
    for e in target.functions:
        o, c = e.object, funcs.get(e.name)
        if o and c and len(c) == 1:
            where[o] = min(where.get(o, c[0][0]), c[0][0])
    order = [o.object for o in target.objects]
    order = [o for o in dict.fromkeys(order + list(where)) if o in where]
    if objects is not None:
        order = [o for o in order if any(same_object(o, a) for a in objects)]
    if not order:
        return None
    return lis_length([where[o] for o in order]) / len(order)
