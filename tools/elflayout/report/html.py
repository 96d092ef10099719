"""One self-contained HTML report of results and profiles.

Everything is inline (PNG images as base64 data URIs, CSS and a few lines of JS to sort
tables), so the file can be mailed or attached to a bug and opens without a network.
Every string that comes from an input file goes through ``html.escape``.
"""

from __future__ import annotations

import base64
import datetime as _dt
import io
import json
import shlex
from html import escape
from pathlib import Path

import numpy as np

from elflayout import __version__
from elflayout.elfcore import ElfImage
from elflayout.errors import ElflayoutError
from elflayout import initializers
from elflayout.results import Results
from elflayout.report import access
from elflayout.report import data as D
from elflayout.report import interactive
from elflayout.report import screen
from elflayout.report import timing
from elflayout.report.access import save

CSS = """
body{font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;margin:0;color:#222;background:#fafafa}
main{max-width:1320px;margin:0 auto;padding:12px 22px 40px}
h1{font-size:1.5em;margin:.4em 0 .1em} h2{font-size:1.25em;margin:1.6em 0 .4em;border-bottom:2px solid #ddd;padding-bottom:.15em}
h3{font-size:1.05em;margin:1.2em 0 .3em} .sub{color:#666;font-size:.9em}
table{border-collapse:collapse;margin:.4em 0 1em;background:#fff;font-size:.88em;font-variant-numeric:tabular-nums}
th,td{border:1px solid #ddd;padding:3px 8px;text-align:right;vertical-align:top}
th{background:#f0f0f0;position:sticky;top:0} td.t,th.t{text-align:left}
table.sortable th{cursor:pointer;user-select:none} table.sortable th:after{content:" \\2195";color:#aaa;font-size:.8em}
tr:nth-child(even) td{background:#fbfbfb}
.v-faster,.v-fewer{color:#0a7a28;font-weight:600} .v-slower,.v-more{color:#b3141b;font-weight:600} .v-no{color:#777}
.ci{color:#777;font-size:.9em} figure{margin:.6em 0 1.2em} figure img{max-width:100%;height:auto;border:1px solid #e3e3e3;background:#fff}
figcaption{font-size:.88em;color:#555} .warn{color:#8a5a00} code{font-size:.92em}
details{margin:.4em 0} summary{cursor:pointer;color:#225}
nav a{margin-right:1em} ul.headline{font-size:1.05em;margin:.3em 0 .6em}
details.static figure{overflow-x:auto} details.static figure img{max-width:none}
""" + interactive.CSS

# Click a header to sort by that column (numbers by data-v, else text); click again to reverse.
JS = """
document.querySelectorAll('table.sortable').forEach(function(t){
 t.querySelectorAll('th').forEach(function(th,i){th.addEventListener('click',function(){
  var b=t.tBodies[0],rows=Array.from(b.rows),asc=th.dataset.dir!=='asc';
  t.querySelectorAll('th').forEach(function(h){delete h.dataset.dir});th.dataset.dir=asc?'asc':'desc';
  function key(r){var c=r.cells[i];if(!c)return '';var v=c.dataset.v;if(v!==undefined&&v!=='')return parseFloat(v);return c.textContent.trim().toLowerCase()}
  rows.sort(function(x,y){var a=key(x),c=key(y);if(typeof a==='number'&&typeof c==='number')return asc?a-c:c-a;
   a=String(a);c=String(c);return asc?a.localeCompare(c):c.localeCompare(a)});
  rows.forEach(function(r){b.appendChild(r)});});});});
"""


# ----------------------------------------------------------------------------------
# small HTML helpers

def _num(v, digits: int = 0) -> str:
    if v is None or (isinstance(v, float) and not np.isfinite(v)):
        return "–"
    return f"{v:,.{digits}f}"


def td(text, v=None, cls: str | None = None) -> str:
    attrs = ""
    if v is not None and isinstance(v, (int, float)) and np.isfinite(v):
        attrs += f' data-v="{float(v):.10g}"'
    if cls:
        attrs += f' class="{escape(cls)}"'
    return f"<td{attrs}>{text}</td>"


def table(headers: list[str], rows: list[list[str]], sortable: bool = True, cls: str = "") -> str:
    """headers are plain text (escaped here); rows are lists of ready <td> strings."""
    h = "".join(f'<th class="t">{escape(x)}</th>' if i == 0 else f"<th>{escape(x)}</th>"
                for i, x in enumerate(headers))
    body = "".join("<tr>" + "".join(r) + "</tr>" for r in rows)
    c = " ".join(x for x in ("sortable" if sortable else "", cls) if x)
    return f'<table class="{c}"><thead><tr>{h}</tr></thead><tbody>{body}</tbody></table>'


