"""Plots and the HTML report.

Fixtures (tests/data/report-*): real page-cache traces of libLLVM-16 made by
report-make-results.py / report-make-profile.py (see their docstrings); the tests do not
need the library itself.
"""

import copy
import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

from conftest import run_cli

DATA = Path(__file__).parent / "data"
RESULTS = DATA / "report-results-llvm.json.gz"
PROFILE = DATA / "report-profile-llvm.json.gz"
LIB = "/usr/lib/x86_64-linux-gnu/libLLVM-16.so.1"


def _load(p):
    return json.loads(gzip.decompress(p.read_bytes()))


def _write(doc, path):
    path.write_text(json.dumps(doc))
    return path


# -- data ------------------------------------------------------------------------------

def test_bands_group_sections_by_family_and_label_the_big_ones():
    from elflayout.report import data as D

    secs = [
        {"name": ".dynsym", "offset": 0x1000, "size": 0x10000},
        {"name": ".dynstr", "offset": 0x11000, "size": 0x20000},
        {"name": ".gnu.version", "offset": 0x31000, "size": 0x10},  # tiny: grouped, not named
        {"name": ".rela.dyn", "offset": 0x32000, "size": 0x8000},
        {"name": ".text", "offset": 0x3a000, "size": 0x100000},
        {"name": ".rodata", "offset": 0x13a000, "size": 0x4000},
        {"name": ".data.rel.ro", "offset": 0x140000, "size": 0x3000},
        {"name": ".data", "offset": 0x143000, "size": 0x1000},
        {"name": ".comment", "offset": 0x144000, "size": 0},  # empty: dropped
    ]
    bands = D.bands(secs)
    assert [b.family for b in bands] == ["dynamic symbols", "relocations", "code", "read-only data", "relro data",
                                         "data"]
    assert bands[0].label == ".dynsym/.dynstr"
    assert bands[0].start == 0x1000 and bands[0].end == 0x31010
    assert D.family_of(".text.unlikely")[0] == "code"
    assert D.family_of(".relr.dyn")[0] == "relocations"
    assert D.family_of(".debug_info")[0] == "not loaded"


def _run(files):
    from elflayout import results as model

    return model.parse_run({"variant": "v", "state": "selective", "wall_s": 0.1, "files": files})


def test_access_figures_known_answers():
    from elflayout.report import data as D

    # reads: pages 0-3 (folio of 4), 4, 100 (seek: 95 pages gap), 101; faults at 0, 0, 100
    files = {"/x": {"reads": [[0.001, 0, 4], [0.002, 4, 1], [0.003, 100, 1], [0.004, 101, 1]],
                    "faults": [[0.0015, 0], [0.0016, 0], [0.0031, 100]]}}
    a = D.access_of(_run(files), "/x")
    assert a.pages_read == 7 and a.bytes_read == 7 * 4096
    assert a.seeks == 1  # computed: only 4 -> 100 jumps more than 32 pages
    assert a.touched == 2
    assert a.efficiency == pytest.approx(2 / 7)
    assert a.read_pages().tolist() == [0, 1, 2, 3, 4, 100, 101]
    assert "7 pages read" in D.caption(a) and "1 seeks" in D.caption(a) and "29%" in D.caption(a)
    files["/x"]["seeks"] = 5  # the harness's own figure wins when present
    assert D.access_of(_run(files), "/x").seeks == 5
    rows = D.section_table([{"name": ".a", "offset": 0, "size": 3 * 4096}, {"name": ".b", "offset": 99 * 4096,
                                                                          "size": 4096 * 10}], a)
    assert [(r["name"], r["pages"], r["read"], r["touched"]) for r in rows] == [(".a", 3, 3, 1), (".b", 10, 2, 1)]
    empty = D.access_of(_run({}), "/x")
    assert empty.pages_read == 0 and empty.efficiency is None and empty.seeks == 0


