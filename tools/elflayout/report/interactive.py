"""The report's interactive access-pattern view (Plotly, inlined: the file opens offline).

Per library (a ``data.plans`` map of variant → file): the reads of each variant's
plotted run as points (one per read-ahead window, sized by it) against time or read
number, lines joining consecutive reads (long strokes are seeks), page faults as
crosses, ELF sections as bands; every variant on one shared file-offset axis, so a
zoom into ``.rela.dyn`` shows the same bytes before and after. Hover or click a read:
its pages, section(s), and the functions and data objects the profile of that build
attributes to them (the ones its workload touched). Beside it, "where the pages go":
pages read per section family and variant, the touched-page floor marked; a click on a
family zooms the access view to it.

Python builds plain data (``view_data``); the page's script (``VIEW_JS``) draws it.
Plotly comes from the ``plotly`` package (``pip install elflayout[report]``): its
``plotly.min.js`` (about 4.8 MB) is written into the page once. Why Plotly: maintained,
WebGL scatter for the 10,000s of reads of a libLLVM start-up, zoom/pan/hover and linked
axes built in, and one self-contained file to inline.
"""

from __future__ import annotations

import functools
import json
from html import escape
from pathlib import Path

import numpy as np

from elflayout.errors import ElflayoutError
from elflayout.report import data as D
from elflayout.symbols import STT_FUNC

MB = 1e6
# Reads per variant drawn as points: a libLLVM-16 start-up reads ~13,000 windows; beyond
# this many the view keeps every k-th read (and says so) to bound the file and the zoom time.
MAX_READS = 60_000
MAX_FAULTS = 60_000
DOM_ID_PREFIX = "elv"


@functools.lru_cache(maxsize=1)
def plotly_js() -> str | None:
    """The text of plotly.min.js from the installed ``plotly`` package, or None."""
    try:
        import plotly
    except ImportError:
        return None
    p = Path(plotly.__file__).parent / "package_data" / "plotly.min.js"
    try:
        return p.read_text(encoding="utf-8")
    except OSError:
        return None


def _round(a, digits: int) -> list:
    return [round(float(v), digits) for v in a]