def figure_png(fig, caption: str = "", alt: str = "") -> str:
    buf = io.BytesIO()
    save(fig, buf, fmt="png", dpi=100)
    b64 = base64.b64encode(buf.getvalue()).decode()
    cap = f"<figcaption>{escape(caption)}</figcaption>" if caption else ""
    return f'<figure><img alt="{escape(alt or caption)}" src="data:image/png;base64,{b64}">{cap}</figure>'


def _verdict_cls(v: str) -> str:
    return "v-no" if not v or v.startswith("no") else f"v-{v}"


def exact(c: dict, res: Results | None = None) -> bool:
    """Whether a comparison is of deterministic counts (``compare``'s "exact"): as the row
    says, else (files written before rows said it) from the runs: a count, constant on
    both sides over two runs or more."""
    if "deterministic" in c or c.get("test"):
        return bool(c.get("deterministic")) or str(c.get("test") or "").startswith("exact")
    m = D.METRICS.get(c.get("metric"))
    if res is None or m is None or m.time:
        return False
    sides = [D.values(res, c.get(k), c.get("state"), m.name) for k in ("a", "b")]
    return all(x.size >= 2 and np.ptp(x) == 0 for x in sides)


def decided_by(c: dict, res: Results | None = None) -> str:
    """The test behind a comparison's verdict, as ``compare`` names it: "exact" for
    deterministic counts, else the test with its p (and Holm's, when corrected); "" when
    nothing was tested (too few runs)."""
    test = str(c.get("test") or "")
    if exact(c, res):
        return "exact"
    if not test:
        return ""
    p, pa = c.get("p_value"), c.get("p_adjusted")
    out = f"{test}, p = {_pfmt(p)}" if isinstance(p, (int, float)) else test
    if isinstance(pa, (int, float)) and isinstance(p, (int, float)) and f"{pa:.3g}" != f"{p:.3g}":
        out += f" (Holm {_pfmt(pa)})"
    return out


def warnings_of(c: dict, res: Results | None = None) -> list[str]:
    """A comparison's warnings; an exact (deterministic) count needs no run count to be
    trusted, so the "fewer than N runs" caution is not repeated for it."""
    warns = c.get("warnings") or []
    warns = warns if isinstance(warns, list) else [warns]
    if exact(c, res):
        warns = [w for w in warns if not str(w).startswith("fewer than")]
    return [str(w) for w in warns]


# ----------------------------------------------------------------------------------
# results

def _median_ci(res, variant, state, metric, files=None):
    """(median, lo, hi) in base units: the summary's median CI when there is one."""
    x = D.values(res, variant, state, metric, files)
    if not x.size:
        return None, None, None
    med = float(np.median(x))
    row = D.summary_row(res, variant, state, metric) if files is None else None
    lo = hi = None
    if row:
        lo = row.get("median_ci_low", row.get("ci_low"))
        hi = row.get("median_ci_high", row.get("ci_high"))
    return med, lo, hi


def summary_table(res: Results, files: list[str] | None) -> str:
    """variant × state: median wall time with CI, pages and bytes read, major faults, seeks, verdicts."""
    headers = ["variant", "state", "n", "wall ms (median)", "95% CI", "pages read", "MB read", "major faults",
               "seeks", "verdicts vs baseline"]
    rows = []
    for v in D.variants(res):
        for s in D.states(res):
            rs = D.runs_of(res, v, s)
            if not rs:
                continue
            med, lo, hi = _median_ci(res, v, s, "wall_s")
            ci = f'<span class="ci">[{_num(lo * 1e3, 1)}, {_num(hi * 1e3, 1)}]</span>' if lo is not None and hi is not None else "–"
            pages = D.values(res, v, s, "pages_read", files)
            byts = D.values(res, v, s, "bytes_read", files)
            maj = D.values(res, v, s, "major_faults")
            seeks = D.values(res, v, s, "seeks", files)
            pm = float(np.median(pages)) if pages.size else None
            bm = float(np.median(byts)) / 1e6 if byts.size else None
            mm = float(np.median(maj)) if maj.size else None
            sm = float(np.median(seeks)) if seeks.size else None
            verdicts = []
            for c in D.comparisons(res, v, s):
                vd = str(c.get("verdict") or "")
                ratio = c.get("ratio")
                rt = f" ×{ratio:.3f}" if isinstance(ratio, (int, float)) else ""
                label = D.METRICS[c["metric"]].label if c.get("metric") in D.METRICS else c.get("metric")
                how = decided_by(c, res)
                how = f' <span class="ci">({escape(how)})</span>' if how else ""
                verdicts.append(f'<span class="{_verdict_cls(vd)}">{escape(str(label))}: {escape(vd)}{escape(rt)}</span>'
                                + how)
            nd = sum(D.disturbed(r) for r in rs)
            ntext = f"{len(rs) - nd}" + (f' <span class="warn" title="runs the harness flagged as disturbed by other '
                                         f'processes are left out, as in its statistics">(+{nd} disturbed)</span>'
                                         if nd else "")
            rows.append([
                td(escape(str(v)), cls="t"), td(escape(str(s)), cls="t"), td(ntext, len(rs) - nd),
                td(_num(med * 1e3 if med is not None else None, 1), med), td(ci),
                td(_num(pm), pm), td(_num(bm, 1), bm), td(_num(mm), mm), td(_num(sm), sm),
                td("<br>".join(verdicts) or "–", cls="t"),
            ])
    return table(headers, rows, cls="summary")