def test_fixture_sections_and_median_run():
    from elflayout.report import data as D

    kind, doc = D.load(RESULTS)
    assert kind == "results"
    plan = D.choose_plan(doc, None, "r")
    assert plan == {"llc": LIB, "opt": LIB}
    path = LIB
    assert D.default_state(doc, plan) == "selective"
    k, run = D.pick_run(doc, "llc", "selective", path)
    pages = sorted(r.files[path].pages_read for r in D.runs_of(doc, "llc", "selective"))
    assert run.files[path].pages_read == pages[(len(pages) - 1) // 2]
    rows = {r["name"]: r for r in D.section_table(D.sections_of(doc, path), D.access_of(run, path))}
    # The loader writes essentially every .data.rel.ro page and streams .rela.dyn (design.md).
    assert rows[".data.rel.ro"]["read"] == rows[".data.rel.ro"]["pages"]
    assert rows[".rela.dyn"]["read"] == rows[".rela.dyn"]["pages"]
    assert rows[".text"]["read"] < rows[".text"]["pages"]


# -- figures -----------------------------------------------------------------------------

def _texts(fig):
    out = []
    for ax in fig.axes:
        out += [ax.get_xlabel(), ax.get_ylabel(), ax.get_title()]
        out += [t.get_text() for t in ax.texts]
        out += [t.get_text() for t in ax.get_xticklabels()]
    out += [t.get_text() for t in fig.texts]
    return out


def test_access_figure_has_axes_labels_bands_and_one_scale():
    from elflayout.report import access
    from elflayout.report import data as D

    _, doc = D.load(RESULTS)
    fig = access.results_figure(doc, {"llc": LIB, "opt": LIB})
    try:
        texts = _texts(fig)
        assert "time since exec (ms)" in texts and "file offset (MB)" in texts
        for name in (".rela.dyn", ".text", ".rodata", ".data.rel.ro", ".data"):
            assert name in texts, name
        assert any(t.startswith(".dynsym") for t in texts)
        main = [ax for ax in fig.axes if ax.get_xlabel() == "time since exec (ms)"]
        assert len(main) == 2  # llc and opt side by side
        assert main[0].get_xlim() == main[1].get_xlim() and main[0].get_ylim() == main[1].get_ylim()
        # The y range covers the whole file (123 MB).
        assert main[0].get_ylim()[1] >= 123.3
        assert any("pages read" in t and "seeks" in t and "read efficiency" in t for t in texts)
        # Band labels do not overlap each other.
        fig.canvas.draw()
        r = fig.canvas.get_renderer()
        labels = [t for ax in fig.axes for t in ax.texts if t.get_text().startswith(".")]
        from matplotlib.text import Text

        assert len(labels) >= 7
        # Text.get_window_extent: the label itself, without the annotation's leader line.
        boxes = sorted((Text.get_window_extent(t, r) for t in labels), key=lambda b: b.y0)
        for a, b in zip(boxes, boxes[1:]):
            assert a.y1 <= b.y0 + 0.5, (a, b)
    finally:
        import matplotlib.pyplot as plt

        plt.close(fig)


def test_plot_cli_png_and_svg(tmp_path):
    png = tmp_path / "a.png"
    run_cli("plot", RESULTS, "-o", png, check=0)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    svg = tmp_path / "a.svg"
    run_cli("plot", RESULTS, "--variant", "opt", "--state", "selective", "--run", "0", "-o", svg, check=0)
    text = svg.read_text()
    for s in ("file offset (MB)", "time since exec (ms)", ".rela.dyn", ".text", ".data.rel.ro", "opt · selective · run 0"):
        assert s in text, s
    assert "llc · selective" not in text
    # -o never replaces without --force
    r = run_cli("plot", RESULTS, "-o", svg)
    assert r.returncode == 2 and "--force" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    run_cli("plot", RESULTS, "-o", svg, "--force", "--kind", "timing", check=0)
    assert "wall time (ms)" in svg.read_text()


def test_timing_violin_labels():
    from elflayout.report import data as D
    from elflayout.report import timing

    _, doc = D.load(RESULTS)
    fig = timing.violin_figure(doc, "pages_read")
    try:
        texts = _texts(fig)
        assert "pages read (pages)" in texts
        assert {"selective", "hot"} <= set(texts)
        assert any(t.startswith("llc\nn=4") for t in texts) and any(t.startswith("opt\nn=4") for t in texts)
        assert all(ax.get_xlabel() == "variant" for ax in fig.axes)
    finally:
        import matplotlib.pyplot as plt

        plt.close(fig)


def test_prediction_band_flags_a_step():
    from elflayout.report import timing

    assert timing.prediction_band([1, 2, 3]) is None  # too short
    m, lo, hi = timing.prediction_band([5] * 7 + [6])  # constant history: zero width, any change is out
    assert np.isnan(m[:6]).all() and lo[6] == hi[6] == 5 and lo[7] == hi[7] == 5 and not (lo[7] <= 6 <= hi[7])
    rng = np.random.default_rng(3)
    y = 100 + rng.normal(0, 1, 40)
    y[30] += 15
    mean, lo, hi = timing.prediction_band(y)
    assert len(mean) == 41 and np.isnan(mean[:6]).all() and not np.isnan(mean[6:]).any()
    with np.errstate(invalid="ignore"):
        outside = np.flatnonzero((y < lo[:40]) | (y > hi[:40]))
    assert 30 in outside
    assert len(outside) <= 4  # the 95% interval should not flag much else
    # Out of sample: the interval for point 30 comes from points 0..29 only.
    assert lo[30] < y[:30].mean() < hi[30] < y[30]


def test_history_plot_from_json(tmp_path):
    src = _write({"series": [{"name": "wall", "unit": "ms", "values": [10, 11, 10.5, 10.2, 10.8, 30, 10.4]}]},
                 tmp_path / "h.json")
    out = tmp_path / "h.svg"
    run_cli("plot", "--kind", "history", src, "-o", out, check=0)
    t = out.read_text()
    assert "entry in history" in t and "wall (ms)" in t and "prediction interval" in t
    bad = _write({"series": [{"name": "x", "values": ["a"]}]}, tmp_path / "bad.json")
    r = run_cli("plot", "--kind", "history", bad, "-o", tmp_path / "b.png")
    assert r.returncode == 2 and "non-numeric" in r.stderr


def test_profile_plot(tmp_path):
    from elflayout.report import access
    from elflayout.report import data as D

    kind, doc = D.load(PROFILE)
    assert kind == "profile"
    t = doc.targets[0]
    t.extra["elf_sections"] = [{"name": ".text", "offset": 0x1000, "size": 0x3000000},
                         {"name": ".rela.dyn", "offset": 0x3001000, "size": 0x100000}]
    fig = access.profile_figure(t)
    try:
        texts = _texts(fig)
        assert "first-access sequence number" in texts and "file offset (MB)" in texts
        assert ".text" in texts and ".rela.dyn" in texts
        assert any("pages touched of" in s for s in texts)
    finally:
        import matplotlib.pyplot as plt

        plt.close(fig)
    out = tmp_path / "p.png"
    run_cli("plot", PROFILE, "-o", out, "--x", "time", check=0)
    assert out.stat().st_size > 10_000


# -- bad input -----------------------------------------------------------------------------

def test_plot_bad_inputs(tmp_path, capsys):
    from elflayout.cli import main

    def err(*args):
        # In-process (the same main() as the console script): a subprocess each is slow.
        capsys.readouterr()
        rc = main([str(a) for a in args])
        stderr = capsys.readouterr().err
        assert rc == 2, stderr
        lines = stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("elflayout: error: "), r.stderr
        assert "Traceback" not in stderr
        return lines[0]

    out = tmp_path / "o.png"
    assert "expected an elflayout-results or elflayout-profile" in err(
        "plot", _write({"format": "elflayout-order", "version": 1}, tmp_path / "w.json"), "-o", out)
    (tmp_path / "t.json").write_text("not json")
    assert "not valid JSON" in err("plot", tmp_path / "t.json", "-o", out)
    assert "no such file" in err("plot", tmp_path / "missing.json", "-o", out)
    assert "version" in err("plot", _write({"format": "elflayout-results", "version": 9}, tmp_path / "v.json"),
                            "-o", out)
    # Two traced files: --file is needed, and must name one of them.
    doc = _load(RESULTS)
    for r in doc["runs"]:
        r["files"]["/other/lib.so"] = copy.deepcopy(r["files"][LIB])
    two = _write(doc, tmp_path / "two.json")
    assert "--file" in err("plot", two, "-o", out)
    assert "/nope.so" in err("plot", two, "--file", "/nope.so", "-o", out)
    run_cli("plot", two, "--file", "/other/lib.so", "-o", out, check=0)
    assert "--variant" in err("plot", RESULTS, "--variant", "zzz", "-o", tmp_path / "z.png")
    assert "--state" in err("plot", RESULTS, "--state", "cold", "-o", tmp_path / "z.png")
    assert "--run 7" in err("plot", RESULTS, "--run", "7", "-o", tmp_path / "z.png")
    assert "image type" in err("plot", RESULTS, "-o", tmp_path / "z.txt")
    assert "has no runs" in err("plot", PROFILE, "--kind", "timing", "-o", tmp_path / "z.png")
    assert "html" in err("report", RESULTS, "-o", tmp_path / "r.txt")
    # Damaged documents: one line each, never a traceback.
    assert "run 0 is malformed" in err("report", _write({"format": "elflayout-results", "version": 1,
                                                         "runs": [1, 2]}, tmp_path / "m1.json"),
                                       "-o", tmp_path / "m.html")
    bad = _load(RESULTS)
    bad["runs"][1]["files"][LIB]["reads"] = [[0.1, 2]]
    assert "malformed 'reads'" in err("report", _write(bad, tmp_path / "m2.json"), "-o", tmp_path / "m.html")
    assert "targets[0].pages is not a list" in err("plot", _write({"format": "elflayout-profile", "version": 1,
                                                                   "metadata": {},
                                                                   "targets": [{"path": "/l.so", "pages": 5}]},
                                                                  tmp_path / "m3.json"),
                                          "-o", tmp_path / "m.png")
    assert not list(tmp_path.glob("z.*")) and not list(tmp_path.glob(".*.tmp"))


def test_cli_modules_do_not_import_matplotlib():
    code = ("import sys; import elflayout.report.plot_cli, elflayout.report.cli; "
            "print('matplotlib' in sys.modules, 'numpy' in sys.modules)")
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).parent.parent / "tools"))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert r.stdout.split() == ["False", "False"]


