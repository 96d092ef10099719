"""The steps ``elflayout link`` applies when not told otherwise, and why.

Goal: the default link is the best recipe measured (docs/benchmarks.md, libpython from
split objects): function order by the layout the readahead model predicts best, data
sections and ``.dynstr`` names in profile order, relative relocations packed, objects
without function sections split first, and the output checked against the profile.

Each step is decided here (a ``Step``: applied or not, why, and what it predicts); the
link itself runs in ``order.relink``. Every step can be turned off by an option.

Steps:
1. *split* (auto): when an object argument holds two or more functions in one code
   section (built without ``-ffunction-sections``), no ordering file can move them
   apart; ``elflayout split`` gives each its own section first.
2. *algorithm* (auto): the virtual code layouts of ``first-access`` and ``hot-last``
   (``heldout.ordered_layout``: the profile's functions packed at the start, or at the
   end, of their code section) on the profiled library, replayed through the readahead
   model (``readahead.simulate``, loader included, data where it is) at read_ahead_kb
   128 (``READ_AHEAD_KB``), each with the unloaded sections at the place step 7 would
   choose for it, and first-access with lld also with its readahead marks kept cold
   (step 3); the fewer pages wins, a tie keeps ``first-access``. ``hot-last`` needs lld (the others put
   ``.init``/``.plt`` before ``.text``) and the link map's list of cold sections.
   The touches include code run outside sized functions (``.init``, ``.plt``, crt
   files).
3. *readahead marks* (first-access, lld): cold code on the folios whose touch would start
   an asynchronous read of cold code (``order.marks``), when the model predicts fewer pages.
4. *data order*: lld: a ``-T`` data-section script; gold and GNU ld: data sections in
   their ordering file.
5. *.dynstr* (lld): the names ld.so reads first, when the profiled library is there.
6. *pack* (auto): when this machine's glibc is 2.36 or newer (it loads DT_RELR), the
   linked output packed by ``pack-relocs`` in the relr form and proved equivalent (the
   benchmarks' recipe; any linker, also one without ``-z pack-relative-relocs``); else
   ``self`` at link time (not gold nor mold).
7. *move symtab* (auto): when sections no segment loads (``.debug_*``, ``.symtab``) follow
   the last segment, the read-around of the last pages reads them; the model replays the
   profile's touches on the output with them left there and moved into each hole between
   segments (``order.tuck``, mapped bytes unchanged), and moves them to the fewest
   predicted pages when that beats leaving them.
8. *check*: the output's function order against the profile (``check-order``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from elflayout.errors import ElflayoutError

# glibc applies DT_RELR from 2.36 on (GLIBC_ABI_DT_RELR).
GLIBC_RELR = (2, 36)
STT_FUNC = 2
CANDIDATES = ("first-access", "hot-last")
# The readahead window the algorithm is chosen for: a typical machine's (and the one
# measure sets). Not the profile's: that is the profiling machine's device setting
# (8192 on this VM), under which both layouts read nearly the whole file.
READ_AHEAD_KB = 128


@dataclass
class Step:
    """One step of the link: ``value`` (what was applied; None or False: off), ``why``
    (the reason in a few words) and ``predicted`` (what it is expected to give)."""

    name: str
    value: object
    why: str
    predicted: str = ""

    def line(self) -> str:
        on = self.value not in (None, False)
        what = self.value if isinstance(self.value, str) else ("on" if on else "off")
        return f"{self.name}: {what} ({self.why})" + (f"; predicted: {self.predicted}" if self.predicted else "")


def pack_form(asked: str | None, linker: str, glibc=None) -> Step:
    """The relocation packing step: ``asked`` is ``auto`` (or None), ``relr``, ``self`` or
    ``none``; ``glibc``: (major, minor) of this machine's glibc (default: read it).
    ``auto`` gives ``pack-relocs`` (after the link, checked; any linker) on glibc 2.36 or
    newer, else ``self`` (at link time; not gold nor mold)."""
    if asked in ("relr", "self"):
        return Step("pack", asked, "asked")
    if asked == "none":
        return Step("pack", None, "--pack none")
    if glibc is None:
        from elflayout.relocs.glibc import glibc_version

        glibc = glibc_version()
    v = ".".join(map(str, glibc)) if glibc else "?"
    if glibc and tuple(glibc) >= GLIBC_RELR:
        return Step("pack", "pack-relocs", f"glibc {v} on this machine loads DT_RELR: relr form after the link, "
                                           "proved equivalent (pack-relocs --check)")
    if linker in ("gold", "mold"):
        return Step("pack", None, f"glibc {v} needs the self-applying form, which {linker} cannot link")
    return Step("pack", "self", f"glibc {v} < 2.36 ignores DT_RELR: self-applying form")


def relr_written(path) -> bool:
    """Whether the linked ``path`` has a DT_RELR table (a linker too old for
    ``-z pack-relative-relocs``, lld < 15 or GNU ld < 2.38, warns and writes none)."""
    from elflayout import layouts as L
    from elflayout.relocs.simload import Loaded

    with Loaded(path) as lo:
        return lo.tag(L.DT_RELR) is not None


def shared_code_section(path: str) -> str | None:
    """The first object of ``path`` (an object file or ``.a`` archive) with two or more
    functions in one code section, as ``member (section: n functions)``; None when every
    function has a section of its own or the file is not an object or archive split reads."""
    from elflayout.split import archive
    from elflayout.split.reader import SHT, read_object

    with open(path, "rb") as f:
        raw = f.read()
    members = archive.read_archive(raw, path) if archive.is_archive(raw) else [(os.path.basename(path), raw)]
    for name, body in members:
        try:
            obj = read_object(body, f"{path}({name})")
        except ElflayoutError:
            return None  # not an object split reads: nothing to decide on
        sym = obj.symbols
        if not len(sym):
            continue
        funcs = sym[((sym["st_info"] & 0xF) == STT_FUNC) & (sym["st_size"] > 0)]
        shndx, counts = _counts(funcs["st_shndx"].tolist())
        for i, n in zip(shndx, counts):
            s = obj.sections[i] if 0 < i < len(obj.sections) else None
            if n >= 2 and s is not None and s.sh_type == SHT["SHT_PROGBITS"]:
                return f"{name} ({s.name}: {n} functions)"
    return None


def _counts(values: list[int]) -> tuple[list[int], list[int]]:
    seen: dict[int, int] = {}
    for v in values:
        seen[v] = seen.get(v, 0) + 1
    return list(seen), list(seen.values())


def split_step(asked: bool | None, inputs: list[str], fmt: str) -> Step:
    """The split step: ``asked`` True (``--split``), False (``--no-split``) or None (auto:
    split when an input shares a code section among functions)."""
    if asked is not None:
        return Step("split", asked, "asked" if asked else "--no-split")
    if fmt == "objects":
        return Step("split", False, "an object order moves whole objects")
    for p in inputs:
        why = shared_code_section(p)
        if why:
            return Step("split", True, f"no function sections: {why}")
    return Step("split", False, "every function has its own section" if inputs else "no object or archive argument")


def predict_algorithms(target, read_ahead_kb: int = READ_AHEAD_KB, universe=None,
                       move_symtab: bool | None = False, marks: bool = False) -> dict[str, int] | str:
    """Pages the readahead model predicts for each of ``CANDIDATES`` on the profiled
    library (``target.path``), or the reason it cannot (not there, another build).

    The touches include the code run outside functions (``.init``, ``.plt``, crt files:
    ``placement.code_outside_functions``; with the profiled build's map, ``universe``,
    code sections move with the functions as the ordering moves them). ``move_symtab``
    (``link --move-symtab``: True, auto: None): each layout with the unloaded sections
    where they read fewest (``tuck.predict_places``, ``tuck.choose``), which changes what
    the read-around reaches. ``marks``: first-access with its readahead marks kept cold
    (``order.marks``)."""
    from elflayout.elfcore import ElfImage
    from elflayout.order import heldout, marks as order_marks, tuck
    from elflayout.order.placement import code_outside_functions

    if not target.path or not os.path.isfile(target.path):
        return f"the profiled library {target.path} is not there"
    with ElfImage(target.path) as img:
        if not target.build_id or img.build_id != target.build_id:
            return f"{target.path} is not the profiled build"
        base = heldout.functions_of(img)
        outside = code_outside_functions(target, img, base)
        code = heldout.code_sections(outside, universe, base)
        base = heldout.with_code(base, code)
        sets = {}
        for a in CANDIDATES:
            lay = heldout.ordered_layout(img, base, target, hot_last=a == "hot-last", code=code)
            sets[a] = heldout.touches(target, lay, outside, code, bodies=True)
        if move_symtab is False and not marks:
            return {a: _simulate(img, pages, kinds, read_ahead_kb) for a, (pages, kinds) in sets.items()}
    places = tuck.predict_places(target.path, sets, read_ahead_kb, loader=None)
    out = {a: p[tuck.choose(p, move_symtab)] for a, p in places.items()}
    if marks:
        found = order_marks.search(target.path, target, read_ahead_kb, move_symtab, universe)
        out["first-access"] = min(out["first-access"], found["pages"])
    return out


def _simulate(img, pages, kinds, read_ahead_kb: int) -> int:
    """Pages read; ld.so's relocation pass modelled unless the profile recorded it (in
    its own order: after the version checks, which the model's pass would follow)."""
    from elflayout.order.readahead import simulate
    from elflayout.order.simulation import touches_relocations

    return simulate(img, pages, kinds, read_ahead_kb, loader=not touches_relocations(img, pages))["pages"]


