"""Results format v1 (docs/formats/results.md): build, load, export to CSV / Markdown.

A results file is one measurement session: the metadata common to all runs is stored
once (pyperf's rule), each run is one record, statistics are derived from the runs and
can always be recomputed (``elflayout compare`` does so).
"""

from __future__ import annotations

import csv
import io
import os
from pathlib import Path

from elflayout import fileio
from elflayout.errors import ElflayoutError

KIND = "results"
VERSION = 1
RUN_FIELDS = ("variant", "state", "round", "seq", "wall_s", "user_s", "sys_s", "major_faults", "minor_faults",
              "read_bytes", "pages_read", "bytes_read")


def file_metadata(path: str) -> dict:
    """Identity of a file under test; ELF files also carry their sections (for plots)."""
    from elflayout.elfcore import ElfImage

    p = Path(path)
    st = p.stat()
    try:
        with ElfImage(p) as img:
            md = img.identity()
            md["sections"] = [{"name": s.name, "offset": s.offset, "size": s.size}
                              for s in img.sections if s.occupies_file and s.name]
    except ElflayoutError:
        import hashlib

        md = {"path": str(p.resolve()), "build_id": None, "size": st.st_size,
              "sha256": hashlib.sha256(p.read_bytes()).hexdigest()}
    md["pages"] = (st.st_size + os.sysconf("SC_PAGE_SIZE") - 1) // os.sysconf("SC_PAGE_SIZE")
    md["dev"] = f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"
    md["ino"] = st.st_ino
    return md


def build(metadata: dict, variants: list[dict], runs: list[dict], analysis: dict) -> dict:
    return fileio.envelope(KIND, VERSION, metadata, variants=variants, runs=runs,
                           summary=analysis.get("summary", []), comparisons=analysis.get("comparisons", []),
                           multiplicity=analysis.get("multiplicity"), io_bound=analysis.get("io_bound", []))


def load(path) -> dict:
    doc = fileio.load_json(path, KIND, (VERSION,))
    for k in ("variants", "runs"):
        if not isinstance(doc.get(k), list):
            raise ElflayoutError(f"{path}: results file has no '{k}' list")
    names = {v.get("name") for v in doc["variants"]}
    for i, r in enumerate(doc["runs"]):
        if not isinstance(r, dict) or r.get("variant") not in names or "state" not in r or "wall_s" not in r:
            raise ElflayoutError(f"{path}: run {i} is malformed (needs variant, state, wall_s)")
    return doc


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
        cols = ["method", "alpha", "comparisons", "tested", "exact", "too_few_runs", "primary", "min_time_runs"]
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
        lines += ["", "| b vs a | state | metric | ratio b/a | 95% CI | paired ratio [95% CI] | diff | test | p "
                      "| p (Holm) | MDE (80% power) | p (B–F) | verdict |",
                  "|---|---|---|---:|---|---|---:|---|---:|---:|---:|---:|---|"]
        for c in doc["comparisons"]:
            m = c["metric"]
            p = lambda x: "–" if x is None else f"{x:.3g}"  # noqa: E731
            ci = "–" if c.get("ci_low") is None else f"[{c['ci_low']:.4f}, {c['ci_high']:.4f}]"
            ratio = "–" if c.get("ratio") is None else f"{c['ratio']:.4f}"
            pr = ("–" if c.get("paired_ci_low") is None else
                  f"{c['paired_ratio']:.4f} [{c['paired_ci_low']:.4f}, {c['paired_ci_high']:.4f}]")
            mde = "–" if c.get("mde") is None else f"{c['mde'] * 100:.1f}%" + (
                f" (n={c['runs_needed']} for target)" if c.get("runs_needed") else "")
            star = " (primary)" if c.get("primary") else ""
            lines.append(f"| {c['b']} vs {c['a']} | {c['state']} | {m}{star} | {ratio} | {ci} | {pr} "
                         f"| {_fmt(c.get('diff'), m)} | {c.get('test') or '–'} | {p(c.get('p_value'))} "
                         f"| {p(c.get('p_adjusted'))} | {mde} | {p(c.get('p_brown_forsythe'))} "
                         f"| **{c.get('verdict')}** |")
        mu = doc.get("multiplicity")
        if mu:
            lines += ["", f"{mu['comparisons']} comparisons: {mu['tested']} tested (Holm-corrected at "
                          f"{mu['alpha']:g} across all of them), {mu['exact']} exact (deterministic counts), "
                          f"{mu.get('too_few_runs', 0)} without a verdict (too few runs); "
                          f"primary: {', '.join(mu['primary'])}; no time verdict below {mu['min_time_runs']} runs "
                          "per side."]
    io_rows = [r for r in doc.get("io_bound", []) if "variant" in r and "value" in r]
    if io_rows:
        lines += ["", "| I/O-bound time (Hommey: cold − hot) | cold state | mean | 95% CI |", "|---|---|---:|---|"]
        for r in io_rows:
            lines.append(f"| {r['variant']} | {r['cold_state']} | {_fmt(r['value'], 'x_s')} "
                         f"| [{_fmt(r['ci_low'], 'x_s')}, {_fmt(r['ci_high'], 'x_s')}] |")
        for r in doc["io_bound"]:
            if "change" in r and r["change"]:
                ch = r["change"]
                lines.append(f"| change {r['b']} vs {r['a']} | {r['cold_state']} | {_fmt(ch['value'], 'x_s')} "
                             f"| [{_fmt(ch['ci_low'], 'x_s')}, {_fmt(ch['ci_high'], 'x_s')}] |")
    return "\n".join(lines) + "\n"
