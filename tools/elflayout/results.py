"""Results format v1 (docs/formats/results.md): build, load, export to CSV / Markdown.

A results file is one measurement session: the metadata common to all runs is stored
once (pyperf's rule), each run is one record, statistics are derived from the runs and
can always be recomputed (``elflayout compare`` does so).
"""

from __future__ import annotations

import csv
import io
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from elflayout import fileio
from elflayout.errors import ElflayoutError

KIND = "results"
VERSION = 1


# -- the run metrics: one registry for statistics, exports, plots and the report -------------------
@dataclass(frozen=True)
class Metric:
    """A run metric: its results name, how it is shown and how it is derived from a run record."""

    name: str
    label: str
    unit: str  # display unit ('' for a plain count)
    scale: float  # stored value x scale = value in ``unit``
    time: bool  # seconds: compared on the log scale, verdicts faster/slower
    parts: tuple[str, ...] = ()  # derived: the sum of these stored fields
    per_file: bool = False  # also stored per file under test (runs[].files[P]); summed over the files chosen
    stored: bool = True  # a field of each run record (a column of the runs CSV)
    compared: bool = True  # summarised and compared by statistics (``compare``)
    tested: bool = True  # False: described without a test (the tick-sampled user/system split)

    def of(self, record) -> float | None:
        """This metric of a stored run record (a dict); None when absent or not a number."""
        if self.parts:
            vals = [_number(record.get(p)) for p in self.parts]
            return None if any(v is None for v in vals) else float(sum(vals))
        return _number(record.get(self.name))


def _number(v) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


# cpu_s, the exact CPU time, is tested; its user/system split is tick-sampled and only
# described (the reason: stats.UNTESTED_REASON).
METRICS = {m.name: m for m in (
    Metric("wall_s", "wall time", "ms", 1e3, time=True),
    Metric("user_s", "user CPU", "ms", 1e3, time=True, tested=False),
    Metric("sys_s", "system CPU", "ms", 1e3, time=True, tested=False),
    Metric("cpu_s", "CPU time (user + system)", "ms", 1e3, time=True, parts=("user_s", "sys_s"), stored=False),
    Metric("major_faults", "major faults", "", 1, time=False),
    Metric("minor_faults", "minor faults", "", 1, time=False, compared=False),
    Metric("read_bytes", "block input (rusage)", "MB", 1e-6, time=False, compared=False),
    Metric("pages_read", "pages read", "pages", 1, time=False, per_file=True),
    Metric("bytes_read", "bytes read", "MB", 1e-6, time=False, per_file=True),
    Metric("seeks", "seeks", "", 1, time=False, per_file=True, stored=False, compared=False),
)}
RUN_FIELDS = ("variant", "state", "round", "seq", *(m.name for m in METRICS.values() if m.stored))


def metric(name: str) -> Metric:
    """The registered metric ``name``; a one-line error naming the known ones otherwise."""
    try:
        return METRICS[name]
    except KeyError:
        raise ElflayoutError(f"--metric {name}: unknown (one of: {', '.join(METRICS)})") from None


def elf_sections(path) -> list[dict]:
    """File-occupying named sections of an ELF file: [{name, offset, size}] (for plots and
    per-section page counts); empty for a non-ELF file."""
    from elflayout.elfcore import ElfImage

    try:
        with ElfImage(Path(path)) as img:
            return [{"name": s.name, "offset": s.offset, "size": s.size}
                    for s in img.sections if s.occupies_file and s.name]
    except ElflayoutError:
        return []


def file_metadata(path: str) -> dict:
    """Identity of a file under test; ELF files also carry their sections (for plots)."""
    from elflayout.elfcore import ElfImage

    p = Path(path)
    st = p.stat()
    try:
        with ElfImage(p) as img:
            md = img.identity()
        md["sections"] = elf_sections(p)
    except ElflayoutError:
        import hashlib

        md = {"path": str(p.resolve()), "build_id": None, "size": st.st_size,
              "sha256": hashlib.sha256(p.read_bytes()).hexdigest()}
    md["pages"] = (st.st_size + os.sysconf("SC_PAGE_SIZE") - 1) // os.sysconf("SC_PAGE_SIZE")
    md["dev"] = f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"
    md["ino"] = st.st_ino
    return md