def algorithm_step(asked: str, fmt: str, target, universe, read_ahead_kb: int = READ_AHEAD_KB,
                   move_symtab: bool | None = False, marks: bool = True) -> Step:
    """The algorithm: ``asked`` as given, or for ``auto`` the one the model predicts
    reads fewer pages (see Steps; ``move_symtab``: as ``predict_algorithms``, jointly with
    where the unloaded sections go; ``marks``: the readahead-marks step may apply); the
    prediction is shown either way when it can be made."""
    marks = marks and fmt == "lld" and bool(getattr(universe, "text_order", None))
    pred = predict_algorithms(target, read_ahead_kb, universe, move_symtab, marks=marks)
    shown = ", ".join(f"{a} {n:,} pages" for a, n in pred.items()) if isinstance(pred, dict) else ""
    if asked != "auto":
        return Step("algorithm", asked, "asked", shown)
    if fmt != "lld":
        who = {"ld-script": "GNU ld", "gold": "gold"}.get(fmt)
        why = f"{who} puts .init/.plt before .text" if who else "an object order moves whole objects"
        return Step("algorithm", "first-access", f"hot-last needs lld ({why})", shown)
    if not getattr(universe, "text_order", None):
        return Step("algorithm", "first-access", "hot-last needs the link map's cold sections (--objects-from)", shown)
    if not isinstance(pred, dict):
        return Step("algorithm", "first-access", f"no prediction: {pred}")
    best = min(CANDIDATES, key=lambda a: (pred[a], CANDIDATES.index(a)))
    why = f"readahead model at read_ahead_kb {read_ahead_kb}, profiled library, code layout" + (
        " only" if move_symtab is False else ", the unloaded sections where they read fewest") + (
        ", first-access with its readahead marks kept cold" if marks else "")
    if best == "hot-last" and not getattr(target, "objects", None):
        why += f"; {NO_MAP}"
    return Step("algorithm", best, why, shown)


