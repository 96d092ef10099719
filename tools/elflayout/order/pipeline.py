"""One ordering pipeline: profile → universe → algorithm → check → adapters.

The shape of lld's BPSectionOrderer: the layout is computed once (``order``), and thin
adapters render it for each output: the ordering file of a linker (``formats.write``,
in ``Ordering.text``), lld's data-section script (``Ordering.data_script``) and the
``.dynstr`` response file (``Ordering.dynstr``). ``elflayout order`` and ``elflayout
link`` both call ``order`` (``order_files`` also writes the files), so do the demo and
the benchmarks; they differ only in what they pass in a ``Request``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from elflayout import fileio
from elflayout.errors import ElflayoutError, Finding
from elflayout.order import algorithms, formats
from elflayout.order.algorithms import Layout
from elflayout.order.profile_input import check_identity, load_profile, pick_target, require_touches
from elflayout.order.resolve import same_objects
from elflayout.profile.model import Profile, Target

COMBINE_RULES = ("shared", "phased", "earliest", "mean", "concat")

# An ordering naming fewer than this fraction of the profiled functions changes almost
# nothing: most profiled functions have no name the linker knows (a stripped library's
# functions are FDE extents, ``fde_<vaddr>``), so the file is refused, not written.
MIN_NAMED_FRACTION = 0.01


@dataclass(frozen=True)
class Request:
    """What to order and how; the fields are the options of ``elflayout order``.

    ``lib``: the library the profile must belong to (build-id checked unless
    ``allow_stale_profile``). ``data``: order data sections too. ``combine``: re-combine
    the first-access ranks of a profile of several workloads by this rule.

    A link command adds what it knows: ``default_target`` (the target to pick in a
    profile of several when neither ``target`` nor ``lib`` names one: the output's
    name), ``objects`` (its object arguments, for the ``objects`` format), ``bind_now``
    (its ``-z now``/``-z lazy``), ``split`` (its objects went through ``elflayout split``),
    ``header`` (the comment the written files begin with; None: ``order``'s) and ``tail``
    (functions listed after the cold code: ``order.tail``, which no ``order`` option gives).
    """

    profile: str | os.PathLike
    format: str
    algorithm: str = "first-access"
    target: str | None = None
    lib: str | os.PathLike | None = None
    objects_from: str | os.PathLike | None = None
    data: bool = True
    combine: str | None = None
    allow_stale_profile: bool = False
    default_target: str | None = None
    objects: tuple[str, ...] | None = None
    bind_now: bool | None = None
    split: bool = False
    header: str | None = None
    move_rodata: bool = True
    tail: tuple[str, ...] = ()

    def argv(self, output, data_script=None, dynstr_out=None, levers=None) -> list[str]:
        """The ``elflayout order`` arguments that write the same files as ``order_files``
        (shown by callers that order in-process; ``--force``: it replaces them too).
        ``levers``: the data script's options (``--hot-constants``, ``--sparse-last``)."""
        opts = [("--algorithm", self.algorithm if self.algorithm != "first-access" else None),
                ("--target", self.target), ("--lib", self.lib), ("--objects-from", self.objects_from),
                ("--combine", self.combine), ("--data-script", data_script), ("--dynstr-out", dynstr_out)]
        flags = [("--no-data", not self.data), ("--allow-stale-profile", self.allow_stale_profile),
                 ("--no-move-rodata", not self.move_rodata)]
        flags += [("--" + k.replace("_", "-"), bool(v)) for k, v in (levers or {}).items()]
        return ["order", str(self.profile), "--format", self.format,
                *[x for o, v in opts if v is not None for x in (o, str(v))],
                *[o for o, on in flags if on], "-o", str(output), "--force"]


@dataclass
class Ordering:
    """The result: the profile (re-combined when asked) and its target, the link map's
    universe, the ``Layout``, the ordering file (``text``, ``stats``) and the report
    ``elflayout order --report`` prints (``report``)."""

    request: Request
    profile: Profile
    target: Target
    universe: object
    layout: Layout
    header: str
    text: str
    stats: dict
    bind_now: bool | None
    warnings: list[str] = field(default_factory=list)
    report: dict = field(default_factory=dict)

    def data_script(self, hot_strings: bool = True, string_pool: bool = False, **levers) -> tuple[str, dict]:
        """lld's companion: the data sections by a ``-T`` INSERT script (``formats``);
        ``levers``: its other options (``hot_constants``, ``sparse_last``)."""
        return formats.write_lld_data_script(self.layout, self.header, hot_strings=hot_strings, universe=self.universe,
                                             string_pool=string_pool, **levers)

    def dynstr(self, executables=None, option: str = "--dynstr-out") -> tuple[str, dict]:
        """lld's other companion: a response file of ``-u`` options putting the names
        ld.so reads first in ``.dynstr`` (``dynstr.py``): names of the library
        (``lib``, else the profile's target) and of ``executables`` (default: the
        profiled program)."""
        from elflayout.order import dynstr

        lib = self.request.lib or self.target.path
        if not lib or not os.path.exists(lib):
            raise ElflayoutError(f"{option}: the library {lib} is not there (its relocations name the symbols): "
                                 "give it with --lib")
        exes = executables if executables is not None else dynstr.workload_executable(self.profile.metadata)
        for e in exes:
            if not os.path.exists(e):
                raise ElflayoutError(f"{e}: no such file (--dynstr-exe)")
        names, rep = dynstr.read_names(lib, exes)
        return dynstr.write_lld_undefined(names, rep["weak_undefined"]), rep

    def names_almost_nothing(self) -> str | None:
        """A sentence with a hint when the ordering names almost none of the profiled
        functions (< ``MIN_NAMED_FRACTION``); None when it names enough."""
        profiled = self.layout.report.get("functions", {}).get("profiled", 0)
        st = self.stats
        named = st.get("symbols", 0) - st.get("data_symbols", 0) if "symbols" in st else \
            st.get("text_sections", st.get("objects", 0))
        if self.request.format == "objects" or profiled < 100 or named >= MIN_NAMED_FRACTION * profiled:
            return None
        return (f"the ordering would name {named:,} of {profiled:,} profiled functions (< {MIN_NAMED_FRACTION:.0%}): "
                f"nothing written. The profiled functions have no names the linker knows: is the library stripped? "
                f"Profile a build with symbols (or with its separate debug file installed: "
                f"/usr/lib/debug/.build-id/...), or use --format objects with the link map")


class NoFunctions(Finding):
    """The profile names no functions (page granularity): there is nothing to order by."""


def require_functions(t: Target, doc: Profile, path) -> None:
    """An ordering is made of the profiled functions: a profile without any (a trace
    profile records pages) is refused, with the way to record one."""
    if t.functions:
        return
    md = doc.metadata
    how = f"{md.get('granularity') or '?'} granularity, {md.get('backend') or '?'} backend"
    raise NoFunctions(f"{path}: nothing to order: the profile of {t.path} names no functions ({how}; "
                      f"{len(t.pages)} pages); profile with function granularity: elflayout profile --backend "
                      f"valgrind --target {t.path} ...")


class ThinOrdering(Finding):
    """The ordering names almost none of the profiled functions: nothing is written."""


def order(req: Request) -> Ordering:
    """Load the profile, pick and check its target, read the link map, compute the layout
    once, refuse an empty one and render it as ``req.format``."""
    if req.format not in formats.FORMATS:
        raise ElflayoutError(f"--format: unknown format {req.format!r} (choose from {', '.join(formats.FORMATS)})")
    doc = load_profile(req.profile)
    if req.combine:
        from elflayout.profile.merge import recombine

        doc = recombine(doc, req.combine)
    several = len(doc.targets) > 1
    want = req.target or (str(req.lib) if req.lib and several else None) or (req.default_target if several else None)
    t = pick_target(doc, req.profile, want)
    require_touches(t, req.profile)
    if req.format != "objects" or not t.objects:  # an object order can come from pages
        require_functions(t, doc, req.profile)
    warnings, bind_now = _check_library(req, t)
    universe, note = load_universe(req.objects_from, t.map, t.path)
    if note:
        warnings.append(note)
    layout = algorithms.get(req.algorithm).compute(t, universe, data=req.data)
    check_layout(layout, req.format, req.profile)
    header = req.header if req.header is not None else (
        f"generated by elflayout order --format {req.format} --algorithm {req.algorithm}\n"
        f"profile: {Path(req.profile).name} target {t.name} build-id {t.build_id}")
    objects = list(req.objects) if req.objects is not None else (
        universe.objects if universe and universe.objects else None)
    text, stats = formats.write(req.format, layout, objects, header, split=req.split, bind_now=bind_now,
                                move_rodata=req.move_rodata, tail=req.tail)
    report = {"format": req.format, "target": t.path, **layout.report, "output": stats, "warnings": warnings}
    return Ordering(req, doc, t, universe, layout, header, text, stats, bind_now, warnings, report)


def _check_library(req: Request, t: Target) -> tuple[list[str], bool | None]:
    """The identity check against ``req.lib`` (warnings) and whether the link binds now:
    as the link command says, else as ``lib`` (or, for an ld script, the profiled
    library) is linked."""
    warnings, bind_now = [], req.bind_now
    if req.lib:
        from elflayout.elfcore import ElfImage

        with ElfImage(req.lib) as img:
            w = check_identity(t, img.identity(), req.profile, req.allow_stale_profile)
            if bind_now is None:
                bind_now = img.binds_now
        if w:
            warnings.append(w)
    elif bind_now is None and req.format == "ld-script":
        bind_now = library_binds_now(t.path)
    return warnings, bind_now


def check_companions(fmt: str, data_script: bool, dynstr: bool) -> None:
    """The lld companions go with ``--format lld`` only."""
    if dynstr and fmt != "lld":
        raise ElflayoutError(f"--dynstr-out: only lld orders .dynstr by -u options (not {fmt})")
    if data_script and fmt != "lld":
        raise ElflayoutError(f"--data-script: an lld companion of --format lld (not {fmt}); "
                             "gold and GNU ld order data with their own format")


def order_files(req: Request, output, data_script=None, dynstr_out=None, hot_strings: bool = True,
                dynstr_exes=None, string_pool: bool = False, **levers) -> Ordering:
    """``order`` and write its files: the ordering to ``output``, with lld the companions
    to ``data_script`` and ``dynstr_out`` (``levers``: the data script's options,
    ``Ordering.data_script``). Everything is computed before anything is written;
    ``ThinOrdering`` when the ordering names almost nothing."""
    check_companions(req.format, data_script is not None, dynstr_out is not None)
    o = order(req)
    thin = o.names_almost_nothing()
    if thin:
        raise ThinOrdering(thin)
    outs = []
    if data_script is not None:
        dtext, dstats = o.data_script(hot_strings, string_pool, **levers)
        if not dstats["data_sections"] and not dstats["string_objects"]:
            raise ElflayoutError(f"{req.profile}: --data-script: no data section to place (record the profile "
                                 "with --data and give the link map: --objects-from or the profile's map)")
        o.report["data_script"] = dstats
        outs.append((data_script, dtext))
    if dynstr_out is not None:
        rtext, o.report["dynstr"] = o.dynstr(dynstr_exes)
        outs.append((dynstr_out, rtext))
    for path, text in [*outs, (output, o.text)]:
        fileio.atomic_write_text(path, text)
    return o


def summary_lines(o: Ordering, output, data_script=None, dynstr_out=None) -> list[str]:
    """What ``order_files`` did, one line per file written, then the warnings."""
    r = o.report
    f = r["functions"]
    msg = f"order: {f['matched']}/{f['profiled']} profiled functions matched ({100 * f['matched_fraction']:.1f}%)"
    if "data" in r:
        msg += f", {r['data']['sections']} data sections"
    lines = [f"{msg} → {output} ({o.request.format})"]
    if "data_script" in r:
        ds = r["data_script"]
        lines.append(f"order: {ds['data_sections']} data sections, strings of {ds['string_objects']} objects → "
                     f"{data_script} (-Wl,-T,{data_script})"
                     + "".join(f"; {x} left as it is (every input section of it is ordered)" for x in ds["left_out"]))
    if "dynstr" in r:
        d = r["dynstr"]
        progs = ", ".join(Path(e).name for e in d["executables"]) or "no program"
        lines.append(f"order: {d['names']} dynamic-symbol names ({d['bytes']:,} bytes; {d['from_relocations']} from "
                     f"relocations, {d['from_executables']} imported by {progs}) → {dynstr_out} (-Wl,@{dynstr_out})")
    return lines + [f"elflayout: warning: {w}" for w in o.warnings]


def library_binds_now(path) -> bool | None:
    """Whether the profiled library (a build of the same link) uses ``-z now``; None when
    it is not there to say."""
    from elflayout.elfcore import ElfImage

    if not path or not os.path.isfile(path):
        return None
    try:
        with ElfImage(path) as img:
            return img.binds_now
    except ElflayoutError:
        return None


def check_layout(layout: Layout, fmt: str, profile) -> None:
    """An ordering with nothing in it is an error, not an empty file."""
    if fmt == "objects" and layout.objects:
        return
    if fmt != "objects" and (layout.functions or layout.data):
        return
    f = layout.report.get("functions", {})
    what = "objects" if fmt == "objects" else "functions or data sections"
    raise ElflayoutError(
        f"{profile}: nothing to order: no {what} matched ({f.get('profiled', 0)} functions profiled, "
        f"{f.get('matched', 0)} matched); a page-granularity (trace) profile names no functions: "
        "record one with --backend valgrind")


def load_universe(objects_from, profiled_map, profiled_lib=None):
    """Names from the map of the link to order; section extents from the profiled build's map."""
    note = None
    u = None
    if objects_from:
        if not os.path.exists(objects_from):
            raise ElflayoutError(f"{objects_from}: no such file")
        # the profiled build's own map: read it with that build, or its input sections
        # get no file offsets and no data page can be mapped to them
        same = bool(profiled_map) and os.path.exists(profiled_map) and \
            os.path.realpath(profiled_map) == os.path.realpath(objects_from)
        u = _load_map(objects_from, required=True, image=profiled_lib if same else None)
    if profiled_map and os.path.exists(profiled_map):
        if u is None:
            u, note = _load_map(profiled_map, required=False, image=profiled_lib), None
        elif os.path.realpath(profiled_map) != os.path.realpath(objects_from):
            pu = _load_map(profiled_map, required=False, image=profiled_lib)
            if pu is not None:  # data pages are offsets in the profiled build
                u.extents, u.extent_names = pu.extents, pu.extent_names
                u.extent_objects = same_objects(pu.extent_objects, u.objects)
    elif profiled_map:
        note = f"profiled build's map {profiled_map} not found: data pages cannot be mapped to sections"
    return u, note


def _load_map(path, required: bool, image=None):
    from elflayout.order.resolve import universe_from_linkmap

    try:
        return universe_from_linkmap(path, image)
    except ImportError:
        if required:
            raise ElflayoutError(f"{path}: reading link maps needs elflayout.linkmap, which is not installed") from None
        return None