def headline(res: Results, files: list[str] | None) -> str:
    """One line per variant against the baseline in each state that reads: pages, bytes and
    wall time before → after, as Hommey's tables put them."""
    vs, lines = D.variants(res), []
    if len(vs) < 2:
        return ""
    base = vs[0]
    for s in D.states(res):
        if s == "hot":
            continue  # the point of a layout is what a cold start reads
        pa = D.values(res, base, s, "pages_read", files)
        if not pa.size or not np.median(pa):
            continue  # hot: nothing read, nothing to say
        for v in vs[1:]:
            pb = D.values(res, v, s, "pages_read", files)
            wa, wb = D.values(res, base, s, "wall_s"), D.values(res, v, s, "wall_s")
            if not pb.size or not wa.size or not wb.size:
                continue
            ma, mb = float(np.median(pa)), float(np.median(pb))
            wc = next((c for c in D.comparisons(res, v, s) if c.get("metric") == "wall_s"), {})
            wv = wc.get("verdict")
            how = decided_by(wc, res) if wv else ""
            warn = "; ".join(warnings_of(wc, res))
            lines.append(
                f"<li><b>{escape(v)}</b> vs <b>{escape(base)}</b> ({escape(s)}): pages read {ma:,.0f} → {mb:,.0f} "
                f"({(mb - ma) / ma:+.1%}), {ma * D.PAGE / 1e6:,.1f} → {mb * D.PAGE / 1e6:,.1f} MB; "
                f"median wall {np.median(wa) * 1e3:,.1f} → {np.median(wb) * 1e3:,.1f} ms"
                + (f' (<span class="{_verdict_cls(str(wv))}">{escape(str(wv))}</span>'
                   + (f'<span class="ci">: {escape(how)}</span>' if how else "") + ")" if wv else "")
                + (f' <span class="warn" title="{escape(warn)}">⚠ {escape(warn)}</span>' if warn else "") + "</li>")
    return f'<ul class="headline">{"".join(lines)}</ul>' if lines else ""


def pages_line(res: Results, files: list[str] | None) -> str:
    """Median pages read per variant in the first state that reads (one variant: no
    before/after headline to give)."""
    for s in D.states(res):
        got = [(v, D.values(res, v, s, "pages_read", files)) for v in D.variants(res)]
        got = [(v, float(np.median(x))) for v, x in got if x.size]
        if got and any(m for _, m in got):
            return (f'<ul class="headline"><li>pages read ({escape(s)}, median): '
                    + ", ".join(f"<b>{escape(v)}</b> {m:,.0f}" for v, m in got) + "</li></ul>")
    return ""


def comparisons_table(res: Results) -> str:
    comps = res.comparisons
    if not comps:
        return ""
    headers = ["metric", "a → b", "state", "ratio b/a", "95% CI", "verdict", "decided by", "p Welch",
               "p Mann–Whitney", "p Brown–Forsythe", "warnings"]
    rows = []
    for c in comps:
        ratio, lo, hi = c.get("ratio"), c.get("ci_low"), c.get("ci_high")
        ci = f"[{_num(lo, 3)}, {_num(hi, 3)}]" if isinstance(lo, (int, float)) and isinstance(hi, (int, float)) else "–"
        vd = str(c.get("verdict") or "")
        warns = warnings_of(c, res)
        rows.append([
            td(escape(str(c.get("metric"))), cls="t"),
            td(escape(f"{c.get('a')} → {c.get('b')}"), cls="t"), td(escape(str(c.get("state"))), cls="t"),
            td(_num(ratio, 3), ratio), td(ci), td(escape(vd), cls=_verdict_cls(vd)),
            td(escape(decided_by(c, res) or "–"), cls="t"),
            td(_pfmt(c.get("p_welch")), c.get("p_welch")), td(_pfmt(c.get("p_mwu")), c.get("p_mwu")),
            td(_pfmt(c.get("p_brown_forsythe")), c.get("p_brown_forsythe")),
            td("; ".join(escape(w) for w in warns), cls="t"),
        ])
    return table(headers, rows)