# A profile without the link map knows code by its sized function symbols only: code run
# outside them (crt files' frame_dummy, assembly without .size) stays among the cold code,
# where hot-last leaves it: a read-around window each (libzstd's CMake build: 173 pages
# against 110 with a map, docs/ordering.md).
NO_MAP = ("the profile has no link map, so code run outside sized function symbols (crt files, assembly) stays "
          "among the cold code: profile a link with -Wl,-Map=FILE and profile --map FILE")


def rodata_step(move: bool, linker: str, fmt: str) -> Step | None:
    """Where GNU ld's read-only data goes: before the code, next to the dynamic tables
    ld.so reads whole, as lld places it, unless ``move`` is off. None for the other
    linkers: lld places it so itself; gold's only lever, ``--rosegment``, puts the
    tables and the data after the code, where the read-around of the first table
    fault reads cold code (libstdc++: 353 pages against 325, readahead model)."""
    if linker != "bfd":
        return None
    if not move:
        return Step("read-only data", False, "--no-move-rodata")
    if fmt != "ld-script":
        return Step("read-only data", False, f"only the ld-script moves it (--format {fmt})")
    return Step("read-only data", "before the code", ".rodata, .gcc_except_table and the unwind tables inserted "
                                                      "before .init, next to the dynamic tables, as lld places them")


MEASURED_OPTIONS = "--clean-env --env LC_ALL=C --stdout null --repeat 3"


def profile_step(metadata: dict) -> Step:
    """Whether the profile was recorded as measured runs see the program (stdout to
    /dev/null, several runs merged); ``profile`` does not do that by default, because a
    workload that needs its output or the caller's environment would silently change."""
    wl = metadata.get("workloads") or [metadata]
    missing = [w for w, ok in (("stdout to /dev/null", all(w.get("stdout") == "null" for w in wl)),
                               ("several runs merged", len(wl) > 1)) if not ok]
    if not missing:
        return Step("profile", "as measured", f"{len(wl)} runs merged, stdout to /dev/null")
    return Step("profile", "other conditions", f"not {' nor '.join(missing)}: measured runs see stdout at /dev/null, "
                                               f"LC_ALL=C and vary from run to run; record with profile {MEASURED_OPTIONS}")
