"""The report's interactive access view (report/interactive.py, interactive.js) and the
report's first screen: its data without a browser, bad input, and a real headless
Chromium driven by Selenium (hover, click, zoom, screenshot).

Inputs are the real recordings of tests/data (report-README.md): libpython 3.11 before
and after ordering, with the valgrind profile of the `before` build.
"""

import copy
import gzip
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from conftest import run_cli

DATA = Path(__file__).parent / "data"
PY_RESULTS = DATA / "report-results-python.json.gz"
PY_PROFILE = DATA / "report-profile-python.json.gz"
LLVM_RESULTS = DATA / "report-results-llvm.json.gz"


def _py():
    from elflayout.report import data as D

    _, res = D.load(PY_RESULTS)
    _, prof = D.load(PY_PROFILE)
    return res, prof, D.choose_plan(res, None, "py")


# -- data --------------------------------------------------------------------------------

def test_view_data_attributes_reads_to_the_profile_of_the_same_build():
    from elflayout.report import access
    from elflayout.report import data as D
    from elflayout.report import interactive

    res, prof, plan = _py()
    v = interactive.view_data(res, plan, [(str(PY_PROFILE), prof)])
    before, ordered = v["panels"]
    assert (before["variant"], ordered["variant"]) == ("before", "ordered")
    # `before` is the profiled build: every profiled function with an offset is there
    t = prof.targets[0]
    assert len(before["attr"]["f"]) == sum(f.offset is not None for f in t.functions) > 1000
    assert not before["notes"]
    # `ordered` is another build: no attribution (its offsets would name the wrong code), and it says so
    assert ordered["attr"] is None and "another build" in ordered["notes"][0] and t.build_id in ordered["notes"][0]
    # the reads are those of the run the static plot draws, in time order
    panels, state = access.results_panels(res, plan)
    assert v["state"] == state == "selective"
    for p, q in zip((before, ordered), panels):
        assert p["reads"]["p"] == q.acc.page.tolist() and p["reads"]["n"] == q.acc.npages.tolist()
        assert p["counts"]["pages_read"] == q.acc.pages_read and p["counts"]["touched_total"] == q.acc.touched
        assert sum(p["counts"]["read"].values()) == np.unique(q.acc.read_pages()).size
        # a line per seek, as the harness counts them (and not one per pair of reads)
        assert len(p["reads"]["seeks"]["i"]) == D.count_seeks(q.acc.page, q.acc.npages) == q.acc.seeks
        # the axis ends with the mapped part, before the symbol tables of this unstripped build
        assert p["mapped_end"] < res.files[p["path"]]["size"]


def test_view_says_a_trace_profile_names_no_functions(monkeypatch):
    from elflayout.elfcore import ElfImage
    from elflayout.report import data as D
    from elflayout.report import interactive

    _, res = D.load(LLVM_RESULTS)
    _, prof = D.load(DATA / "report-profile-llvm.json.gz")  # the same libLLVM-16, trace backend: pages only
    # the library on disk is another build (or absent): its symbols cannot stand in for the profile's
    monkeypatch.setattr(ElfImage, "identity", lambda self: {"build_id": "0" * 40})
    v = interactive.view_data(res, D.plans(res, None, "r")[0], [("p.json", prof)])
    for p in v["panels"]:
        assert p["attr"] is None and "names no functions" in p["notes"][0]
        assert "reads are not attributed to functions" in p["notes"][0]