def _pfmt(p) -> str:
    return f"{p:.3g}" if isinstance(p, (int, float)) else "–"


def io_bound_table(res: Results) -> str:
    rows = []
    for r in res.io_bound:
        if "variant" in r and isinstance(r.get("value"), (int, float)):
            lo, hi = r.get("ci_low"), r.get("ci_high")
            ci = f"[{_num(lo * 1e3, 1)}, {_num(hi * 1e3, 1)}]" if isinstance(lo, (int, float)) and isinstance(hi, (int, float)) else "–"
            rows.append([td(escape(str(r["variant"])), cls="t"),
                         td(escape(f"{r.get('cold_state')} − hot"), cls="t"),
                         td(_num(r["value"] * 1e3, 1), r["value"]), td(ci)])
        elif "change" in r and isinstance((r.get("change") or {}).get("value"), (int, float)):
            ch = r["change"]
            lo, hi = ch.get("ci_low"), ch.get("ci_high")
            ci = f"[{_num(lo * 1e3, 1)}, {_num(hi * 1e3, 1)}]" if isinstance(lo, (int, float)) and isinstance(hi, (int, float)) else "–"
            rows.append([td(escape(f"change {r.get('a')} → {r.get('b')}"), cls="t"),
                         td(escape(f"{r.get('cold_state')} − hot"), cls="t"),
                         td(_num(ch["value"] * 1e3, 1), ch["value"]), td(ci)])
    if not rows:
        return ""
    return ("<h3>Time spent waiting for I/O (Hommey's cold − hot)</h3>"
            + table(["variant", "difference", "ms", "95% CI"], rows))


def files_table(res: Results, state: str | None = None) -> str:
    """Each file measured: its size and the median pages / bytes read and seeks per variant × state."""
    meta_files = res.files
    rows = []
    for path in D.all_files(res):
        md = meta_files.get(path) or {}
        for v in D.variants(res):
            # A build's file is not read by the other variant: no row of zeros for that.
            if not any(D.values(res, v, s, "pages_read", [path], dr).sum() for s in D.states(res)
                       for dr in (False, True)):
                continue
            for s in D.states(res):
                pages = D.values(res, v, s, "pages_read", [path])
                if not pages.size:
                    continue
                seeks = D.values(res, v, s, "seeks", [path])
                size = md.get("size")
                pm = float(np.median(pages))
                rows.append([td(escape(path), cls="t"), td(escape(str(v)), cls="t"), td(escape(str(s)), cls="t"),
                             td(_num(size / 1e6 if isinstance(size, (int, float)) else None, 1), size),
                             td(_num(pm), pm), td(_num(pm * D.PAGE / 1e6, 1), pm),
                             td(_num(float(np.median(seeks))) if seeks.size else "–",
                                float(np.median(seeks)) if seeks.size else None)])
    if not rows:
        return ""
    return table(["file", "variant", "state", "size MB", "pages read (median)", "MB read", "seeks"], rows)


def section_table_html(res: Results, panels) -> str:
    """Per ELF section (matched by name across builds): pages read and touched in each
    variant's plotted run."""
    if not panels:
        return ""
    per = []
    for p in panels:
        secs = D.sections_of(res, p.path)
        per.append({_key(r, i): r for i, r in enumerate(D.section_table(secs, p.acc))} if secs else {})
    if not any(per):
        return ""
    order: list = []
    for t in per:
        order += [k for k in t if k not in order]
    headers = ["section", "MB", "pages"]
    for p in panels:
        headers += [f"{p.variant}: read", f"{p.variant}: touched"]
    if len(panels) > 1:
        headers += [f"read Δ {panels[-1].variant} − {panels[0].variant}"]
    rows = []
    zero = {"read": 0, "touched": 0}
    for k in order:
        s = next(t[k] for t in per if k in t)
        if all(t.get(k, zero)["read"] == 0 and t.get(k, zero)["touched"] == 0 for t in per) and s["pages"] < 2:
            continue  # a sliver never read in any variant is noise in this table
        fam, colour = D.family_of(s["name"])
        row = [td(f'<span style="color:{colour}">■</span> {escape(s["name"])}', cls="t"),
               td(_num(s["size"] / 1e6, 2), s["size"]), td(_num(s["pages"]), s["pages"])]
        for t in per:
            r = t.get(k)
            row += ([td(_num(r["read"]), r["read"]), td(_num(r["touched"]), r["touched"])] if r
                    else [td("–"), td("–")])
        if len(panels) > 1:
            d = per[-1].get(k, zero)["read"] - per[0].get(k, zero)["read"]
            cls = "v-fewer" if d < 0 else "v-more" if d > 0 else "v-no"
            row.append(td(f"{d:+,}", d, cls))
        rows.append(row)
    tot = ["<td class=\"t\"><b>whole file (distinct pages)</b></td>", td(""), td("")]
    for p in panels:
        tot += [td(f"<b>{_num(p.acc.pages_read)}</b>", p.acc.pages_read), td(f"<b>{_num(p.acc.touched)}</b>")]
    if len(panels) > 1:
        tot.append(td(f"<b>{panels[-1].acc.pages_read - panels[0].acc.pages_read:+,}</b>"))
    out = table(headers, rows)
    out = out.replace("</tbody>", "</tbody><tfoot><tr>" + "".join(tot) + "</tr></tfoot>")
    return (out + '<p class="sub">Pages of the plotted run of each variant. "touched" = distinct pages that '
            "faulted (fault-around maps neighbours without a fault, so true touches are more). A page shared by "
            "two sections counts for both.</p>")