def pages_by_section(sections: list[dict], pages) -> dict[str, int]:
    """Distinct pages per section: {name: pages}.

    ``sections``: [{name, offset, size}] (``elf_sections``, or a results file's
    ``metadata.files[P].sections``); ``pages``: page indexes (repeats count once). A page
    goes to the section holding its first byte, else to the first section starting
    inside it, else to ``(headers/other)`` (ELF headers, padding between sections).
    """
    import numpy as np

    page = os.sysconf("SC_PAGE_SIZE")
    pages = np.unique(np.asarray(pages, dtype=np.int64))
    secs = sorted((s for s in sections if s["size"] > 0), key=lambda s: s["offset"])
    out: dict[str, int] = {}
    if not len(pages):
        return out
    if not secs:
        return {"(headers/other)": int(len(pages))}
    starts = np.array([s["offset"] for s in secs], dtype=np.int64)
    ends = np.array([s["offset"] + s["size"] for s in secs], dtype=np.int64)
    off = pages * page
    k = np.searchsorted(starts, off, side="right") - 1
    holds = (k >= 0) & (off < ends[np.clip(k, 0, None)])
    k2 = np.searchsorted(starts, off, side="left")
    starts_in = ~holds & (k2 < len(starts)) & (starts[np.clip(k2, 0, len(starts) - 1)] < off + page)
    names = np.array([s["name"] for s in secs] + ["(headers/other)"], dtype=object)
    idx = np.where(holds, k, np.where(starts_in, k2, len(secs)))
    for i, c in zip(*np.unique(idx, return_counts=True)):
        out[names[i]] = out.get(names[i], 0) + int(c)
    return out


def run_pages(reads):
    """Distinct pages of a run's ``reads`` list ([[t, page, npages], ...])."""
    import numpy as np

    from elflayout.pages import expand

    r = np.asarray(reads, dtype=np.float64).reshape(-1, 3)
    return np.unique(expand(r[:, 1].astype(np.int64), r[:, 2].astype(np.int64)))


def build(metadata: dict, variants: list[dict], runs: list[dict], analysis: dict) -> dict:
    return fileio.envelope(KIND, VERSION, metadata, variants=variants, runs=runs,
                           summary=analysis.get("summary", []), comparisons=analysis.get("comparisons", []),
                           multiplicity=analysis.get("multiplicity"), io_bound=analysis.get("io_bound", []))


# -- typed reading (one parser for every consumer: compare, history, plot, report, bench) -------
@dataclass(frozen=True)
class FileRun:
    """One file under test in one run (``runs[].files[PATH]``)."""

    pages_read: int
    bytes_read: int
    seeks: int | None = None
    resident_after: int | None = None
    resident_before: int | None = None
    estimated: bool = False
    reads: tuple = ()   # ((t_s, page, npages), ...) as stored
    faults: tuple = ()  # ((t_s, page), ...)


@dataclass(frozen=True)
class Run:
    """One timed run (``runs[]``); ``raw`` is the record as stored (for exports)."""

    variant: str
    state: str
    round: int
    seq: int
    wall_s: float
    pages_read: int
    source: str
    files: dict[str, FileRun]
    interference: str | None = None
    attempts: int = 1
    evict_left: dict[str, int] = field(default_factory=dict)
    lost_events: int = 0
    raw: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def disturbed(self) -> bool:
        """The harness flagged this run: another process used the files under test meanwhile."""
        return self.interference is not None

    def disturbed_for(self, path: str) -> bool:
        """Whether a flag of this run names ``path``."""
        notes = self.raw.get("interference", self.interference)
        if not notes:
            return False
        notes = [notes] if isinstance(notes, (str, dict)) else notes
        return any(path in (n if isinstance(n, str) else json.dumps(n)) for n in notes)

    def value(self, name: str, files=None) -> float | None:
        """Metric ``name`` (``METRICS``) of this run; None when not measured. A per-file
        metric is summed over ``files`` when given (or when the run record has no total)."""
        m = metric(name)
        if m.per_file and (files is not None or not m.stored):
            vals = [getattr(self.files[p], name) for p in (self.files if files is None else files) if p in self.files]
            vals = [v for v in vals if v is not None]
            return float(sum(vals)) if vals else None
        return m.of(self.raw)


