"""Layout algorithms: one file each, documented as in lld's CallGraphSort.cpp.

Every algorithm is ``compute(target: dict, universe: Universe | None) -> Layout``.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Layout:
    """An ordering, linker-neutral; ``formats`` writes it for a given linker.

    ``functions``: resolved entries (``resolve.Resolved``) in the order to place them;
    ``data``: (input section name, object or None) in the order to place them;
    ``data_symbols``: symbols naming ordered data sections (for lld, which orders by symbol);
    ``data_sparse``: (input section name, object or None) of big data sections touched on
    few of their pages, left out of ``data`` (``first_access.SPARSE_*``), in first-access order;
    ``objects``: object files in the order to link them (touched ones only; the writer
    appends the rest in their original order when it knows them).
    """

    functions: list = field(default_factory=list)
    data: list = field(default_factory=list)
    data_symbols: list = field(default_factory=list)
    data_sparse: list = field(default_factory=list)
    objects: list = field(default_factory=list)
    report: dict = field(default_factory=dict)


ALGORITHMS = {
    "first-access": "elflayout.order.algorithms.first_access",
    "hot-last": "elflayout.order.algorithms.hot_last",
}


def get(name: str):
    import importlib

    from elflayout.errors import ElflayoutError

    if name not in ALGORITHMS:
        raise ElflayoutError(f"--algorithm: unknown algorithm {name!r} (choose from {', '.join(ALGORITHMS)})")
    return importlib.import_module(ALGORITHMS[name])