def _key(row: dict, i: int):
    # Section names are unique in practice; the index only separates exotic duplicates.
    return row["name"]


MAX_ACCESS_FIGURES = 6  # figures beyond this: a note with the command that draws each (access_figures)


def metadata_table(meta: dict, skip=("files",)) -> str:
    rows = []
    for k, v in _flatten(meta):
        if k.split(".")[0] in skip:
            continue
        text = v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)
        if len(text) > 400:
            text = text[:400] + " …"
        rows.append([td(escape(k), cls="t"), td(escape(text), cls="t")])
    return table(["key", "value"], rows)


def _flatten(d, prefix=""):
    for k, v in (d or {}).items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and v and len(v) <= 40:
            yield from _flatten(v, key + ".")
        else:
            yield key, v


def identity_table(res: Results) -> str:
    rows = []
    for path, md in res.files.items():
        if not isinstance(md, dict):
            continue
        rows.append([td(escape(path), cls="t"), td(_num(md.get("size")), md.get("size")),
                     td(escape(str(md.get("build_id") or "–")), cls="t"),
                     td(escape(str(md.get("sha256") or "–")[:16]), cls="t")])
    if not rows:
        return ""
    return table(["file", "bytes", "build-id", "sha256 (prefix)"], rows)


def interactive_view(res: Results, plan: dict[str, str], profiles, state: str, dom_id: str, title: str) -> str:
    """The interactive access view of one plan, or a note saying why it is not drawn."""
    if interactive.plotly_js() is None:
        return interactive.unavailable_html("plotly is not installed (pip install 'elflayout[report]'); the static "
                                            "images below show the same reads")
    return interactive.view_html(interactive.view_data(res, plan, profiles, state), dom_id, title)


def access_figures(src: str, res: Results, plans: list[dict[str, str]], profiles=(), idx: int = 0) -> list[str]:
    """Per plan (the first MAX_ACCESS_FIGURES, most pages read first): the interactive
    view, the static images for printing, the per-section table; then a note naming the
    rest with the command that draws them."""
    out = []
    for k, plan in enumerate(plans[:MAX_ACCESS_FIGURES]):
        names = sorted({Path(p).name for p in plan.values()})
        try:
            panels, state = access.results_panels(res, plan, None, None)
        except ElflayoutError as e:
            out.append(f'<p class="warn">{escape(" / ".join(names))}: no access pattern: {escape(str(e))}</p>')
            continue
        out.append(f"<h3>Where the bytes of {escape(' / '.join(names))} go ({escape(str(state))})</h3>")
        if len(set(plan.values())) > 1:
            out.append('<p class="sub">' + "; ".join(f"<b>{escape(v)}</b>: <code>{escape(p)}</code>"
                                                    for v, p in plan.items()) + "</p>")
        out.append(interactive_view(res, plan, profiles, state, f"{idx}-{k}", " / ".join(names)))
        out.append('<p class="sub">Access view: x = time since exec (or read number), y = offset in the file, '
                   "one shared axis for every variant shown; bands: ELF sections; dots: reads, sized by the "
                   f"read-ahead window; red lines: seeks (jumps of more than {D.SEEK_PAGES} pages between consecutive "
                   "reads); crosses: page faults. "
                   "Each variant's run with the median pages read. Bar: distinct pages read per section family; "
                   "the black tick is the pages touched, the floor no layout can read below; click a family to "
                   "zoom the view to it.</p>")
        static = [figure_png(access.sections_figure(panels),
                             "Pages read per variant, split by ELF section family (same colours as the bands "
                             "below); the dark inner bar is the part that was touched (faulted).",
                             alt="pages read by section family"),
                  figure_png(access.access_figure(panels, title=None),
                             "x: time since exec; y: offset in the file; bands: ELF sections; dots: pages read "
                             "(bigger = larger folio); lines: order of reads (long strokes are seeks); crosses: "
                             "page faults. Margin: pages read and touched per slice of the file.",
                             alt=f"access pattern of {', '.join(names)}"),
                  figure_png(access.access_figure(panels, title=None, x="sequence"),
                             "x: read number; otherwise as above.", alt="access pattern by read order")]
        out.append('<details class="static"><summary>Static images (as <code>elflayout plot</code> draws them; '
                   "for printing)</summary>" + "".join(static) + "</details>")
        out.append(section_table_html(res, panels))
    left = plans[MAX_ACCESS_FIGURES:]
    if left:
        cmds = []
        for plan in left:
            paths = sorted(set(plan.values()))
            args = [src] + [a for p in paths for a in ("--file", p)] + ["-o", f"{Path(paths[0]).name}.png"]
            cmds.append("elflayout plot " + " ".join(shlex.quote(a) for a in args))
        out.append(f'<p class="warn">{len(left)} more access-pattern figure(s) not shown: this report draws '
                   f"the first {MAX_ACCESS_FIGURES} of {len(plans)}. Draw the others with:</p><ul>"
                   + "".join(f"<li><code>{escape(c)}</code></li>" for c in cmds) + "</ul>")
    return out


