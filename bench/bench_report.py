#!/usr/bin/env python3
"""The HTML report's interactive access view in a real browser: file size, time to open,
zoom latency (targets: open ≤ 3 s, zoom ≤ 200 ms on a libLLVM-16 start-up).

Builds ``elflayout report`` from a results file (default: tests/data's recording of
Debian's libLLVM-16 read by ``llc-16 --version`` and ``opt-16 --version``, every read and
fault traced: ~12,700 reads per run), opens it in headless Chromium (Debian's chromium
and chromium-driver, through Selenium) N times, and prints:

- the report's size, and how much of it is Plotly and the view's data;
- open: from navigation start until every view (access plot and bar) is drawn;
- zoom: Plotly relayout of the shared offset axis to a new range, until the next frame
  is painted (median and worst of several zooms, WebGL via SwiftShader: no GPU).

    python3 bench/bench_report.py [RESULTS.json [PROFILE.json ...]] [--runs 5] [--variants 5]
    python3 bench/bench_report.py --html before.html --html after.html [--runs 5]

``--html`` measures reports already built (e.g. by two versions of elflayout), their
loads alternating so that both see the same machine.

``--variants 5`` stands in for ``elflayout demo --big``'s five libLLVM variants (debian,
baseline, ordered, packed, ordered+packed) when no such results file is at hand: the
recording's variants are repeated under new names up to that count (the same reads
each time, so the size and the work of the page are those of five real variants).

The machine's load average is printed with the figures: on a shared machine they vary.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import ROOT, cli  # noqa: E402

DEFAULT = ROOT / "tests" / "data" / "report-results-llvm.json.gz"

# Zoom the shared offset axis to a range and resolve after the next painted frame.
ZOOM_JS = """
var done = arguments[arguments.length - 1], v = Object.values(window.elflayoutViews)[0], lo = arguments[0], hi = arguments[1];
var t0 = performance.now();
Plotly.relayout(v.plot, {'yaxis.range': [lo, hi]}).then(function () {
  requestAnimationFrame(function () { requestAnimationFrame(function () { done(performance.now() - t0); }); });
});
"""

OPENED_JS = """
var vs = Object.values(window.elflayoutViews || {});
if (!vs.length || vs.some(function (v) { return !v.timing; })) return null;
return Math.max.apply(null, vs.map(function (v) { return v.timing.bar; }));
"""


def driver():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    o = webdriver.ChromeOptions()
    o.binary_location = shutil.which("chromium") or "chromium"
    for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1400,1100", "--use-angle=swiftshader",
              "--enable-unsafe-swiftshader", "--disable-background-networking"):
        o.add_argument(a)
    return webdriver.Chrome(service=Service(shutil.which("chromedriver") or "chromedriver"), options=o)


def busy_s(d) -> float:
    """CPU seconds (user + system) used so far by the browser's processes (renderer, GPU
    process running SwiftShader, ...): on a shared machine the work a zoom costs, apart
    from the wait for a CPU that inflates its wall time."""
    root = d.service.process.pid
    parent, ticks = {}, {}
    for st in Path("/proc").glob("[0-9]*/stat"):
        try:
            f = st.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid = int(st.parent.name)
        parent[pid], ticks[pid] = int(f[1]), int(f[11]) + int(f[12])
    mine = {root}
    grew = True
    while grew:
        new = {p for p, pp in parent.items() if pp in mine} - mine
        grew = bool(new)
        mine |= new
    total = sum(ticks.get(p, 0) for p in mine)
    return total / os.sysconf("SC_CLK_TCK")


def open_once(d, url: str) -> tuple[float, float, list[float], list[float]]:
    """(ms until every view is drawn, browser CPU ms of the load, zoom latencies in ms,
    browser CPU ms of each zoom) for one fresh load."""
    d.get("about:blank")
    b0 = busy_s(d)
    d.get(url)
    t = time.monotonic()
    opened = None
    while opened is None and time.monotonic() - t < 120:
        opened = d.execute_script(OPENED_JS)
        time.sleep(0.05)
    if opened is None:
        raise SystemExit("bench_report: the view was not drawn within 120 s")
    load_busy = (busy_s(d) - b0) * 1e3
    yr = d.execute_script("return Object.values(window.elflayoutViews)[0].plot._fullLayout.yaxis.range.slice()")
    zooms, busy = [], []
    for k in range(8):  # nested and sliding windows over the file
        a = yr[1] * (0.05 * k)
        b = a + yr[1] * (0.5 if k % 2 else 0.1)
        b0 = busy_s(d)
        zooms.append(d.execute_async_script(ZOOM_JS, a, b))
        busy.append((busy_s(d) - b0) * 1e3)
    return opened, load_busy, zooms, busy


def widen(src: str, n: int, work: Path) -> str:
    """A copy of results ``src`` with its variants repeated up to ``n`` (names v2, v3 ...)."""
    import gzip
    import json

    raw = Path(src).read_bytes()
    doc = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    have = [v["name"] for v in doc["variants"]]
    runs = list(doc["runs"])
    for k in range(len(have), n):
        base = have[k % len(have)]
        name = f"{base}{k // len(have) + 1}"
        doc["variants"].append({**next(v for v in doc["variants"] if v["name"] == base), "name": name})
        doc["runs"] += [{**r, "variant": name} for r in runs if r["variant"] == base]
    doc.pop("comparisons", None)
    doc.pop("summary", None)
    out = work / f"{Path(src).name.split('.')[0]}-{n}variants.json"
    out.write_text(json.dumps(doc))
    return str(out)


def sizes(text: str) -> dict:
    from elflayout.report import interactive

    data = sum(len(m.group(1).encode()) for m in re.finditer(r'<script type="application/json" class="elv-data"[^>]*>'
                                                             r"(.*?)</script>", text, re.S))
    png = sum(len(m.group(0)) for m in re.finditer(r"data:image/png;base64,[A-Za-z0-9+/=]+", text))
    return {"total": len(text.encode()), "plotly": len((interactive.plotly_js() or "").encode()), "view data": data,
            "PNG images": png}


def measure(d, url: str) -> dict:
    """One fresh load of ``url``: its open time, zoom latencies and browser CPU."""
    o, ob, z, zb = open_once(d, url)
    return {"open": [o], "open_busy": [ob], "zoom": z, "zoom_busy": zb}


def summary(m: dict, loads: int) -> list[str]:
    med = statistics.median
    return [f"open (navigation start → views drawn), {loads} loads: median {med(m['open']):,.0f} ms, "
            f"range {min(m['open']):,.0f}–{max(m['open']):,.0f} ms; browser CPU {med(m['open_busy']):,.0f} ms",
            f"zoom (relayout → next frame painted), {len(m['zoom'])} zooms: median {med(m['zoom']):,.0f} ms, "
            f"worst {max(m['zoom']):,.0f} ms; browser CPU per zoom: median {med(m['zoom_busy']):,.0f} ms, "
            f"worst {max(m['zoom_busy']):,.0f} ms"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("inputs", nargs="*", default=[str(DEFAULT)], help="results (and profile) files for the report")
    ap.add_argument("--runs", type=int, default=5, help="fresh loads of each report (default 5)")
    ap.add_argument("--variants", type=int, default=0, help="repeat the first results file's variants up to N")
    ap.add_argument("--html", action="append", default=[], metavar="REPORT.html",
                    help="measure this report as built (repeat to compare: loads alternate between them, so the "
                         "machine's load falls on each alike); the inputs are then not used")
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-report-"))
    try:
        pages = [Path(h) for h in a.html]
        if not pages:
            if a.variants:
                a.inputs[0] = widen(a.inputs[0], a.variants, work)
            out = work / "report.html"
            t = time.monotonic()
            cli("report", *a.inputs, "-o", out)
            print(f"report: {out.name} from {', '.join(Path(p).name for p in a.inputs)}; "
                  f"built in {time.monotonic() - t:.1f} s")
            pages = [out]
        for p in pages:
            sz = sizes(p.read_text())
            print(f"{p.name} size: " + ", ".join(f"{k} {v / 1e6:.2f} MB" for k, v in sz.items()))
        got = {p: {"open": [], "open_busy": [], "zoom": [], "zoom_busy": []} for p in pages}
        load = []
        d = driver()
        try:
            for _ in range(a.runs):
                for p in pages:
                    for k, v in measure(d, p.resolve().as_uri()).items():
                        got[p][k] += v
                    load.append(os.getloadavg()[0])
        finally:
            d.quit()
        for p in pages:
            print(f"{p.name}:")
            for line in summary(got[p], a.runs):
                print("  " + line)
        print(f"load average (1 min) during the bench: {min(load):.2f}–{max(load):.2f}; at the end "
              f"{' '.join(f'{x:.2f}' for x in os.getloadavg())} on {os.cpu_count()} CPUs")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