def test_view_decimates_with_a_note(monkeypatch):
    from elflayout.report import interactive

    res, prof, plan = _py()
    monkeypatch.setattr(interactive, "MAX_READS", 100)
    p = interactive.view_data(res, plan, [(str(PY_PROFILE), prof)])["panels"][0]
    n = p["total_reads"]
    k = -(-n // 100)
    assert len(p["reads"]["t"]) <= 100 and p["reads"]["i"][:2] == [0, k]
    assert any(f"{n:,} reads: every {k}th drawn" in x for x in p["notes"])


def test_view_says_why_in_place_of_the_plot(tmp_path, monkeypatch):
    from elflayout import results as model
    from elflayout.report import data as D
    from elflayout.report import html
    from elflayout.report import interactive

    doc = json.loads(gzip.decompress(LLVM_RESULTS.read_bytes()))
    for r in doc["runs"]:  # every selective run of opt disturbed
        if r["variant"] == "opt" and r["state"] == "selective":
            r["interference"] = [{"file": f, "pid": 1, "comm": "updatedb"} for f in r["files"]]
    res = model.parse(copy.deepcopy(doc), "d.json")
    plan = D.plans(res, None, "d.json")[0]
    v = interactive.view_data(res, plan, [])
    llc, opt = v["panels"]
    assert "reads" in llc and "every selective run of opt was disturbed" in opt["missing"]
    # a plan naming a variant without runs, and damaged sections: notes, never an exception
    v = interactive.view_data(res, {"nosuch": plan["llc"]}, [], state="selective")
    assert v["panels"][0]["missing"] == "no selective run of nosuch"
    h = html.results_section("d.json", res, 0)
    assert 'class="elv-data"' in h
    # without plotly the report still renders, and says why there is no interactive view
    monkeypatch.setattr(interactive, "plotly_js", lambda: None)
    h = html.results_section("d.json", res, 0)
    assert "plotly is not installed" in h and 'class="elv-data"' not in h and "data:image/png" in h


# -- the report's first screen and its verdicts -----------------------------------------

def test_decided_by_names_the_test_and_exact_counts():
    from elflayout.report import html

    c = {"metric": "wall_s", "test": "paired t, log", "p_value": 0.00065, "p_adjusted": 0.0013, "p_welch": 0.115,
         "verdict": "faster", "deterministic": False, "warnings": []}
    assert html.decided_by(c) == "paired t, log, p = 0.00065 (Holm 0.0013)"
    c = {"metric": "pages_read", "test": "exact (deterministic)", "deterministic": True, "verdict": "fewer",
         "warnings": ["fewer than 4 runs per side (3 and 3): the verdict is not reliable", "spread changed"]}
    assert html.decided_by(c) == "exact" and html.warnings_of(c) == ["spread changed"]
    c = {"metric": "wall_s", "test": None, "verdict": "too few runs", "warnings": []}
    assert html.decided_by(c) == ""


def test_report_opens_with_headline_and_access_view():
    from elflayout.report import html

    res, prof, _ = _py()
    h = html.results_section(str(PY_RESULTS), res, 0, [(str(PY_PROFILE), prof)])
    head, view, summary = h.index('<ul class="headline">'), h.index('class="elv-data"'), h.index("<h3>Summary</h3>")
    assert head < view < summary
    assert "<details><summary>All comparisons</summary>" in h and "<details open>" not in h
    # page counts of these runs are deterministic: "exact", as compare says, and no
    # "not reliable (fewer than 4 runs)" beside them; times keep their caution
    comp = h[h.index("All comparisons"):]
    comp = comp[:comp.index("</table>")]
    rows = {r.split("</td>")[0].split(">")[-1] + r.split("</td>")[2].split(">")[-1]: r
            for r in comp.split("<tr>")[2:]}
    assert ">exact<" in rows["pages_readselective"] and "not reliable" not in rows["pages_readselective"]
    assert "not reliable" in rows["wall_sselective"]
    assert 'pages read: fewer ×0.959</span> <span class="ci">(exact)</span>' in h


def test_plots_span_the_mapped_part_not_the_symbol_tables():
    from elflayout.report import access

    res, prof, plan = _py()
    t = prof.targets[0]
    figs = [access.profile_figure(t), access.results_figure(res, plan)]
    try:
        top = [figs[0].axes[0].get_ylim()[1]] + [ax.get_ylim()[1] for ax in figs[1].axes
                                                 if ax.get_xlabel() == "time since exec (ms)"]
        panels, _ = access.results_panels(res, plan)
        mapped = max(b.end for p in panels for b in p.bands if b.family != "not loaded") / 1e6
        size = min(p.size for p in panels) / 1e6
        assert len(top) == 3 and all(mapped <= y < size for y in top), (top, mapped, size)
    finally:
        import matplotlib.pyplot as plt

        for f in figs:
            plt.close(f)


# -- a real browser ----------------------------------------------------------------------

def _driver():
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service

    chromium, chromedriver = shutil.which("chromium"), shutil.which("chromedriver")
    if not chromium or not chromedriver:
        pytest.skip("needs Debian's chromium and chromium-driver")
    o = webdriver.ChromeOptions()
    o.binary_location = chromium
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1400,1100",
              "--use-angle=swiftshader", "--enable-unsafe-swiftshader", "--disable-background-networking"):
        o.add_argument(a)
    o.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(chromedriver), options=o)


