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


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("inputs", nargs="*", default=[str(DEFAULT)], help="results (and profile) files for the report")
    ap.add_argument("--runs", type=int, default=5, help="fresh loads of the report (default 5)")
    ap.add_argument("--variants", type=int, default=0, help="repeat the first results file's variants up to N")
    a = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-report-"))
    try:
        if a.variants:
            a.inputs[0] = widen(a.inputs[0], a.variants, work)
        out = work / "report.html"
        t = time.monotonic()
        cli("report", *a.inputs, "-o", out)
        build_s = time.monotonic() - t
        sz = sizes(out.read_text())
        print(f"report: {out.name} from {', '.join(Path(p).name for p in a.inputs)}; built in {build_s:.1f} s")
        print("size: " + ", ".join(f"{k} {v / 1e6:.2f} MB" for k, v in sz.items()))
        d = driver()
        try:
            opens, open_busy, zooms, zoom_busy = [], [], [], []
            for _ in range(a.runs):
                o, ob, z, zb = open_once(d, out.as_uri())
                opens.append(o)
                open_busy.append(ob)
                zooms += z
                zoom_busy += zb
        finally:
            d.quit()
        print(f"open (navigation start → views drawn), {a.runs} loads: median {statistics.median(opens):,.0f} ms, "
              f"range {min(opens):,.0f}–{max(opens):,.0f} ms; browser CPU {statistics.median(open_busy):,.0f} ms")
        print(f"zoom (relayout → next frame painted), {len(zooms)} zooms: median {statistics.median(zooms):,.0f} ms, "
              f"worst {max(zooms):,.0f} ms; browser CPU per zoom: median {statistics.median(zoom_busy):,.0f} ms, "
              f"worst {max(zoom_busy):,.0f} ms")
        print(f"load average during the bench: {' '.join(f'{x:.2f}' for x in os.getloadavg())} "
              f"on {os.cpu_count()} CPUs")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