# -- report ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def report_html(tmp_path_factory):
    d = tmp_path_factory.mktemp("report")
    doc = _load(RESULTS)
    # Hostile strings from an input must come out escaped.
    doc["variants"][1]["command"] = "opt-16 --version </code><script>alert(1)</script>"
    doc["metadata"]["host"] = "<b>evil</b>"
    src = _write(doc, d / "r.json")
    out = d / "report.html"
    r = run_cli("report", src, PROFILE, "-o", out, check=0)
    assert "report.html" in r.stderr
    return out


def test_report_is_self_contained_and_escaped(report_html):
    h = report_html.read_text()
    assert h.startswith("<!DOCTYPE html>")
    assert "<script>alert(1)</script>" not in h and "&lt;script&gt;alert(1)&lt;/script&gt;" in h
    assert "<b>evil</b>" not in h
    # No network: scripts are inline (Plotly's own text names URLs it never fetches for
    # these plots: test_report_view checks the browser requests nothing); in the markup,
    # every src/href is a data URI or an in-page anchor; no <link>.
    assert not re.search(r"<script[^>]*\bsrc=", h)
    markup = re.sub(r"(<script[^>]*>).*?</script>", r"\1</script>", h, flags=re.S)
    for m in re.finditer(r'\b(?:src|href)="([^"]*)"', markup):
        assert m.group(1).startswith(("data:image/png;base64,", "#")), m.group(1)[:60]
    assert "<link" not in markup and "@import" not in markup and "url(" not in markup
    assert h.count("data:image/png;base64,") >= 3  # access pattern, violin, profile
    for s in ("Summary", "Where the bytes of libLLVM-16.so.1 go", ".data.rel.ro", "All comparisons",
              "Environment", "Profile: report-profile-llvm.json.gz"):
        assert s in h, s