def _stride(n: int, cap: int) -> int:
    return max(1, -(-n // cap))


def _sections(res, path: str) -> list[dict]:
    return [{"name": s["name"], "o": s["offset"], "s": s["size"]} for s in D.sections_of(res, path)]


def _bands(bands) -> list[dict]:
    return [{"f": b.family, "c": b.colour, "a": b.start, "b": b.end, "l": b.label} for b in bands]


def _reads_payload(acc: D.Access) -> tuple[dict, list[str]]:
    """Reads and faults of one run as compact arrays (ms, page numbers), decimated past the caps."""
    notes = []
    k = _stride(acc.t.size, MAX_READS)
    if k > 1:
        notes.append(f"{acc.t.size:,} reads: every {k}th drawn (the counts and the bar are from all of them)")
    kf = _stride(acc.ft.size, MAX_FAULTS)
    if kf > 1:
        notes.append(f"{acc.ft.size:,} page faults: every {kf}th drawn")
    idx = np.arange(0, acc.t.size, k)
    fidx = np.arange(0, acc.ft.size, kf)
    return {"t": _round(acc.t[idx] * 1e3, 3), "i": idx.tolist(), "p": acc.page[idx].tolist(),
            "n": acc.npages[idx].tolist(), "ft": _round(acc.ft[fidx] * 1e3, 3), "fp": acc.fpage[fidx].tolist(),
            "fi": np.searchsorted(acc.t, acc.ft[fidx]).tolist(), "seeks": _seeks(acc)}, notes


def _seeks(acc: D.Access) -> dict:
    """Every seek (a jump of more than SEEK_PAGES pages between consecutive reads, as
    ``pages.count_seeks`` counts them) as a segment from read k to read k + 1: lines for
    these only, not for every pair of reads, keep a zoom of a libLLVM start-up fast."""
    mid = acc.page + acc.npages / 2
    jump = acc.page[1:] - (acc.page[:-1] + acc.npages[:-1])
    k = np.flatnonzero(np.abs(jump) > D.SEEK_PAGES)
    return {"i": k.tolist(), "t0": _round(acc.t[k] * 1e3, 3), "t1": _round(acc.t[k + 1] * 1e3, 3),
            "y0": mid[k].tolist(), "y1": mid[k + 1].tolist()}


def _family_counts(bands, acc: D.Access) -> dict:
    return {"read": D.family_pages(bands, acc.read_pages()), "touched": D.family_pages(bands, acc.fpage),
            "pages_read": acc.pages_read, "touched_total": acc.touched, "seeks": acc.seeks}


# ----------------------------------------------------------------------------------
# the profile's attribution of a page to functions and data objects

def _build_id(res, path: str) -> str | None:
    return (res.files.get(path) or {}).get("build_id")


def attribution(res, path: str, profiles: list[tuple[str, object]]) -> tuple[dict | None, str | None]:
    """The functions of the profile target of the same build as ``path``: ({"f": [[offset,
    size, name, object index, first-access rank]...], "o": [objects]}, None), or (None, why
    not) — no profile, or a profile of another build (whose offsets would name the wrong code)."""
    want = _build_id(res, path)
    size = (res.files.get(path) or {}).get("size")
    other = []
    for src, doc in profiles:
        for t in doc.targets:
            same = (want and t.build_id == want) or (not want and t.path == path and size and t.size == size)
            if not same:
                if t.name == Path(path).name:
                    other.append(f"{Path(src).name} profiled build-id {t.build_id or '?'}")
                continue
            attr = _functions(t)
            if not attr["f"]:  # the trace backend records pages, not functions
                return _own_symbols(path, want, t, Path(src).name)
            return attr, None
    if other:
        return None, (f"the profile is of another build of {Path(path).name} ({'; '.join(other)}; this file: "
                      f"build-id {want or '?'}): reads are not attributed to functions")
    if profiles:
        return None, f"no profile of this build of {Path(path).name} (build-id {want or '?'}) among the inputs"
    return None, None


def _own_symbols(path: str, want: str | None, t, src: str) -> tuple[dict | None, str]:
    """For a profile of pages only: the functions of ``path``'s own symbol table (.symtab,
    else .dynsym, as check-order reads them) on the pages the profile touched, when the
    file at ``path`` is still that build; else (None, why not)."""
    from elflayout.elfcore import ElfImage
    from elflayout.order.resolve import elf_symbols

    pages_only = f"{src} is of this build but names no functions with an offset (a trace profile records pages only"
    try:
        with ElfImage(path) as img:
            same = want and img.identity()["build_id"] == want
            table = ".symtab" if img.section(".symtab") else ".dynsym"
            arr, names = elf_symbols(img) if same else (None, [])
    except (OSError, ElflayoutError, ValueError) as e:
        return None, f"{pages_only}; {path} cannot be read for its symbols: {e}): reads are not attributed to functions"
    if not same:
        return None, (f"{pages_only}; {path} is no longer build-id {want or '?'}, so its symbols cannot stand in): "
                      f"reads are not attributed to functions")
    rank = {}
    for pg in t.pages:
        rank.setdefault(int(pg.page), int(pg.first))
    sel = np.flatnonzero((arr["type"] == STT_FUNC) & (arr["offset"] >= 0))
    rows = {}
    for i, off, size in zip(sel.tolist(), arr["offset"][sel].tolist(), arr["size"][sel].tolist()):
        first = min((rank[q] for q in range(off // D.PAGE, (off + max(size, 1) - 1) // D.PAGE + 1) if q in rank),
                    default=None)
        if first is not None:  # on a page the start-up touched: the only ones a tooltip may name as touched
            rows.setdefault((off, size, names[i]), first)
    f = sorted([o, max(s, 1), n, -1, r] for (o, s, n), r in rows.items())
    label = (f"functions on pages the profiled start-up touched (from the library's own {table}: the profile "
             f"records pages only)")
    return {"f": f, "o": [], "profile_pages": len(t.pages), "data_objects": 0, "label": label}, (
        f"{pages_only}): functions are named from the library's own {table}, on the pages the profile touched")


def _functions(t) -> dict:
    objs: dict[str, int] = {}
    rows = []
    for f in t.functions:
        if f.offset is None:
            continue
        oi = objs.setdefault(f.object, len(objs)) if f.object else -1
        rows.append([int(f.offset), int(f.size or 1), f.name, oi, int(f.first)])
    rows.sort(key=lambda r: r[0])
    return {"f": rows, "o": [_short_object(o) for o in objs], "profile_pages": len(t.pages),
            "data_objects": len(t.data_objects)}


def _short_object(obj: str) -> str:
    head, sep, tail = obj.partition("(")
    return head.rsplit("/", 1)[-1] + sep + tail


# ----------------------------------------------------------------------------------

def _panel(res, v: str, path: str, state: str, profiles) -> dict:
    """One variant's panel: its run's reads, bands, sections, attribution and notes."""
    base = {"variant": v, "path": path, "name": Path(path).name, "state": state}
    got = D.pick_run(res, v, state, path)
    if got is None:
        return {**base, "missing": f"no {state} run of {v}"}
    k, run = got
    if D.disturbed(run, path):
        return {**base, "missing": f"every {state} run of {v} was disturbed by another process (the harness "
                                   f"flagged them): nothing representative to draw"}
    acc = D.access_of(run, path)
    if not acc.t.size:
        return {**base, "missing": f"run {k} of {v} has no read sequence for {Path(path).name}"}
    bands = D.bands(D.sections_of(res, path))
    reads, notes = _reads_payload(acc)
    attr, why = attribution(res, path, profiles)
    if why:
        notes.append(why)
    end = D.mapped_end(bands) or int((acc.page + acc.npages).max()) * D.PAGE
    return {**base, "run": k, "reads": reads, "bands": _bands(bands), "sections": _sections(res, path),
            "counts": _family_counts(bands, acc), "caption": D.caption(acc), "attr": attr, "notes": notes,
            "mapped_end": end, "total_reads": int(acc.t.size)}


def view_data(res, plan: dict[str, str], profiles=(), state: str | None = None) -> dict:
    """Everything the page's script needs for one library (``plan``: variant → file).
    Never raises on bad data: what cannot be drawn becomes a note."""
    try:
        state = state or D.default_state(res, plan)
        panels = [_panel(res, v, p, state, list(profiles)) for v, p in plan.items()]
    except (ElflayoutError, ValueError, KeyError, TypeError) as e:  # a damaged file: say so, keep the report
        return {"state": state, "panels": [], "error": str(e)}
    fams = [f for f, _, _ in D.FAMILIES] + [D.OTHER[0]]
    colours = {f: c for f, _, c in D.FAMILIES} | {D.OTHER[0]: D.OTHER[2]}
    return {"state": state, "panels": panels, "families": [[f, colours[f]] for f in fams], "page": D.PAGE,
            "seek_pages": D.SEEK_PAGES}


def view_html(data: dict, idx: str, title: str) -> str:
    """The HTML of one view: controls, the access plot, the bar, the click panel, the data."""
    i = f"{DOM_ID_PREFIX}{idx}"
    blob = json.dumps(data, separators=(",", ":"), ensure_ascii=False).replace("</", "<\\/")
    return (f'<div class="elv" id="{i}" data-title="{escape(title)}">'
            f'<div class="elv-ctl" id="{i}-ctl"></div>'
            f'<div class="elv-plot" id="{i}-plot"></div>'
            f'<div class="elv-info" id="{i}-info">Hover a read for its pages, section and functions; click to '
            f"keep it here. Drag to zoom (double-click: back), shift-drag to pan.</div>"
            f'<div class="elv-bar" id="{i}-bar"></div>'
            f'<script type="application/json" class="elv-data" data-id="{i}">{blob}</script></div>')


def unavailable_html(why: str) -> str:
    return f'<p class="warn elv-none">Interactive view not drawn: {escape(why)}</p>'


CSS = """
.elv{background:#fff;border:1px solid #e3e3e3;padding:6px 8px;margin:.5em 0 1em}
.elv-ctl{font-size:.88em;margin:2px 0 4px} .elv-ctl label{margin-right:1em;white-space:nowrap}
.elv-plot{height:640px} .elv-bar{height:260px}
.elv-info{font-size:.85em;min-height:3.2em;max-height:14em;overflow:auto;background:#f7f7f7;padding:4px 8px;
 border-left:3px solid #bbb;white-space:normal} .elv-info b{font-weight:600}
.elv-note{color:#8a5a00;font-size:.88em;margin:2px 0}
"""

def view_js() -> str:
    """The page's script that draws every view (interactive.js, next to this module)."""
    return (Path(__file__).parent / "interactive.js").read_text(encoding="utf-8")
