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
- ``landed`` / ``reasons``: where each profiled function landed (file offset, output
  section; input section and object with the library's link map) and, for each one out
  of profile order (not in the longest increasing subsequence) or not placed, why,
  grouped by cause (``REASONS``).
"""

from __future__ import annotations

import bisect
import re
from collections import Counter

import numpy as np

from elflayout.elfcore import PAGE, ElfImage
from elflayout.layouts import SHF_EXECINSTR
from elflayout.profile.model import Target
from elflayout.order.resolve import clone_base, ctor_alias, elf_symbols, is_fde_only, same_object, thunk_target


def lis_length(seq) -> int:
    """Longest strictly increasing subsequence (patience sorting, O(n log n))."""
    return sum(lis_members(seq))


def lis_members(seq) -> list[bool]:
    """Which items belong to one longest strictly increasing subsequence of ``seq``."""
    tails: list = []      # value ending the best subsequence of each length
    tail_at: list[int] = []
    prev = [-1] * len(seq)
    for i, x in enumerate(seq):
        k = bisect.bisect_left(tails, x)
        if k == len(tails):
            tails.append(x)
            tail_at.append(i)
        else:
            tails[k] = x
            tail_at[k] = i
        prev[i] = tail_at[k - 1] if k else -1
    keep = [False] * len(seq)
    i = tail_at[-1] if tail_at else -1
    while i >= 0:
        keep[i] = True
        i = prev[i]
    return keep


# The shared-section remedy; after ``link --split`` it is replaced by SPLIT_DONE.
SPLIT_HINT = "Split it: elflayout link --split"
SPLIT_DONE = "elflayout link --split kept these sections whole (its reasons are printed above)"

# Why a profiled function is out of profile order or not placed: key -> what it means.
REASONS = {
    "shared-section": "in an input section holding other profiled functions too (plain .text of an object built "
                      "without -ffunction-sections, or functions elflayout split kept together): an ordering file "
                      "names sections, so the section moves whole, in its own order; gold cannot name a plain .text "
                      "per object at all. " + SPLIT_HINT,
    "prefixed-section": "whole function in .text.unlikely/.hot/.startup/.exit: not named in the ordering, the "
                        "linker's default rules grouped it with the cold/hot/startup/exit code",
    "comdat-other-object": "COMDAT section kept from another object than the profiled one (section names are "
                           "shared; the linker kept the first copy)",
    "same-name-section": "a section name several objects use (a local function's, e.g. foo.isra.0): an lld symbol "
                         "file or a gold section file names every copy at once, so they land together at the first "
                         "one's place (a GNU ld script names the file too)",
    "not-ordered": "its input section is not named in the ordering file",
    "same-address": "shares its address with another profiled function (ICF-folded or an alias): placed once",
    "not-in-output": "not in the output: discarded (--gc-sections, an unused COMDAT copy), folded, or renamed",
    "ambiguous-name": "local name defined in several objects of the output (e.g. foo.isra.0): left out of the order "
                      "metrics; an lld symbol file or a gold section file names every copy at once, so they land "
                      "together at the first one's place (a GNU ld script names the file too)",
    "other": "in a section of its own, yet out of order: the ordering did not name it or the linker did not "
             "honour it (--ordering FILE tells the two apart)",
}
_GENERIC_TEXT = (".text", ".text.unlikely", ".text.hot", ".text.startup", ".text.exit")
_PREFIXED = (".text.unlikely.", ".text.hot.", ".text.startup.", ".text.exit.")


def ordered_sections_of(text: str) -> set[str]:
    """Input section names an ordering file names: a gold ``--section-ordering-file``
    (one name a line; globs left out) or a GNU ld script (``*(NAME)``,
    ``FILE(NAME)``). An lld symbol file names symbols, not sections: empty set."""
    if "SECTIONS" in text:
        return set(re.findall(r"\(([^()*?\s]+)\)", text))
    names = {ln.strip() for ln in text.splitlines()}
    if any(n.startswith(".") for n in names):
        return {n for n in names if n.startswith(".") and not any(c in n for c in "*?[")}
    return set()


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


def check(lib, target: Target, lib_map=None, ordered_sections=None) -> dict:
    """``lib_map``: the link map of ``lib`` (input sections and objects of each function);
    ``ordered_sections``: the input section names the ordering file named (both optional:
    they sharpen the reasons)."""
    with ElfImage(lib) as img:
        ident = img.identity()
        same_build = bool(target.build_id) and target.build_id == ident["build_id"]
        funcs_by_name = lib_functions(img)
        exec_secs = [s for s in img.sections if s.occupies_file and (s.flags & SHF_EXECINSTR)]
        out_secs = [(s.offset, s.offset + s.size, s.name) for s in img.sections if s.occupies_file and s.size]
    where = _input_sections(lib_map, lib) if lib_map else None
    entries = target.functions
    placed: list[tuple[int, int]] = []  # (offset, size) in profile order
    placed_entries = []
    missing, ambiguous, fde_only = [], [], 0
    how = {"exact": 0, "clone": 0, "thunk": 0, "offset": 0}
    seen: dict = {}
    unplaced: list[tuple] = []  # (entry, reason key)
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
                unplaced.append((e, "not-in-output"))
                continue
            if len(cands) > 1:
                ambiguous.append(name)
                unplaced.append((e, "ambiguous-name"))
                continue
            ext = cands[0]
        if ext in seen:
            if seen[ext] != name:
                unplaced.append((e, "same-address"))
            continue
        seen[ext] = name
        how[h] += 1
        placed.append(ext)
        placed_entries.append(e)
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
    res.update(_landed(placed, placed_entries, unplaced, out_secs, where, ordered_sections, lib_map))
    if n == 0:
        res.update(in_order_fraction=None, kendall_tau=None, contiguity=None, pages=0, pages_min=0, span_bytes=0,
                   touched_bytes=0)
        return res
    res.update(_order_metrics(placed))
    res["text_bytes"] = sum(s.size for s in exec_secs)
    return res


def _input_sections(lib_map, lib):
    """The input sections of ``lib`` from its link map: sorted start offsets, ends, names,
    objects, and how many input sections bear each code section name."""
    from elflayout.order.resolve import universe_from_linkmap

    u = universe_from_linkmap(lib_map, lib)
    ext = u.extents
    o = np.argsort(ext["offset"], kind="stable")
    starts = ext["offset"][o]
    ends = starts + ext["size"][o]
    names = [u.extent_names[k] for k in o.tolist()]
    objs = [u.extent_objects[k] for k in o.tolist()]
    return starts, ends, names, objs, Counter(n for n in names if n.startswith(".text"))


def _where(off: int, where):
    """(input section, object) holding file offset ``off``, or (None, None)."""
    if where is None:
        return None, None
    starts, ends, names, objs, _ = where
    k = int(np.searchsorted(starts, off, side="right")) - 1
    # empty sections may start at the same offset as the one holding ``off``
    while k > 0 and ends[k] <= off and starts[k - 1] == starts[k]:
        k -= 1
    if k >= 0 and starts[k] <= off < ends[k]:
        return names[k], objs[k]
    return None, None


def _reason(e, sec: str | None, obj: str | None, shared: int, ordered_sections, where) -> str:
    """Why a placed function is out of profile order (``REASONS`` key)."""
    psec = sec or e.section
    if shared > 1 or (psec in _GENERIC_TEXT and sec is None):
        return "shared-section"
    if sec and where is not None and where[4][sec] > 1:
        return "same-name-section"
    if ordered_sections is not None and psec and psec not in ordered_sections:
        return "prefixed-section" if psec.startswith(_PREFIXED) else "not-ordered"
    if obj and e.object and not same_object(obj, e.object):
        return "comdat-other-object"
    if psec and psec.startswith(_PREFIXED) and ordered_sections is None:
        return "prefixed-section"
    return "other"


def _landed(placed, placed_entries, unplaced, out_secs, where, ordered_sections, lib_map) -> dict:
    """``landed`` (every profiled function: where it is, in order or why not),
    ``reasons`` (counts and examples per cause), ``out_of_order`` and ``not_placed``."""
    order_ok = lis_members([p[0] for p in placed])
    locs = [_where(off, where) for off, _ in placed]
    per_section = Counter(locs)  # profiled functions sharing one input section of one object
    landed, counts, examples = [], Counter(), {}
    for (off, size), e, ok, (sec, obj) in zip(placed, placed_entries, order_ok, locs):
        shared = per_section[(sec, obj)] if sec is not None else 0
        why = None if ok else _reason(e, sec, obj, shared, ordered_sections, where)
        osec = next((nm for a, b, nm in out_secs if a <= off < b), None)
        row = {"name": e.name, "rank": e.first, "offset": off, "size": size, "output_section": osec,
               "input_section": sec, "object": obj, "profiled_section": e.section, "profiled_object": e.object,
               "in_order": ok, "reason": why}
        landed.append(row)
        if why:
            counts[why] += 1
            examples.setdefault(why, []).append(row)
    for e, why in unplaced:
        row = {"name": e.name, "rank": e.first, "offset": None, "size": e.size, "output_section": None,
               "input_section": None, "object": None, "profiled_section": e.section, "profiled_object": e.object,
               "in_order": None, "reason": why}
        landed.append(row)
        counts[why] += 1
        examples.setdefault(why, []).append(row)
    reasons = {k: {"count": c, "what": REASONS[k], "examples": [_example(r) for r in examples[k][:5]],
                   "objects": _top_objects(examples[k])} for k, c in counts.most_common()}
    return {"out_of_order": sum(1 for ok in order_ok if not ok), "not_placed": len(unplaced), "reasons": reasons,
            "landed": landed,
            "map": str(lib_map) if lib_map else None}


def _example(r: dict) -> str:
    sec = r["input_section"] or r["profiled_section"]
    obj = r["object"] or r["profiled_object"]
    at = f" at {r['offset']:#x}" if r["offset"] is not None else ""
    return f"{r['name']}{at} ({sec or '?'} of {_short(obj)})"


def _top_objects(rows: list[dict]) -> dict:
    c = Counter(_short(r["object"] or r["profiled_object"]) for r in rows)
    return dict(c.most_common(5))


def _short(obj: str | None) -> str:
    """``/x/y/libfoo.a(bar.o)`` → ``libfoo.a(bar.o)``."""
    if not obj:
        return "?"
    head, sep, tail = obj.partition("(")
    return head.rsplit("/", 1)[-1] + sep + tail


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
    lines += reason_lines(res)
    return lines


def reason_lines(res: dict, examples: int = 3) -> list[str]:
    """Out-of-order and unplaced functions grouped by cause, with a few examples each."""
    reasons = res.get("reasons") or {}
    if not reasons:
        return []
    lines = [f"why:       {res.get('out_of_order', 0)} placed functions out of profile order, "
             f"{res.get('not_placed', 0)} not placed"
             + ("" if res.get("map") else " (give the library's link map, --map, for input sections and objects)")]
    for key, r in reasons.items():
        objs = ", ".join(f"{o} {n}" for o, n in r["objects"].items())
        lines.append(f"  {r['count']:>5}  {key}: {r['what']}")
        lines.append(f"         objects: {objs}")
        for ex in r["examples"][:examples]:
            lines.append(f"         e.g. {ex}")
    return lines


def landed_lines(res: dict) -> list[str]:
    """One line per profiled function, in profile order: where it landed and, if out of order, why."""
    lines = [f"{'rank':>6}  {'offset':>10}  {'in order':8}  {'section / object':40}  function"]
    for r in sorted(res.get("landed", []), key=lambda r: r["rank"]):
        at = f"{r['offset']:#x}" if r["offset"] is not None else "-"
        ok = {True: "yes", False: "NO", None: "-"}[r["in_order"]]
        where = f"{r['input_section'] or r['output_section'] or r['profiled_section'] or '?'} {_short(r['object'] or r['profiled_object'])}"
        lines.append(f"{r['rank']:>6}  {at:>10}  {ok:8}  {where:40}  {r['name']}" + (f"  [{r['reason']}]" if r["reason"] else ""))
    return lines


def object_order_fraction(lib, target: Target, objects=None) -> float | None:
    """Share of touched objects (LIS) whose code starts in the profile's object order.

    An object's place is the lowest address of its profiled functions in ``lib``;
    functions whose name is defined more than once are left out. ``objects`` (the link's
    object arguments), when given, restricts the check to objects of this link.
    """
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
