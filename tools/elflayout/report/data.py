"""Inputs of the plots and the report, as plain data (no matplotlib here).

Reads results v1 (``elflayout-results``, typed by ``elflayout.results``) and profile v1
(``elflayout-profile``) files (docs/formats/results.md, docs/formats/profile.md) and
derives what the plots need:
the ordered reads and faults of one file in one run, its ELF sections grouped into
labelled bands, per-section counts, and the caption figures (pages and bytes read,
seeks, read efficiency).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from elflayout import fileio
from elflayout.elfcore import ElfImage
from elflayout.errors import ElflayoutError
from elflayout.layouts import SHF_ALLOC
from elflayout import results as results_model
from elflayout.results import Results, Run
from elflayout.pages import PAGE, SEEK_PAGES, count_seeks, expand  # noqa: F401 - PAGE, SEEK_PAGES re-exported

KINDS = ("results", "profile", "screen")


def load(path: str | os.PathLike) -> tuple[str, object]:
    """(kind, document) of a results, profile or screen file; one-line error otherwise.
    Results come back typed (``results.Results``), a profile parsed
    (``profile.model.Profile``), a screen result checked."""
    p = Path(path)
    doc = fileio.load_json(p, KINDS, (1,))
    kind = doc["format"][len("elflayout-"):]
    if kind == "results":
        doc = results_model.parse(doc, str(p))  # the one results parser: raises on anything malformed
    elif kind == "screen":
        from elflayout.measure import screen_model as screen

        screen.parse(doc, str(p))
    else:
        from elflayout.profile import model

        doc = model.parse(doc, p)
    return kind, doc


# ----------------------------------------------------------------------------------
# ELF sections as bands

# Section families, in the spirit of Hommey's graphs: relocations, dynamic symbols,
# code, read-only data, unwind tables, relocated read-only data, writable data.
FAMILIES = [
    ("relocations", (".rela.dyn", ".rel.dyn", ".relr.dyn", ".rela.plt", ".rel.plt", ".rela.", ".rel.", ".relr."),
     "#e41a1c"),
    ("dynamic symbols", (".dynsym", ".dynstr", ".gnu.hash", ".hash", ".gnu.version", ".gnu.version_d",
                         ".gnu.version_r", ".gnu.version_"), "#984ea3"),
    ("code", (".init", ".plt", ".plt.got", ".plt.sec", ".text", ".fini", ".text."), "#377eb8"),
    ("read-only data", (".rodata", ".rodata."), "#4daf4a"),
    ("unwind", (".eh_frame", ".eh_frame_hdr", ".gcc_except_table", ".sframe"), "#ff7f00"),
    ("relro data", (".data.rel.ro", ".init_array", ".fini_array", ".dynamic", ".got", ".tdata", ".preinit_array",
                    ".data.rel.ro."), "#a65628"),
    ("data", (".data", ".got.plt", ".bss", ".tbss", ".data."), "#7f7f7f"),
    # Not loaded at run time (unstripped libraries): normally never read at startup.
    ("not loaded", (".symtab", ".strtab", ".shstrtab", ".comment", ".debug_", ".zdebug_", ".gnu_debuglink",
                    ".gnu_debugaltlink", ".note.stapsdt", ".stapsdt.base"), "#bcbddc"),
]
OTHER = ("other", (), "#bdbdbd")


def family_of(name: str) -> tuple[str, str]:
    """(family, colour) of a section name; prefixes end with '.' (e.g. '.text.hot')."""
    for fam, names, colour in FAMILIES:
        for n in names:
            if name == n or (n.endswith((".", "_")) and name.startswith(n)):
                return fam, colour
    return OTHER[0], OTHER[2]


@dataclass
class Band:
    """Consecutive sections of one family, drawn as one coloured band."""

    family: str
    colour: str
    start: int  # file offset, bytes
    end: int
    members: list[tuple[str, int, int]] = field(default_factory=list)  # (name, offset, size)

    @property
    def label(self) -> str:
        # Name the members that matter; tiny ones (.gnu.version, .init) would only clutter.
        size = max(self.end - self.start, 1)
        big = [m for m in self.members if m[2] >= 0.05 * size] or [max(self.members, key=lambda m: m[2])]
        names = [m[0] for m in big]
        if len(names) > 3:
            names = names[:3] + ["…"]
        return "/".join(names)


def file_sections(sections) -> list[dict]:
    """Allocated, file-backed sections sorted by offset: [{name, offset, size}]."""
    out = []
    for s in sections or []:
        try:
            name, off, size = str(s["name"]), int(s["offset"]), int(s["size"])
        except (KeyError, TypeError, ValueError):
            continue
        if size > 0 and name:
            out.append({"name": name, "offset": off, "size": size})
    out.sort(key=lambda s: s["offset"])
    return out


def sections_from_elf(path: str) -> list[dict]:
    """Sections read from the ELF file itself (fallback when metadata lacks them)."""
    with ElfImage(path) as img:
        return [{"name": s.name, "offset": s.offset, "size": s.size}
                for s in img.sections if s.occupies_file and (s.flags & SHF_ALLOC)]


def bands(sections: list[dict]) -> list[Band]:
    out: list[Band] = []
    for s in file_sections(sections):
        fam, colour = family_of(s["name"])
        end = s["offset"] + s["size"]
        if out and out[-1].family == fam and s["offset"] - out[-1].end <= PAGE:
            b = out[-1]
            b.end = max(b.end, end)
        else:
            b = Band(fam, colour, s["offset"], end)
            out.append(b)
        b.members.append((s["name"], s["offset"], s["size"]))
    return out


# ----------------------------------------------------------------------------------
# results: runs, series, figures

def variants(res: Results) -> list[str]:
    return res.variant_names


def states(res: Results) -> list[str]:
    """The states of the runs, cold, selective, hot first."""
    order = ["cold", "selective", "hot"]
    seen = list(dict.fromkeys(r.state for r in res.runs))
    return sorted(seen, key=lambda s: (order.index(s) if s in order else len(order), str(s)))


def all_files(res: Results) -> list[str]:
    out = list(res.files)
    for r in res.runs:
        out += [path for path in r.files if path not in out]
    return out


def _match(files: list[str], want: str) -> str | None:
    """``want`` among ``files``: exact, same real path, or an unambiguous basename."""
    if want in files:
        return want
    try:
        real = os.path.realpath(want)
        same = [f for f in files if os.path.realpath(f) == real]
        if len(same) == 1:
            return same[0]
    except OSError:
        pass
    if os.sep in want:
        return None  # a path names one file; only a bare name may match by basename
    base = [f for f in files if os.path.basename(f) == want]
    return base[0] if len(base) == 1 else None


def traced_by_variant(res: Results) -> dict[str, list[str]]:
    """Per variant, the files with a read sequence in its runs, most pages read first."""
    out: dict[str, dict[str, float]] = {v: {} for v in variants(res)}
    for r in res.runs:
        per = out.setdefault(r.variant, {})
        for path, f in r.files.items():
            if f.reads:
                per[path] = per.get(path, 0) + float(f.pages_read or len(f.reads))
    return {v: sorted(per, key=lambda p: -per[p]) for v, per in out.items()}


def plans(res: Results, files: list[str] | None = None, src: str = "",
          only: list[str] | None = None) -> list[dict[str, str]]:
    """What to draw side by side: a list of {variant: file} maps.

    A before/after of two builds reads a different file in each variant (each its own
    path); a change elsewhere (read-ahead, environment) reads the same file. So:
    with ``files``, each variant gets the first of them it read; without, one map pairs
    the files that only one variant read (when each variant has exactly one), and each
    file that every variant read gets its own map, most pages read first.
    """
    by = traced_by_variant(res)
    names = only or variants(res)
    by = {v: by.get(v, []) for v in names}
    if not any(by.values()):
        raise ElflayoutError(f"{src}: no run has an ordered read sequence ('reads'); was it measured with tracing?")
    if files:
        plan = {}
        for v in names:
            for want in files:
                got = _match(by[v], want)
                if got:
                    plan[v] = got
                    break
        if not plan:
            known = ", ".join(sorted({f for fs in by.values() for f in fs}))
            raise ElflayoutError(f"{src}: no read sequence recorded for {', '.join(files)} (files with one: {known})")
        return [plan]
    out = []
    sets = {v: set(fs) for v, fs in by.items()}
    common = set.intersection(*sets.values()) if sets else set()
    specific = {v: [f for f in fs if f not in common] for v, fs in by.items()}
    if len(names) > 1 and all(len(fs) == 1 for fs in specific.values()):
        out.append({v: fs[0] for v, fs in specific.items()})
    first = names[0]
    for f in by[first]:
        if f in common:
            out.append({v: f for v in names})
    if not out:  # e.g. a single variant that read several files, or uneven sets
        for f in sorted({f for fs in by.values() for f in fs}):
            out.append({v: f for v in names if f in sets[v]})
    return out


def choose_plan(res: Results, files: list[str] | None, src: str, only: list[str] | None = None) -> dict[str, str]:
    """The one {variant: file} map the plot verb draws; asks for --file when ambiguous."""
    ps = plans(res, files, src, only)
    if len(ps) > 1:
        listed = sorted({f for p in ps for f in p.values()})
        raise ElflayoutError(f"{src}: several files were traced; choose with --file ({', '.join(listed)})")
    return ps[0]


def traced_files(res: Results) -> list[str]:
    """All files with a read sequence in some run."""
    out = []
    for fs in traced_by_variant(res).values():
        out += [f for f in fs if f not in out]
    return out


def sections_of(res: Results, path: str) -> list[dict]:
    meta = res.files.get(path) or {}
    secs = file_sections(meta.get("sections"))
    if secs:
        return secs
    if os.path.isfile(path):
        try:
            return sections_from_elf(path)
        except ElflayoutError:
            return []
    return []


def runs_of(res: Results, variant: str, state: str) -> list[Run]:
    return res.runs_of(variant, state)


def default_state(res: Results, plan: dict[str, str]) -> str:
    """The state to plot: the first (cold, selective, hot) in which the plan's files were read."""
    for s in states(res):
        if any(f is not None and f.reads for r in res.runs if r.state == s
               for f in [r.files.get(plan.get(r.variant))]):
            return s
    return states(res)[0]