def _chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if shutil.which(name):
            return shutil.which(name)
    pytest.skip("chromium is not installed (Debian package 'chromium')")


def _chrome(args, timeout=120):
    exe = _chromium()
    prof = tempfile.mkdtemp(prefix="elflayout-chromium-")
    try:
        return subprocess.run(
            [exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", "--no-first-run", "--enable-logging=stderr",
             "--v=0", f"--user-data-dir={prof}", *args],
            capture_output=True, text=True, timeout=timeout)
    finally:
        shutil.rmtree(prof, ignore_errors=True)


def test_report_renders_in_headless_chromium(report_html, tmp_path):
    r = _chrome(["--dump-dom", report_html.as_uri()])
    assert r.returncode == 0, r.stderr[-2000:]
    dom = r.stdout
    # The summary table is there, with a row per variant × state.
    m = re.search(r'<table class="sortable summary">.*?</table>', dom, re.S)
    assert m, dom[:2000]
    rows = re.findall(r"<tr>(.*?)</tr>", m.group(0), re.S)
    assert len(rows) == 1 + 4
    assert "wall ms (median)" in rows[0] and ">llc<" in rows[1]
    # No script errors in the page.
    assert "Uncaught" not in r.stderr, [ln for ln in r.stderr.splitlines() if "Uncaught" in ln]
    shot = tmp_path / "shot.png"
    r = _chrome([f"--screenshot={shot}", "--window-size=1366,900", report_html.as_uri()])
    assert shot.exists() and shot.stat().st_size > 20_000, r.stderr[-2000:]


