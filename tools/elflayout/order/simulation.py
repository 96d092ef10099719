"""Simulation result v1 (``elflayout simulate --json``; docs/formats/order.md): predict,
build, parse, read.

``predict`` places a profile's touches on a library (``placement``) and replays them
through the readahead model (``readahead.simulate``); ``build`` makes the
``elflayout-simulation`` document of the result, ``parse``/``read`` type one, so what
is written is what a reader accepts.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from elflayout import fileio
from elflayout.errors import ElflayoutError

KIND = "simulation"
VERSION = 1


@dataclass(frozen=True)
class Simulation:
    """A parsed ``elflayout-simulation`` document. ``metadata``: the profile, the model's
    settings (``read_ahead_kb``, ``loader_model``, ``madv_hugepage``, ``code_bytes``,
    ``page_size``: the bytes of the model's page, which ``pages`` and ``reads`` count),
    the placement notes (``same_build``, ``functions``, ``functions_unplaced``,
    ``pages``, ``pages_unplaced`` …) and ``warnings``; ``lib``: the library's identity."""

    metadata: dict
    lib: dict
    pages: int
    bytes: int
    by_section: dict[str, int]
    by_cause: dict[str, int]
    faults: dict[str, int]
    requests: int
    touches: int
    reads: tuple[tuple[int, int], ...] = field(repr=False)
    source: str = "simulation"

    @property
    def warnings(self) -> list[str]:
        return list(self.metadata.get("warnings") or [])


def build(metadata: dict, lib: dict, result: dict) -> dict:
    """The document of ``readahead.simulate``'s ``result`` for the library ``lib``."""
    return fileio.envelope(KIND, VERSION, metadata, lib=lib, **result)


def _counts(v, where: str) -> dict[str, int]:
    if not isinstance(v, dict) or not all(isinstance(n, int) and not isinstance(n, bool) for n in v.values()):
        raise ElflayoutError(f"{where}: expected an object of counts")
    return dict(v)


def _count(v, where: str) -> int:
    if not isinstance(v, int) or isinstance(v, bool) or v < 0:
        raise ElflayoutError(f"{where}: expected a count, found {v!r}")
    return v


def parse(doc: dict, source: str = "simulation") -> Simulation:
    """Type a document (format and version already checked); one-line errors."""
    md, lib = doc.get("metadata"), doc.get("lib")
    if not isinstance(md, dict):
        raise ElflayoutError(f"{source}: simulation has no metadata object")
    if not isinstance(lib, dict) or not isinstance(lib.get("path"), str):
        raise ElflayoutError(f"{source}: simulation has no 'lib' identity")
    reads = doc.get("reads")
    if not isinstance(reads, list) or not all(isinstance(r, list) and len(r) == 2 for r in reads):
        raise ElflayoutError(f"{source}: 'reads' is not a list of [page, npages] pairs")
    faults = _counts(doc.get("faults"), f"{source}: faults")
    if set(faults) != {"major", "minor"}:
        raise ElflayoutError(f"{source}: faults: expected major and minor")
    return Simulation(metadata=md, lib=lib, pages=_count(doc.get("pages"), f"{source}: pages"),
                      bytes=_count(doc.get("bytes"), f"{source}: bytes"),
                      by_section=_counts(doc.get("by_section"), f"{source}: by_section"),
                      by_cause=_counts(doc.get("by_cause"), f"{source}: by_cause"), faults=faults,
                      requests=_count(doc.get("requests"), f"{source}: requests"),
                      touches=_count(doc.get("touches"), f"{source}: touches"),
                      reads=tuple((_count(p, f"{source}: reads"), _count(n, f"{source}: reads")) for p, n in reads),
                      source=str(source))


def read(path) -> Simulation:
    """Read and type a simulation file (``simulate --json`` output)."""
    return parse(fileio.load_json(path, KIND, (VERSION,)), str(path))


# A trace profile sees page faults only: pages fault-around maps without a fault (and
# everything a child process touches, without --children) are not in it.
TRACE_WARNING = ("page-granular (trace) profile: it holds only the pages that faulted, not those mapped by "
                 "fault-around without a fault, so the prediction is only a lower bound; profile with --backend "
                 "valgrind for a prediction")


# Another build without its link map: data pages keep their relative position in their
# output section, which a data order or a changed string pool moves (libcrypto's stripped
# default path: 388 predicted without the map, 308 with it, 324 read).
NO_MAP_WARNING = ("another build than the profiled one, without its link map: data pages are placed by their "
                  "relative position in each output section; pass --map LIB.map (the link map of LIB) to place them "
                  "by input section")


def touches_relocations(img, pages) -> bool:
    """Whether the touched ``pages`` already hold ld.so's relocation pass (a profile with
    data pages): then modelling the loader too would count it twice."""
    from elflayout.elfcore import PAGE

    rel = [s for s in img.sections if s.name in (".rela.dyn", ".rel.dyn", ".relr.dyn") and s.size]
    return any(((pages >= s.offset // PAGE) & (pages <= (s.offset + s.size - 1) // PAGE)).any() for s in rel)


def predict(profile, lib, target: str | None = None, read_ahead_kb: int | None = None, loader: str = "auto",
            code_bytes: int = 1, lib_map=None, hugepage: bool = False, page_size: int = 4096) -> dict:
    """The ``elflayout-simulation`` document for ``profile``'s touches on ``lib``.

    ``read_ahead_kb``: default the profile's, else 128. ``loader``: model ld.so's
    relocation pass (``yes``/``no``; ``auto``: unless the profile already touches the
    relocation tables). ``code_bytes``, ``lib_map``: as ``placement.profile_touches``.
    ``page_size``: the kernel's page (4, 16 or 64 KiB; the profile's 4 KiB touches are
    modelled in pages of that size, the figures counted in them).
    """
    from elflayout.elfcore import PAGE, ElfImage
    from elflayout.order.placement import profile_touches
    from elflayout.order.profile_input import load_profile, pick_target, require_touches
    from elflayout.order.readahead import simulate

    doc = load_profile(profile)
    t = pick_target(doc, profile, target or (str(lib) if len(doc.targets) > 1 else None))
    require_touches(t, profile)
    ra = read_ahead_kb
    if ra is None:
        ra = doc.metadata.get("read_ahead_kb") or 128
    if ra < 0:
        raise ElflayoutError(f"--read-ahead-kb: must be ≥ 0, got {ra}")
    with ElfImage(lib) as img:
        if lib_map and not os.path.exists(lib_map):
            raise ElflayoutError(f"{lib_map}: no such file")
        pages, kinds, notes = profile_touches(t, img, code_bytes, lib_map)
        if pages.size == 0:
            raise ElflayoutError(f"{profile}: no profiled touch could be placed in {lib} "
                                 f"({notes['functions_unplaced']} functions, {notes['pages_unplaced']} pages unplaced)")
        model_loader = loader == "yes" or (loader == "auto" and not touches_relocations(img, pages))
        res = simulate(img, pages, kinds, ra, model_loader, hugepage=hugepage, page_size=page_size)
        ident = img.identity()
    md = doc.metadata
    warnings = [TRACE_WARNING] if md.get("granularity") == "page" or md.get("backend") == "trace" else []
    if not notes["same_build"] and not lib_map and t.map and any(p.kind != "x" for p in t.pages):
        warnings.append(NO_MAP_WARNING)
    if page_size != PAGE:
        warnings.append(f"{page_size // 1024} KiB pages: a model of a kernel with that page size, not a measurement "
                        f"(profiles and measurements here are in 4 KiB pages)")
    return build({"profile": str(profile), "read_ahead_kb": ra, "loader_model": model_loader, "madv_hugepage": hugepage,
                  "code_bytes": code_bytes, "page_size": page_size, **notes, "warnings": warnings}, ident, res)