@dataclass(frozen=True)
class Results:
    """A parsed ``elflayout-results`` v1 document (docs/formats/results.md).

    ``doc`` keeps the document as read (for exports and the history's digest);
    consumers use the typed fields and never re-check the JSON.
    """

    path: str
    metadata: dict
    variants: tuple[tuple[str, str], ...]  # ((name, command), ...) in the session's order
    runs: tuple[Run, ...]
    summary: tuple[dict, ...]
    comparisons: tuple[dict, ...]
    io_bound: tuple[dict, ...]
    doc: dict = field(repr=False, compare=False)

    @property
    def variant_names(self) -> list[str]:
        return [n for n, _ in self.variants]

    @property
    def states(self) -> list[str]:
        """The session's states (metadata), else those of the runs in sorted order."""
        return list(self.metadata.get("states") or sorted({r.state for r in self.runs}))

    @property
    def files(self) -> dict[str, dict]:
        """Metadata of each file under test (identity, sections...), by path."""
        return self.metadata.get("files") or {}

    @property
    def seed(self) -> int:
        return self.metadata.get("seed", 0)

    def command(self, variant: str) -> str:
        """The shell command of a variant ('' if not recorded)."""
        return dict(self.variants).get(variant, "")

    def runs_of(self, variant: str, state: str) -> list[Run]:
        """Runs of one variant x state in file order, disturbed ones included."""
        return [r for r in self.runs if r.variant == variant and r.state == state]

    def cell(self, variant: str, state: str, *, clean: bool = True) -> list[Run]:
        """Runs of one variant x state in run order; ``clean`` leaves out disturbed runs."""
        return sorted((r for r in self.runs if r.variant == variant and r.state == state
                       and not (clean and r.disturbed)), key=lambda r: r.seq)

    def values(self, variant: str, state: str, name: str, files=None, *, disturbed: bool = False) -> list[float]:
        """Metric ``name`` over the runs of variant x state in file order (runs without it left
        out); the clean runs, or with ``disturbed`` only the flagged ones."""
        vals = (r.value(name, files) for r in self.runs_of(variant, state) if r.disturbed == disturbed)
        return [v for v in vals if v is not None]

    def summary_row(self, variant: str, state: str, name: str) -> dict | None:
        """The file's own summary row of variant x state x metric, if it has one."""
        return next((s for s in self.summary if (s.get("variant"), s.get("state"), s.get("metric"))
                     == (variant, state, name)), None)


def _table(rows, width: int, where: str, key: str) -> tuple:
    if rows is None:
        return ()
    try:
        a = [tuple(float(x) for x in row) for row in rows]
    except (TypeError, ValueError):
        a = None
    if a is None or any(len(row) != width for row in a):
        raise ElflayoutError(f"{where}: malformed '{key}' (expected a list of {width}-number lists)")
    return tuple(a)


def _int(v, where: str, default=None):
    if v is None:
        if default is None:
            raise ElflayoutError(f"{where}: missing")
        return default
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ElflayoutError(f"{where}: expected a number, found {type(v).__name__}")
    return int(v)


def _file_run(f, w: str, path: str) -> FileRun:
    if not isinstance(f, dict):
        raise ElflayoutError(f"{w}: files[{path}] is not an object")
    pages = _int(f.get("pages_read"), f"{w}: pages_read", 0)
    return FileRun(
        pages_read=pages, bytes_read=_int(f.get("bytes_read"), f"{w}: bytes_read", pages * 4096),
        seeks=None if f.get("seeks") is None else _int(f["seeks"], f"{w}: seeks"),
        resident_after=None if f.get("resident_after") is None else _int(f["resident_after"], w),
        resident_before=None if f.get("resident_before") is None else _int(f["resident_before"], w),
        estimated=bool(f.get("estimated")),
        reads=_table(f.get("reads"), 3, w, "reads"), faults=_table(f.get("faults"), 2, w, "faults"))


def parse_run(r, i: int = 0, source: str = "results", names=None) -> Run:
    """Check and type one run record (``names``: the variants it may name; None: any)."""
    where = f"{source}: run {i}"
    if not isinstance(r, dict) or (names is not None and r.get("variant") not in names) \
            or r.get("state") not in ("selective", "cold", "hot") or not isinstance(r.get("wall_s"), (int, float)):
        raise ElflayoutError(f"{where} is malformed (needs variant, state, wall_s)")
    fr = r.get("files") or {}
    if not isinstance(fr, dict):
        raise ElflayoutError(f"{where}: 'files' is not an object")
    files = {path: _file_run(f, f"{where}: {path}", path) for path, f in fr.items()}
    why = r.get("interference") or None  # an empty flag is no flag
    if why is not None and not isinstance(why, str):
        why = str(why)
    left = r.get("evict_left") or {}
    if not isinstance(left, dict):
        raise ElflayoutError(f"{where}: 'evict_left' is not an object")
    return Run(variant=r.get("variant"), state=r["state"], round=_int(r.get("round"), f"{where}: round", 0),
               seq=_int(r.get("seq"), f"{where}: seq", i), wall_s=float(r["wall_s"]),
               pages_read=_int(r.get("pages_read"), f"{where}: pages_read", 0),
               source=str(r.get("source", "trace")), files=files, interference=why,
               attempts=_int(r.get("attempts"), f"{where}: attempts", 1),
               evict_left={k: int(v) for k, v in left.items()},
               lost_events=_int(r.get("lost_events"), f"{where}: lost_events", 0), raw=r)