def _summary_pages(h):
    table = re.search(r'<table class="sortable summary">.*?</table>', h, re.S).group(0)
    rows = re.findall(r"<tr>(.*?)</tr>", table, re.S)[1:]
    return [re.findall(r"<td[^>]*>", r)[5].split('data-v="')[1].split('"')[0] for r in rows]


def test_report_tables_sort_in_chromium(report_html, tmp_path):
    # Click the "pages read" header of the summary twice (descending) and read the DOM back.
    page = tmp_path / "click.html"
    click = ("<script>var th=[...document.querySelectorAll('table.summary th')]"
             ".find(h=>h.textContent==='pages read');th.click();th.click();</script></body>")
    page.write_text(report_html.read_text().replace("</body>", click))
    r = _chrome(["--dump-dom", page.as_uri()])
    assert "Uncaught" not in r.stderr
    table = re.search(r'<table class="sortable summary">.*?</table>', r.stdout, re.S).group(0)
    # 6th cell of each body row: pages read (data-v holds the number).
    rows = re.findall(r"<tr>(.*?)</tr>", table, re.S)[1:]
    vals = [float(re.findall(r"<td[^>]*>", r)[5].split('data-v="')[1].split('"')[0]) for r in rows]
    assert len(vals) == 4 and vals == sorted(vals, reverse=True) and vals[0] > 0
    assert vals != [float(v) for v in _summary_pages(report_html.read_text())]  # the click changed the order


# -- real output of `elflayout measure` (two builds, each variant reads its own library) --

EXAMPLE = DATA / "results-example.json"


def _example():
    if not EXAMPLE.exists():
        pytest.skip("tests/data/results-example.json (from elflayout measure) is not in this checkout")
    from elflayout.report import data as D

    return D.load(EXAMPLE)[1]