def results_section(src: str, res: Results, idx: int, profiles=()) -> str:
    """A results file: the headline (pages read per variant) and the access views first,
    then the summary, the comparisons (collapsed), the files and the run-to-run spread."""
    out = [f'<h2 id="r{idx}">Results: {escape(Path(src).name)}</h2>']
    meta = res.metadata
    vs = ", ".join(f"<b>{escape(name)}</b>: <code>{escape(command)}</code>" for name, command in res.variants)
    out.append(f'<p class="sub">{len(res.runs)} runs. Variants: {vs or "–"}</p>')
    traced = D.traced_files(res)
    out.append(headline(res, traced or None) or pages_line(res, traced or None))
    try:
        plans = D.plans(res, None, src)
    except ElflayoutError:
        plans = []
        out.append('<p class="warn">No run has an ordered read sequence (measured without tracing, e.g. the '
                   "mincore fallback): no access-pattern plot.</p>")
    out += access_figures(src, res, plans, profiles, idx)
    out.append("<h3>Summary</h3>")
    out.append(summary_table(res, traced or None))
    out.append('<p class="sub">Medians over the runs (runs flagged as disturbed by other processes left out); '
               'pages/MB read and seeks are summed over the traced files. '
               "Verdicts come from the results file's comparisons (each variant against the baseline), with the "
               "test that decided each: exact for page counts the runs show deterministic.</p>")
    for w in list(meta.get("warnings") or []) + list(meta.get("hints") or []):
        out.append(f'<p class="warn">⚠ {escape(str(w if not isinstance(w, dict) else w.get("message", w)))}</p>')
    ct = comparisons_table(res)
    if ct:
        out.append("<details><summary>All comparisons</summary>" + ct + "</details>")
    out.append(io_bound_table(res))
    ft = files_table(res)
    if ft:
        out.append("<h3>Files read</h3>" + ft)
    out.append("<h3>Run-to-run distribution</h3>")
    out.append(figure_png(timing.violin_figure(res, "wall_s"), "Wall time of every run, per variant and state.",
                          alt="wall time violin plot"))
    pages_vary = any(np.ptp(D.values(res, v, s, "pages_read", traced or None)) > 0
                     for v in D.variants(res) for s in D.states(res) if D.values(res, v, s, "pages_read").size)
    if traced and pages_vary:
        out.append(figure_png(timing.violin_figure(res, "pages_read", files=traced),
                              "Pages read per run (should be identical run to run under control; spread means "
                              "something else read or held the file).", alt="pages read violin plot"))
    out.append("<h3>Environment</h3>")
    out.append(identity_table(res))
    out.append("<details><summary>All metadata</summary>" + metadata_table(meta) + "</details>")
    return "\n".join(x for x in out if x)


# ----------------------------------------------------------------------------------
# profiles

