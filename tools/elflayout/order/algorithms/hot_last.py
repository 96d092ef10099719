"""Hot-last ordering: first-access order, placed at the *end* of the code.

Goal: the same contiguous first-access run of touched code as ``first_access``, but
adjacent to the linker-made code lld puts after ``.text`` (``.init``, ``.fini``,
``.plt``). ld.so calls ``.init`` before any other code of the library; in an
executable mapping the kernel reads forward from a fault to the end of the mapping
(Linux 6.16+, see docs/ordering.md), so with the touched code at the front of ``.text``
that call reads the last pages of *untouched* ``.text`` (14 pages at read_ahead_kb 128
for libLLVM); with the touched code at the end, those pages are wanted ones.

Citation: the read-around behaviour is mm/filemap.c ``do_sync_mmap_readahead`` (VM_EXEC
branch, "mm/filemap: allow arch to request folio size for exec memory", 6.16); the
ordering itself is first access (Hommey 2011, see ``first_access``).

Definitions:
- *touched code*: what ``first_access.compute`` places (functions and code sections).
- *cold code*: every other code input section of the link, in link-map order, named by
  one symbol it defines (``Universe.text_order``).

Steps:
1. Compute the first-access layout (data, objects and the resolution report included).
2. Without a link map (no universe) there is no cold list: return the first-access
   layout unchanged and say so in the report.
3. Otherwise list every cold code section first, in its original order (except those
   whose name also names a touched section: lld would move both), then the
   touched code in first-access order. lld places listed sections in file order at the
   front of ``.text``, so the cold ones keep their order and the touched ones end
   ``.text``, next to ``.init``/``.fini``/``.plt``.
Only the ``lld`` format benefits: gold puts ``.init``/``.plt`` before ``.text`` (use
``first-access``), and unlisted sections would follow the listed ones anyway.
"""

from __future__ import annotations

from elflayout.order.algorithms import Layout
from elflayout.order.algorithms import first_access
from elflayout.order.resolve import Resolved, Universe

NAME = "hot-last"


def compute(target: dict, universe: Universe | None = None, *, data: bool = True) -> Layout:
    layout = first_access.compute(target, universe, data=data)
    layout.report["algorithm"] = NAME
    order = getattr(universe, "text_order", None) if universe is not None else None
    if not order:
        layout.report["hot_last"] = "no link map: first-access order unchanged"
        return layout
    cold, shared = cold_sections(layout, universe)
    layout.functions = [r for r, _sec, _obj in cold] + layout.functions
    layout.report["hot_last"] = {"cold_sections_listed_first": len(cold), "cold_names_shared_with_hot": shared}
    return layout


def cold_sections(layout: Layout, universe: Universe) -> tuple[list[tuple[Resolved, str, str]], int]:
    """The code sections of ``universe.text_order`` the layout's functions do not hold, in
    link order: (an entry an ordering file can list, section, object); and how many were
    left out because their symbol also names a touched section."""
    hot_names = {r.link_name for r in layout.functions}
    hot_secs = {(s, o) for r in layout.functions for s in r.sections for o in r.objects}
    cold, shared = [], 0
    for sym, sec, obj in universe.text_order:
        if sym in hot_names or (sec, obj) in hot_secs:
            continue
        # lld gives a listed name's priority to *every* section defining it: a local name
        # also defined in a touched section (``__cxx_global_array_dtor``) would drag that
        # section among the cold ones, so it stays unlisted
        if any(so in hot_secs for so in universe.symbols.get(sym, ())):
            shared += 1
            continue
        cold.append((Resolved(f"<cold {sec}>", sym, [], [obj], "cold"), sec, obj))
    return cold, shared