def test_two_builds_are_paired_side_by_side():
    from elflayout.report import access
    from elflayout.report import data as D

    doc = _example()
    plans = D.plans(doc, None, "ex")
    by = D.traced_by_variant(doc)
    assert len(plans) == 1
    plan = plans[0]
    assert set(plan) == set(D.variants(doc))
    assert len(set(plan.values())) == len(plan)  # a different file per variant
    assert all(plan[v] == by[v][0] for v in plan)
    fig = access.results_figure(doc, plan)
    try:
        texts = _texts(fig)
        main = [ax for ax in fig.axes if ax.get_xlabel() == "time since exec (ms)"]
        assert len(main) == 2 and main[0].get_ylim() == main[1].get_ylim()
        # Each build has its own layout, so each panel carries its own band labels.
        assert texts.count(".text") == 2 and texts.count(".rela.dyn") == 2
    finally:
        import matplotlib.pyplot as plt

        plt.close(fig)


@pytest.mark.slow
def test_two_builds_plot_and_report_cli(tmp_path):
    doc = _example()
    files = list(doc.files)
    out = tmp_path / "ab.svg"
    run_cli("plot", EXAMPLE, "--file", files[0], "--file", files[1], "-o", out, check=0)
    t = out.read_text()
    assert t.count("selective · run") == 2
    out = tmp_path / "one.svg"
    run_cli("plot", EXAMPLE, "--file", files[1], "-o", out, check=0)
    assert out.read_text().count("selective · run") == 1  # only the variant that read it
    rep = tmp_path / "r.html"
    run_cli("report", EXAMPLE, "-o", rep, check=0)
    h = rep.read_text()
    for v in doc.variant_names:
        assert f"{v}: read" in h  # per-section columns for both builds


def test_disturbed_runs_are_left_out_like_the_harness_does():
    from elflayout import results as model
    from elflayout.report import data as D

    doc = _load(RESULTS)
    res = model.parse(doc)
    sel = D.runs_of(res, "llc", "selective")
    k0, median_run = D.pick_run(res, "llc", "selective", LIB)
    median_run.raw["interference"] = f"{LIB}: 5 pages resident after the run but 0 read by it"
    res = model.parse(doc)
    median_run = D.runs_of(res, "llc", "selective")[k0]
    k1, _ = D.pick_run(res, "llc", "selective", LIB)
    assert k1 != k0  # the flagged run is no longer the representative one
    assert D.disturbed(median_run, LIB) and not D.disturbed(median_run, "/other.so")
    assert D.values(res, "llc", "selective", "wall_s").size == len(sel) - 1
    assert D.values(res, "llc", "selective", "wall_s", disturbed_runs=True).tolist() == [median_run.wall_s]
    for r in sel:
        r.raw["interference"] = ["x"]
    assert D.pick_run(model.parse(doc), "llc", "selective", LIB) is not None  # all flagged: still something to draw


@pytest.mark.slow
def test_history_plot_from_the_history_database(tmp_path):
    history = pytest.importorskip("elflayout.measure.history")
    from elflayout import results as model
    from elflayout.report import data as D

    db = tmp_path / "h.sqlite"
    base = _load(RESULTS)
    con = history.connect(db)
    for i, f in enumerate([1.0, 1.01, 0.99, 1.005, 1.02, 0.98, 0.995, 1.015, 1.6]):  # distinct: add dedupes
        doc = copy.deepcopy(base)
        doc["metadata"]["started"] = f"2026-01-{i + 1:02d}T00:00:00Z"
        for r in doc["runs"]:
            r["wall_s"] *= f
        # Plain means as the summary (what history stores), without the bootstrap's cost.
        res = model.parse(doc)
        doc["summary"] = [{"variant": v, "state": st, "metric": "wall_s", "n": len(x), "mean": float(x.mean()),
                           "median": float(np.median(x))}
                          for v in D.variants(res) for st in D.states(res)
                          for x in [D.values(res, v, st, "wall_s")]]
        history.add(con, doc, f"r{i}.json")
    con.close()
    before = db.read_bytes()
    out = tmp_path / "h.svg"
    run_cli("plot", db, "--variant", "llc", "--state", "selective", "-o", out, check=0)
    t = out.read_text()
    assert "llc · selective · wall time" in t and "opt ·" not in t
    assert "wall time (ms)" in t and "outside the interval" in t  # the 1.6× session
    assert db.read_bytes() == before  # plotting never writes to the database
    r = run_cli("plot", db, "--metric", "nonsense", "-o", tmp_path / "x.png")
    assert r.returncode == 2 and "--metric" in r.stderr
    # ... and in the report, for the variants of the results given.
    rep = tmp_path / "r.html"
    run_cli("report", RESULTS, "--history", db, "-o", rep, check=0)
    h = rep.read_text()
    assert 'id="history"' in h and h.count("data:image/png") >= 4 and "no history for metric pages_read" in h
    assert db.read_bytes() == before