def initializers_html(t, meta: dict) -> str:
    """Static initializers of a valgrind-profiled target (``elflayout.initializers``): what
    each costs in first-touched pages and (valgrind) time. Empty when not applicable."""
    import os

    path = str(t.path)
    if meta.get("backend") != "valgrind" or not os.path.isfile(path):
        return ""
    try:
        with ElfImage(path) as img:
            if t.build_id and img.build_id != t.build_id:
                return ""
            res = initializers.describe(img, (), t)
    except ElflayoutError:
        return ""
    ran = sorted((e for e in res["initializers"] if e.get("ran")), key=lambda e: -e["pages"])
    if not res["count"]:
        return ""
    rows = [[td(escape(str(e["function"] or "?")), cls="t"), td(escape(f"{e['via']}[{e['index']}]"), cls="t"),
             td(_num(e["code_pages"]), e["code_pages"]), td(_num(e["data_pages"]), e["data_pages"]),
             td("–" if e["t_s"] is None else f"{e['t_s'] * 1e3:.1f}", e["t_s"]),
             td(escape(str(e["object"] or "")), cls="t")] for e in ran[:40]]
    more = f" (the 40 costliest of {len(ran):,})" if len(ran) > 40 else ""
    return (f"<details><summary>Static initializers: {res['count']:,} listed, {res['ran']:,} ran, "
            f"{res['pages_charged']:,} pages first touched by them{more}</summary>"
            + table(["function", "via", "code pages", "data pages", "time ms (valgrind)", "object"], rows)
            + f'<p class="sub">Hommey (2011): initializers run before main touch code and data all over the '
              f"library. {escape(res['time_note'])}.</p></details>")


def profile_section(src: str, doc, idx: int) -> str:
    out = [f'<h2 id="p{idx}">Profile: {escape(Path(src).name)}</h2>']
    meta = doc.metadata
    argv = meta.get("argv")
    if argv:
        cmd = " ".join(map(str, argv)) if isinstance(argv, list) else str(argv)
        out.append(f'<p class="sub">Workload: <code>{escape(cmd)}</code>; backend {escape(str(meta.get("backend")))}, '
                   f'granularity {escape(str(meta.get("granularity")))}</p>')
    for t in doc.targets:
        path = t.path
        pages = t.pages
        kinds: dict[str, int] = {}
        phases: dict[str, int] = {}
        for p in pages:
            kinds[p.kind] = kinds.get(p.kind, 0) + 1
            if p.phase:
                phases[p.phase] = phases.get(p.phase, 0) + 1
        rows = [[td(escape(path), cls="t"), td(escape(str(t.build_id or "–")), cls="t"),
                 td(_num(len(t.functions)), len(t.functions)),
                 td(_num(len(t.objects)), len(t.objects)),
                 td(_num(len(pages)), len(pages)),
                 td(escape(", ".join(f"{access.PROFILE_KINDS.get(k, (k,))[0]} {n:,}" for k, n in kinds.items())),
                    cls="t"),
                 td(escape(", ".join(f"{k} {n:,}" for k, n in phases.items()) or "–"), cls="t")]]
        out.append(f"<h3>{escape(Path(path).name)}</h3>")
        out.append(table(["target", "build-id", "functions", "objects", "pages", "pages by kind", "pages by phase"],
                         rows))
        if pages:
            out.append(figure_png(access.profile_figure(t), "x: order of first access; y: offset in the file; "
                                  "bands: ELF sections. Margin: share of each slice of the file that was touched.",
                                  alt=f"first-access order in {path}"))
        init = initializers_html(t, meta)
        if init:
            out.append(init)
        objs = t.objects
        if objs:
            orow = [[td(_num(i + 1), i + 1), td(escape(o.object), cls="t"),
                     td(_num(o.first), o.first)] for i, o in enumerate(objs[:60])]
            more = f" (first 60 of {len(objs):,})" if len(objs) > 60 else ""
            out.append(f"<details><summary>Objects in first-access order{more}</summary>"
                       + table(["#", "object", "first"], orow) + "</details>")
    out.append("<details><summary>Profile metadata</summary>" + metadata_table(meta, skip=()) + "</details>")
    return "\n".join(out)


# ----------------------------------------------------------------------------------