# Pixel position (relative to the plot div) of every read and fault of the first panel.
_PIXELS = """
var v = window.elflayoutViews['elv0-0'], gd = v.plot, fl = gd._fullLayout, xa = fl.xaxis, ya = fl.yaxis;
var p = v.panels[v.state.shown[0]], r = p.reads;
function X(t) { return xa._offset + xa.l2p(t); } function Y(m) { return ya._offset + ya.l2p(m); }
return {variant: p.variant, p: r.p, n: r.n, fp: r.fp, x: r.t.map(X), y: p.mid.map(Y), fx: r.ft.map(X),
        fy: r.fp.map(function (q) { return Y((q + 0.5) * 4096 / 1e6); }), w: gd.clientWidth, h: gd.clientHeight,
        yrange: fl.yaxis.range.slice(), xrange: fl.xaxis.range.slice()};
"""


def _candidates(px: dict, landed: list[dict], attr: list | None = None, isolated=True, only=None):
    """One-page reads on screen with at most 6 profiled functions in them (the tooltip
    names 6; ``attr``: the view's own rows, when they can hold more than check-order
    places), one of them placed by check-order: (read, that function). ``isolated``: no
    other read within 10 px, and a fault that close only of the same page (its tooltip
    names the same functions)."""
    reads = np.array([px["x"], px["y"]]).T
    faults = np.array([px["fx"], px["fy"]]).T.reshape(-1, 2)
    for i, (pg, n) in enumerate(zip(px["p"], px["n"])):
        if only is not None and i != only:
            continue
        a, b = pg * 4096, (pg + n) * 4096
        inside = [f for f in landed if f["offset"] < b and f["offset"] + max(f["size"], 1) > a]
        shown = inside if attr is None else [r for r in attr if r[0] < b and r[0] + r[1] > a]
        if n != 1 or not inside or len(shown) > 6:
            continue
        d = np.hypot(*(reads - reads[i]).T)
        d[i] = np.inf
        near = np.hypot(*(faults - reads[i]).T) <= 10
        same = all(px["fp"][j] == pg for j in np.flatnonzero(near))
        if not isolated or (d.min() > 10 and same and 20 < px["x"][i] < px["w"] - 20 and 20 < px["y"][i] < px["h"] - 20):
            yield i, min(inside, key=lambda f: f["rank"])


_ZOOM_TO = """
var v = window.elflayoutViews['elv0-0'], p = v.panels[v.state.shown[0]], i = arguments[0], f = arguments[1];
var fl = v.plot._fullLayout, dx = (fl.xaxis.range[1] - fl.xaxis.range[0]) * f, dy = (fl.yaxis.range[1] - fl.yaxis.range[0]) * f;
return Plotly.relayout(v.plot, {'xaxis.range': [p.reads.t[i] - dx, p.reads.t[i] + dx],
                                'yaxis.range': [p.mid[i] - dy, p.mid[i] + dy]}).then(function () { return true; });
"""


_GL = """
var gd = window.elflayoutViews['elv0-0'].plot, c = gd.querySelector('canvas');
return {points: gd._fullData.filter(function (t) { return t.mode === 'markers'; }).map(function (t) { return t.type; }),
        canvas: c && c.width, plot: Math.round(gd._fullLayout.width * (window.devicePixelRatio || 1))};
"""