def test_report_without_traces_says_so(tmp_path):
    doc = _load(RESULTS)
    for r in doc["runs"]:
        for f in r["files"].values():
            f.pop("reads", None)
            f.pop("faults", None)
    src = _write(doc, tmp_path / "notrace.json")
    out = tmp_path / "r.html"
    run_cli("report", src, "-o", out, check=0)
    h = out.read_text()
    assert "no access-pattern plot" in h and 'class="sortable summary"' in h
    r = run_cli("plot", src, "-o", tmp_path / "x.png")
    assert r.returncode == 2 and "tracing" in r.stderr


def test_report_names_the_access_figures_it_leaves_out(tmp_path, monkeypatch):
    import html as htmllib
    import shlex

    from elflayout.cli import main
    from elflayout.fileio import envelope
    from elflayout import results as model
    from elflayout.report import html

    files = [f"/lib/l{i}.so" for i in range(3)]
    runs = [{"variant": "v", "state": "selective", "round": k, "seq": k, "wall_s": 0.01,
             "files": {p: {"pages_read": 2 + i, "reads": [[0.001, 0, 2 + i]], "faults": [[0.002, 0]]}
                       for i, p in enumerate(files)}} for k in range(2)]
    src = _write(envelope("results", 1, {"files": {}}, variants=[{"name": "v", "command": "true"}], runs=runs),
                 tmp_path / "many.json")
    monkeypatch.setattr(html, "MAX_ACCESS_FIGURES", 1)
    h = html.results_section(str(src), model.read(src), 0)
    assert h.count("Where the bytes of") == 1 and "Where the bytes of l2.so" in h  # most pages read first
    assert "2 more access-pattern figure(s) not shown: this report draws the first 1 of 3" in h
    cmds = [htmllib.unescape(c) for c in re.findall(r"<li><code>(elflayout plot [^<]*)</code></li>", h)]
    assert sorted(shlex.split(c)[4] for c in cmds) == ["/lib/l0.so", "/lib/l1.so"]
    args = shlex.split(cmds[0])[1:]  # the command draws what was left out
    args[args.index("-o") + 1] = str(tmp_path / "left.png")
    assert main(args) == 0 and (tmp_path / "left.png").stat().st_size > 1000


# -- real outputs of `elflayout measure` and `elflayout profile` (libpython, before/after
# -- reordering; see tests/data/report-README.md) ------------------------------------------

PY_RESULTS = DATA / "report-results-python.json.gz"
PY_PROFILE = DATA / "report-profile-python.json.gz"


def test_python_reordering_figures_and_sequence_axis():
    from elflayout.report import access
    from elflayout.report import data as D

    _, doc = D.load(PY_RESULTS)
    plan = D.choose_plan(doc, None, "py")
    assert list(plan) == ["before", "ordered"] and len(set(plan.values())) == 2
    panels, state = access.results_panels(doc, plan)
    assert state == "selective"
    # The recorded figures of the harness agree with what the plot recomputes.
    for p in panels:
        run = D.pick_run(doc, p.variant, state, p.path)[1]
        f = run.files[p.path]
        assert p.acc.pages_read == f.pages_read and p.acc.seeks == f.seeks
        assert D.count_seeks(p.acc.page, p.acc.npages) == f.seeks
    # Reordering: fewer seeks after.
    assert panels[1].acc.seeks < panels[0].acc.seeks
    fig = access.results_figure(doc, plan, x="sequence")
    try:
        main = [ax for ax in fig.axes if ax.get_xlabel() == "read number (reads in order)"]
        assert len(main) == 2
        assert main[0].get_xlim()[1] >= max(p.acc.t.size for p in panels) - 1
    finally:
        import matplotlib.pyplot as plt

        plt.close(fig)