def pick_run(res: Results, variant: str, state: str, path: str, k: int | None = None) -> tuple[int, Run] | None:
    """The run to draw: the k-th of variant×state, else the one with the median pages read."""
    rs = runs_of(res, variant, state)
    if not rs:
        return None
    if k is not None:
        if not 0 <= k < len(rs):
            raise ElflayoutError(f"--run {k}: variant {variant!r} state {state!r} has runs 0..{len(rs) - 1}")
        return k, rs[k]
    # Runs another process disturbed (the harness says so in 'interference') are not
    # representative; use them only when every run was disturbed.
    idx = [i for i, r in enumerate(rs) if not disturbed(r, path)] or list(range(len(rs)))
    pages = np.array([rs[i].files[path].pages_read if path in rs[i].files else 0 for i in idx], dtype=float)
    order = np.argsort(pages, kind="stable")
    i = idx[int(order[(len(order) - 1) // 2])]
    return i, rs[i]


def disturbed(run: Run, path: str | None = None) -> bool:
    """Whether the harness flagged this run as disturbed (for ``path``, if given)."""
    return run.disturbed if path is None else run.disturbed_for(path)


@dataclass
class Access:
    """The access pattern of one file in one run (times in seconds since exec)."""

    t: np.ndarray  # reads
    page: np.ndarray
    npages: np.ndarray
    ft: np.ndarray  # faults
    fpage: np.ndarray
    seeks_reported: int | None = None

    @property
    def pages_read(self) -> int:
        return int(self.npages.sum())

    @property
    def bytes_read(self) -> int:
        return self.pages_read * PAGE

    @property
    def seeks(self) -> int:
        if self.seeks_reported is not None:
            return self.seeks_reported
        return count_seeks(self.page, self.npages)

    @property
    def touched(self) -> int:
        return int(np.unique(self.fpage).size)

    @property
    def efficiency(self) -> float | None:
        """Pages touched (faulted) ÷ pages read; None when nothing was read."""
        return self.touched / self.pages_read if self.pages_read else None

    def read_pages(self) -> np.ndarray:
        """Every page read (folios expanded)."""
        return expand(self.page, self.npages)


def command_of(res: Results, variant: str) -> str:
    """The shell command of a variant ('' if not recorded)."""
    return res.command(variant)


def access_of(run: Run, path: str) -> Access:
    """The reads and faults of ``path`` in ``run``, each in time order."""
    f = run.files.get(path)
    reads = np.asarray(f.reads if f else (), dtype=float).reshape(-1, 3)
    faults = np.asarray(f.faults if f else (), dtype=float).reshape(-1, 2)
    reads = reads[np.argsort(reads[:, 0], kind="stable")]
    faults = faults[np.argsort(faults[:, 0], kind="stable")]
    return Access(reads[:, 0], reads[:, 1].astype(np.int64), np.maximum(reads[:, 2], 1).astype(np.int64),
                  faults[:, 0], faults[:, 1].astype(np.int64), f.seeks if f else None)


def section_table(sections: list[dict], acc: Access) -> list[dict]:
    """Per section: its pages, pages read, pages touched (a page shared by two sections
    counts for both, so a column may sum to a little more than the file's total)."""
    read = np.unique(acc.read_pages())
    touched = np.unique(acc.fpage)
    rows = []
    for s in file_sections(sections):
        lo, hi = s["offset"] // PAGE, (s["offset"] + s["size"] - 1) // PAGE
        nr = int(np.searchsorted(read, hi, "right") - np.searchsorted(read, lo, "left"))
        nt = int(np.searchsorted(touched, hi, "right") - np.searchsorted(touched, lo, "left"))
        rows.append({"name": s["name"], "offset": s["offset"], "size": s["size"], "pages": hi - lo + 1,
                     "read": nr, "touched": nt})
    return rows


def mapped_end(bands: list[Band]) -> int:
    """End (file offset) of the last band loaded at run time: plots stop there, not at
    the debug sections and symbol tables an unstripped file carries after it."""
    return max((b.end for b in bands if b.family != "not loaded"), default=0)


def family_pages(bands: list[Band], pages: np.ndarray) -> dict[str, int]:
    """Distinct pages per section family (a page goes to the band holding its first byte,
    else to the band it overlaps; pages outside every band count as 'other')."""
    pages = np.unique(np.asarray(pages, dtype=np.int64))
    out: dict[str, int] = {}
    if not pages.size:
        return out
    starts = np.array([b.start // PAGE for b in bands], dtype=np.int64)
    ends = np.array([(b.end - 1) // PAGE for b in bands], dtype=np.int64)
    k = np.searchsorted(starts, pages, side="right") - 1
    ok = (k >= 0) & (pages <= ends[np.clip(k, 0, None)]) if bands else np.zeros(pages.size, bool)
    for i in np.unique(k[ok]):
        fam = bands[int(i)].family
        out[fam] = out.get(fam, 0) + int(np.count_nonzero(k[ok] == i))
    if (~ok).any():
        out["other"] = out.get("other", 0) + int(np.count_nonzero(~ok))
    return out


def caption(acc: Access) -> str:
    eff = acc.efficiency
    e = f"{eff:.0%}" if eff is not None else "n/a"
    return (f"{acc.pages_read:,} pages read ({acc.bytes_read / 1e6:,.1f} MB), {acc.seeks:,} seeks, "
            f"read efficiency {e} ({acc.touched:,} touched ÷ {acc.pages_read:,} read)")


# ----------------------------------------------------------------------------------
# results: per-run metrics and summary

METRICS = results_model.METRICS  # the one registry: label, unit, scale, derivation


def values(res: Results, variant: str, state: str, metric: str, files: list[str] | None = None,
           disturbed_runs: bool = False) -> np.ndarray:
    """A metric over the runs of variant × state; per-file metrics (pages, bytes, seeks)
    summed over ``files`` (default: every file of the run). Like the harness's
    statistics, runs flagged as disturbed are left out (``disturbed_runs=True``: only those)."""
    per_file = results_model.metric(metric).per_file
    vs = [r.value(metric, files if files is not None or not per_file else tuple(r.files))
          for r in runs_of(res, variant, state) if r.disturbed == disturbed_runs]
    return np.array([v for v in vs if v is not None], dtype=float)


def summary_row(res: Results, variant: str, state: str, metric: str) -> dict | None:
    """The results file's own summary row if present (computed by `compare`)."""
    return res.summary_row(variant, state, metric)


def comparisons(res: Results, variant: str, state: str) -> list[dict]:
    return [c for c in res.comparisons if c.get("b") == variant and c.get("state") == state]