def parse(doc: dict, source: str = "results") -> Results:
    """Check a results document (format and version already checked) and type it."""
    def need_list(key, required):
        v = doc.get(key)
        if v is None and not required:
            return []
        if not isinstance(v, list) or not all(isinstance(x, dict) for x in v):
            raise ElflayoutError(f"{source}: results file has no '{key}' list" if v is None
                                 else f"{source}: '{key}' is not a list of objects")
        return v

    if isinstance(doc.get("runs"), list):
        for i, r in enumerate(doc["runs"]):
            if not isinstance(r, dict):
                raise ElflayoutError(f"{source}: run {i} is malformed (needs variant, state, wall_s)")
    raw_runs = need_list("runs", True)
    variants = need_list("variants", True)
    md = doc.get("metadata", {})
    if not isinstance(md, dict):
        raise ElflayoutError(f"{source}: 'metadata' is not an object")
    names = [v.get("name") for v in variants]
    if any(not isinstance(n, str) for n in names):
        raise ElflayoutError(f"{source}: a variant has no name")
    runs = tuple(parse_run(r, i, source, names) for i, r in enumerate(raw_runs))
    return Results(path=source, metadata=md, variants=tuple((v["name"], str(v.get("command") or "")) for v in variants),
                   runs=runs, summary=tuple(need_list("summary", False)),
                   comparisons=tuple(need_list("comparisons", False)), io_bound=tuple(need_list("io_bound", False)),
                   doc=doc)


def read(path) -> Results:
    """Read and type a results file: the one way in; one-line ``ElflayoutError`` on anything malformed."""
    return parse(fileio.load_json(path, KIND, (VERSION,)), str(path))


def as_results(doc, source: str = "results") -> Results:
    """``doc`` typed: a ``Results`` as is, a document built in memory (``build``) parsed."""
    return doc if isinstance(doc, Results) else parse(doc, source)


def load(path) -> dict:
    """The checked document as a dict (``read(path).doc``), for code working on the JSON."""
    return read(path).doc


def runs_csv(doc: dict) -> str:
    """One row per run and file under test (file columns empty when there are none)."""
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    w.writerow([*RUN_FIELDS, "file", "file_pages_read", "file_bytes_read", "file_seeks"])
    for r in doc["runs"]:
        base = [r.get(k) for k in RUN_FIELDS]
        files = r.get("files") or {}
        if not files:
            w.writerow([*base, "", "", "", ""])
        for f, x in files.items():
            w.writerow([*base, f, x.get("pages_read"), x.get("bytes_read"), x.get("seeks")])
    return out.getvalue()


def _fmt(v, metric=""):
    if v is None:
        return "–"
    if isinstance(v, float) and metric.endswith("_s"):
        return f"{v * 1000:.2f} ms"
    if isinstance(v, float):
        return f"{v:,.4g}" if abs(v) < 1000 else f"{v:,.0f}"
    return f"{v:,}" if isinstance(v, int) else str(v)


def summary_csv(doc: dict) -> str:
    out = io.StringIO()
    w = csv.writer(out, lineterminator="\n")
    cols = ["variant", "state", "metric", "n", "mean", "median", "sd", "cov", "min", "max", "ci_low", "ci_high",
            "median_ci_low", "median_ci_high"]
    w.writerow(cols)
    for s in doc.get("summary", []):
        w.writerow([s.get(c) for c in cols])
    out.write("\n")
    cols = ["a", "b", "state", "metric", "mean_a", "mean_b", "ratio", "ci_low", "ci_high", "diff", "diff_ci_low",
            "diff_ci_high", "p_welch", "p_mwu", "p_brown_forsythe", "verdict", "test", "p_adjusted", "primary", "mde",
            "runs_needed"]
    w.writerow(cols)
    for c in doc.get("comparisons", []):
        w.writerow([c.get(k) for k in cols])
    mu = doc.get("multiplicity")
    if mu:  # how many comparisons the verdicts were corrected for
        out.write("\n")
        cols = ["method", "alpha", "comparisons", "tested", "exact", "too_few_runs", "primary", "min_time_runs", "not_tested"]
        w.writerow(cols)
        w.writerow([" ".join(mu[k]) if k == "primary" else mu.get(k) for k in cols])
    return out.getvalue()