def _hover(d, landed, attr=None, zoom=False):
    """Hover, with a real mouse, a read _candidates finds in the first panel: (pixels,
    read, function, tooltip text). ``zoom``: where reads are too dense to be told apart
    (libLLVM), zoom around a candidate until it stands alone."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    WebDriverWait(d, 60).until(lambda d: d.execute_script("return !!window.elflayoutViews['elv0-0']"))
    plot = d.find_element(By.ID, "elv0-0-plot")
    d.execute_script("arguments[0].scrollIntoView({block: 'center'})", plot)
    px = d.execute_script(_PIXELS)
    got = next(_candidates(px, landed, attr), None)
    for i, _ in [] if got or not zoom else list(_candidates(px, landed, attr, isolated=False))[:20]:
        d.execute_script(_ZOOM_TO, i, 0.02)
        px = d.execute_script(_PIXELS)
        got = next(_candidates(px, landed, attr, only=i), None)
        if got:
            break
    if got is None:
        pytest.fail("no isolated read holding a function check-order placed")
    i, f = got
    ActionChains(d).move_to_element_with_offset(plot, int(px["x"][i] - px["w"] / 2),
                                                int(px["y"][i] - px["h"] / 2)).perform()
    tip = WebDriverWait(d, 20).until(lambda d: d.find_elements(By.CSS_SELECTOR, "#elv0-0-plot .hovertext"))
    return px, i, f, tip[0].get_attribute("textContent")


@pytest.mark.slow
def test_view_in_headless_chromium(tmp_path):
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    from elflayout.report import data as D

    res, prof, plan = _py()
    lib = plan["before"]
    if not Path(lib).is_file():
        pytest.skip(f"{lib} (the profiled build, tests/data/report-README.md) is not in the cache")
    r = run_cli("check-order", lib, "--profile", PY_PROFILE, "--json", check=0)
    landed = [x for x in json.loads(r.stdout)["landed"] if x["offset"] is not None]
    out = tmp_path / "view.html"
    run_cli("report", PY_RESULTS, PY_PROFILE, "-o", out, check=0)
    d = _driver()
    try:
        d.get(out.as_uri())
        px, i, f, text = _hover(d, landed)
        plot = d.find_element(By.ID, "elv0-0-plot")
        assert px["variant"] == "before"
        assert f"{px['p'][i]:,}" in text and f["name"] in text, (f, text)
        assert f["output_section"] in text  # the page's section
        # a click keeps the details, with the object of each function
        ActionChains(d).click().perform()
        info = d.find_element(By.ID, "elv0-0-info").get_attribute("textContent")
        assert f["name"] in info and "function(s) in these pages" in info
        # zoom: drag a box over the middle of the first panel; both panels share the offset axis
        x0, y0 = int(px["w"] * 0.12 - px["w"] / 2), int(px["h"] * 0.3 - px["h"] / 2)
        ActionChains(d).move_to_element_with_offset(plot, x0, y0).click_and_hold().move_by_offset(
            int(px["w"] * 0.2), int(px["h"] * 0.25)).release().perform()
        WebDriverWait(d, 20).until(lambda d: d.execute_script(_PIXELS)["yrange"] != px["yrange"])
        z = d.execute_script(_PIXELS)
        assert z["yrange"][1] - z["yrange"][0] < 0.5 * (px["yrange"][1] - px["yrange"][0])
        assert d.execute_script("return window.elflayoutViews['elv0-0'].plot._fullData"
                                ".every(function (t) { return t.yaxis === 'y'; })")
        # the "where the pages go" bar: a click on `before`'s code zooms the access view to its band
        k = d.execute_script("return window.elflayoutViews['elv0-0'].bar.data.filter(function (t) "
                             "{ return t.type === 'bar'; }).findIndex(function (t) { return t.meta.family === 'code'; })")
        seg = d.find_elements(By.CSS_SELECTOR, "#elv0-0-bar g.trace.bars")[k].find_elements(By.CSS_SELECTOR, "path")[0]
        d.execute_script("arguments[0].scrollIntoView({block: 'center'})", seg)
        ActionChains(d).move_to_element(seg).click().perform()
        code = [b for b in D.bands(D.sections_of(res, lib)) if b.family == "code"]
        want = [min(b.start for b in code) / 1e6, max(b.end for b in code) / 1e6]
        WebDriverWait(d, 20).until(lambda d: np.allclose(d.execute_script(_PIXELS)["yrange"], want))
        shot = tmp_path / "report-view.png"
        d.save_screenshot(str(shot))
        assert shot.stat().st_size > 30_000
        errors = [e for e in d.get_log("browser") if e["level"] == "SEVERE"]
        assert not errors, errors
        # nothing fetched: the page and its scripts are one file
        fetched = d.execute_script("return performance.getEntriesByType('resource').map(function (e) { return e.name; })")
        assert all(u.startswith("data:") for u in fetched), fetched
        print(f"screenshot: {shot}")
    finally:
        d.quit()


LLVM_LIB = "/usr/lib/x86_64-linux-gnu/libLLVM-16.so.1"  # Debian's, the build the recording read


@pytest.mark.slow
def test_libllvm_tooltip_names_the_function_check_order_places(tmp_path):
    """libLLVM-16 with its page-only profile: the tooltip names functions from the
    library's own .dynsym, and for a page the test picks, the one check-order places there."""
    from elflayout.elfcore import ElfImage
    from elflayout.report import data as D
    from elflayout.report import interactive

    _, res = D.load(LLVM_RESULTS)
    _, prof = D.load(DATA / "report-profile-llvm.json.gz")
    plan = D.plans(res, None, "r")[0]
    if set(plan.values()) != {LLVM_LIB} or not Path(LLVM_LIB).is_file():
        pytest.skip(f"needs {LLVM_LIB} (Debian's llvm-16)")
    with ElfImage(LLVM_LIB) as img:
        if img.identity()["build_id"] != prof.targets[0].build_id:
            pytest.skip(f"{LLVM_LIB} is not the build the recording read")
    v = interactive.view_data(res, plan, [("p.json", prof)])
    attr = v["panels"][0]["attr"]
    assert "library's own .dynsym" in attr["label"] and len(attr["f"]) > 1000
    # check-order places these names in the library by its symbol table: a profile of them, in this order
    doc = {"format": "elflayout-profile", "version": 1, "metadata": {},
           "targets": [{"path": LLVM_LIB, "build_id": prof.targets[0].build_id,
                        "functions": [{"name": r[2], "first": k} for k, r in enumerate(attr["f"])]}]}
    names = tmp_path / "names.json"
    names.write_text(json.dumps(doc))
    r = run_cli("check-order", LLVM_LIB, "--profile", names, "--json", check=0)
    landed = [x for x in json.loads(r.stdout)["landed"] if x["offset"] is not None]
    assert len(landed) > 1000
    out = tmp_path / "llvm.html"
    run_cli("report", LLVM_RESULTS, DATA / "report-profile-llvm.json.gz", "-o", out, check=0)
    d = _driver()
    try:
        d.get(out.as_uri())
        px, i, f, text = _hover(d, landed, attr["f"], zoom=True)
        assert px["variant"] == "llc" and f"{px['p'][i]:,}" in text
        assert f["name"] in text and "library's own .dynsym" in text, (f, text)
        # what keeps a zoom of 10,000s of reads fast: every point set in WebGL, whose canvases
        # have the screen's pixels (Plotly's default is twice: 4x the raster work without a GPU)
        gl = d.execute_script(_GL)
        assert gl["points"] and all(t == "scattergl" for t in gl["points"]) and gl["canvas"] == gl["plot"], gl
        assert not [e for e in d.get_log("browser") if e["level"] == "SEVERE"]
    finally:
        d.quit()