def test_valgrind_profile_plot_kinds():
    from elflayout.report import access
    from elflayout.report import data as D

    _, doc = D.load(PY_PROFILE)
    t = doc.targets[0]
    fig = access.profile_figure(t)
    try:
        texts = _texts(fig)
        legend = [x.get_text() for x in fig.legends[0].get_texts()]
        kinds = {p.kind for p in t.pages}
        assert {"x", "r", "w"} <= kinds
        for k in ("executed", "read", "written"):
            n = sum(p.kind == k[0] if k != "executed" else p.kind == "x" for p in t.pages)
            assert f"{k}: {n:,} pages" in legend
        # Bands come from the profiled file when it is still there (its own .text) and
        # from the profile's functions when it is not (.text/.text.hot): both name .text.
        assert "first-access sequence number" in texts
        assert any(".text" in s.split("/") for s in texts)
    finally:
        import matplotlib.pyplot as plt

        plt.close(fig)


def test_python_report_renders(tmp_path):
    out = tmp_path / "py.html"
    run_cli("report", PY_RESULTS, PY_PROFILE, "-o", out, check=0)
    h = out.read_text()
    assert "ordered: read" in h and "before: read" in h and "libpython3.11.so.1.0" in h
    assert "x: read number" in h and h.count('<script type="application/json" class="elv-data"') == 1  # static sequence image, interactive view
    # The headline gives the before → after of the pages read, from the runs themselves.
    from elflayout.report import data as D

    _, doc = D.load(PY_RESULTS)
    a, b = (np.median(D.values(doc, v, "selective", "pages_read", D.traced_files(doc))) for v in ("before", "ordered"))
    assert f"pages read {a:,.0f} → {b:,.0f}" in h
    r = _chrome(["--dump-dom", out.as_uri()])
    assert "Uncaught" not in r.stderr and 'class="sortable summary"' in r.stdout


def test_sections_bar_known_answer_and_cli(tmp_path):
    from elflayout.report import access
    from elflayout.report import data as D

    bands = D.bands([{"name": ".rela.dyn", "offset": 0, "size": 2 * 4096},
                     {"name": ".text", "offset": 2 * 4096, "size": 4 * 4096}])
    assert D.family_pages(bands, np.array([0, 1, 1, 2, 5, 9])) == {"relocations": 2, "code": 2, "other": 1}
    _, doc = D.load(PY_RESULTS)
    panels, _ = access.results_panels(doc, D.choose_plan(doc, None, "py"))
    fig = access.sections_figure(panels)
    try:
        texts = _texts(fig)
        for p in panels:
            assert f"{p.acc.pages_read:,} pages ({p.acc.bytes_read / 1e6:,.1f} MB)" in texts
        legend = [t.get_text() for ax in fig.axes if ax.get_legend() for t in ax.get_legend().get_texts()]
        assert {"relocations", "code", "read-only data"} <= set(legend)
        assert fig.axes[0].get_xlabel().startswith("pages read, by section family")
        # The family split adds up to the distinct pages read.
        for p in panels:
            assert sum(D.family_pages(p.bands, p.acc.read_pages()).values()) == np.unique(p.acc.read_pages()).size
    finally:
        import matplotlib.pyplot as plt

        plt.close(fig)
    out = tmp_path / "s.svg"
    run_cli("plot", PY_RESULTS, "--kind", "sections", "-o", out, check=0)
    assert "pages read, by section family" in out.read_text()