def markdown(doc: dict) -> str:
    lines = ["| variant | state | metric | n | mean | median | sd | CoV | min | max | 95% CI of mean |",
             "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for s in doc.get("summary", []):
        m = s["metric"]
        cov = f"{s['cov'] * 100:.1f}%" if s.get("cov") is not None else "–"
        lines.append(f"| {s['variant']} | {s['state']} | {m} | {s['n']} | {_fmt(s['mean'], m)} | {_fmt(s['median'], m)} "
                     f"| {_fmt(s['sd'], m)} | {cov} | {_fmt(s['min'], m)} | {_fmt(s['max'], m)} "
                     f"| [{_fmt(s['ci_low'], m)}, {_fmt(s['ci_high'], m)}] |")
    if doc.get("comparisons"):
        lines += ["", "| b vs a | state | metric | ratio b/a | 95% CI | diff | test | p | p (Holm) "
                      "| MDE (80% power) | p (B–F) | verdict |",
                  "|---|---|---|---:|---|---:|---|---:|---:|---:|---:|---|"]
        for c in doc["comparisons"]:
            m = c["metric"]
            p = lambda x: "–" if x is None else f"{x:.3g}"  # noqa: E731
            ci = "–" if c.get("ci_low") is None else f"[{c['ci_low']:.4f}, {c['ci_high']:.4f}]"
            ratio = "–" if c.get("ratio") is None else f"{c['ratio']:.4f}"
            mde = "–" if c.get("mde") is None else f"{c['mde'] * 100:.1f}%" + (
                f" (n={c['runs_needed']} for target)" if c.get("runs_needed") else "")
            star = " (primary)" if c.get("primary") else ""
            lines.append(f"| {c['b']} vs {c['a']} | {c['state']} | {m}{star} | {ratio} | {ci} "
                         f"| {_fmt(c.get('diff'), m)} | {c.get('test') or '–'} | {p(c.get('p_value'))} "
                         f"| {p(c.get('p_adjusted'))} | {mde} | {p(c.get('p_brown_forsythe'))} "
                         f"| **{c.get('verdict')}** |")
        mu = doc.get("multiplicity")
        if mu:
            lines += ["", f"{mu['comparisons']} comparisons: {mu['tested']} tested (Holm-corrected at "
                          f"{mu['alpha']:g} across all of them), {mu['exact']} exact (deterministic counts), "
                          f"{mu.get('too_few_runs', 0)} without a verdict (too few runs)"
                          + (f", {mu['not_tested']} described, not tested (user/sys split: sampled per "
                             "scheduler tick; cpu_s carries the CPU verdict)" if mu.get("not_tested") else "")
                          + "; "
                          f"primary: {', '.join(mu['primary'])}; no time verdict below {mu['min_time_runs']} runs "
                          "per side."]
    io_rows = [r for r in doc.get("io_bound", []) if "variant" in r and "value" in r]
    if io_rows:
        def n_of(v, state):
            return sum(1 for r in doc["runs"] if r["variant"] == v and r["state"] == state and not r.get("interference"))

        lines += ["", "| I/O-bound time (Hommey: cold − hot) | cold state | n (cold, hot) | mean | 95% CI |",
                  "|---|---|---|---:|---|"]
        for r in io_rows:
            n = (n_of(r["variant"], r["cold_state"]), n_of(r["variant"], "hot"))
            caveat = " (n < 2: a single run, no interval)" if min(n) < 2 else ""
            lines.append(f"| {r['variant']} | {r['cold_state']} | {n[0]}, {n[1]} | {_fmt(r['value'], 'x_s')} "
                         f"| [{_fmt(r['ci_low'], 'x_s')}, {_fmt(r['ci_high'], 'x_s')}]{caveat} |")
        for r in doc["io_bound"]:
            if "change" in r and r["change"]:
                ch = r["change"]
                lines.append(f"| change {r['b']} vs {r['a']} | {r['cold_state']} | | {_fmt(ch['value'], 'x_s')} "
                             f"| [{_fmt(ch['ci_low'], 'x_s')}, {_fmt(ch['ci_high'], 'x_s')}] |")
    return "\n".join(lines) + "\n"