def screen_section(src: str, doc: dict, idx: int) -> str:
    """A screening result (``elflayout screen``): factors, effects with 95% intervals, the
    design points, block plots and violin-scatter plots."""
    md, d, factors = doc["metadata"], doc["design"], doc["factors"]
    out = [f'<h2 id="s{idx}">Screening: {escape(Path(src).name)}</h2>']
    res = f", resolution {d['resolution']} ({'; '.join(map(str, d.get('generators') or []))})" if d.get("resolution") else ""
    out.append(f'<p class="sub">Command <code>{escape(md["command"])}</code>: {len(factors)} factor(s), '
               f"{escape(str(d['kind']))} design of {len(d['matrix'])} points{escape(res)}, "
               f"{escape(str(md.get('replicates', '–')))} replicate(s) × {escape(str(md.get('runs', '–')))} rounds "
               f"per point; {len(doc['runs'])} runs.</p>")
    out.append(table(["factor", "LOW (−1)", "HIGH (+1)"],
                     [[td(escape(str(f["name"])), cls="t"), td(escape(str(f["low"])), cls="t"),
                       td(escape(str(f["high"])), cls="t")] for f in factors], sortable=False))
    for a in doc["effects"]:
        unit = "relative change LOW → HIGH" if a["log_scale"] else "change LOW → HIGH"
        out.append(f"<h3>Effects on {escape(str(a['metric']))}, {escape(str(a['state']))}</h3>"
                   f'<p class="sub">{a["n"]} runs; {unit}; 95% intervals, {escape(str(a.get("se", "")))}</p>')
        if not a["effects"]:
            out.append(f'<p class="warn">No fit: {escape(str(a.get("note", "")))}</p>')
            continue

        def fmt(v, pct=a["log_scale"]):
            return "–" if v is None else f"{v * 100:+.2f}%" if pct else f"{v:+.4g}"

        rows = [[td(escape(str(e["term"])), cls="t"), td(fmt(e["effect"]), e["effect"]),
                 td(f"[{fmt(e['ci_low'])}, {fmt(e['ci_high'])}]"), td(_pfmt(e["p"]), e["p"]),
                 td("matters" if e["significant"] else "–", cls="v-more" if e["significant"] else "v-no")]
                for e in a["effects"]]
        out.append(table(["term", "effect", "95% CI", "p", "interval excludes 0"], rows))
        k = len(a["effects"])
        out.append(f'<p class="sub">{k} effects estimated (intervals are not corrected for the {k} of them).</p>')
    if not d.get("interactions") and len(factors) > 1:
        out.append('<p class="sub">2-factor interactions are aliased with each other in this fraction: not '
                   "estimated.</p>")
    pts = [[td(screen.point_name(i), cls="t")] + [td(escape(str(f["high"] if c > 0 else f["low"])), cls="t")
                                                  for f, c in zip(factors, row)] for i, row in enumerate(d["matrix"])]
    out.append("<details><summary>Design points</summary>"
               + table(["point"] + [str(f["name"]) for f in factors], pts) + "</details>")
    for stem, fig, cap in screen.plots(doc):
        out.append(figure_png(fig, cap, alt=stem))
    return "\n".join(out)


def history_section(db: str, results: list[Results]) -> str:
    """History series (ETS prediction intervals) of the variants × states in the results."""
    out = [f'<h2 id="history">History: {escape(Path(db).name)}</h2>',
           '<p class="sub">Each point is one session\'s mean; the band is the 95% prediction interval from the '
           "points before it (what <code>elflayout history check</code> would have said); circled points fall "
           "outside.</p>"]
    variants = sorted({v for d in results for v in D.variants(d)}) or None
    states = sorted({s for d in results for s in D.states(d)}) or None
    for metric in ("wall_s", "pages_read"):
        try:
            series = timing.load_history(db, variants, states, metric)
        except ElflayoutError as e:
            out.append(f'<p class="warn">{escape(str(e))}</p>')
            continue
        out.append(figure_png(timing.history_figure(series), f"{D.METRICS[metric].label} history",
                              alt=f"{metric} history"))
    return "\n".join(out)


def _script(text: str) -> str:
    """An inline script; a "</script" inside it would end the element early."""
    return "<script>" + text.replace("</script", "<\\/script") + "</script>"


def build(inputs: list[tuple[str, str, dict]], history: str | None = None) -> str:
    """The report for [(source path, kind, document)] (``data.load``; and a history database), as HTML."""
    now = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    parts, nav = [], []
    profiles = [(src, doc) for src, kind, doc in inputs if kind == "profile"]
    for i, (src, kind, doc) in enumerate(inputs):
        if kind == "results":
            parts.append(results_section(src, doc, i, profiles))
            nav.append(f'<a href="#r{i}">results: {escape(Path(src).name)}</a>')
        elif kind == "screen":
            parts.append(screen_section(src, doc, i))
            nav.append(f'<a href="#s{i}">screening: {escape(Path(src).name)}</a>')
        else:
            parts.append(profile_section(src, doc, i))
            nav.append(f'<a href="#p{i}">profile: {escape(Path(src).name)}</a>')
    if history:
        parts.append(history_section(history, [d for _, k, d in inputs if k == "results"]))
        nav.append('<a href="#history">history</a>')
    srcs = ", ".join(escape(s) for s, _, _ in inputs)
    scripts = _script(JS)
    if any('class="elv-data"' in p for p in parts):
        # Plotly once for every view, then the script that draws them; nothing is fetched.
        scripts += _script(interactive.plotly_js()) + _script(interactive.view_js())
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
        f"<title>elflayout report</title><style>{CSS}</style></head><body><main>"
        f"<h1>elflayout report</h1><p class=\"sub\">{now} · elflayout {escape(__version__)} · inputs: {srcs}</p>"
        f"<nav>{''.join(nav)}</nav>"
        + "\n".join(parts)
        + f"</main>{scripts}</body></html>\n"
    )
