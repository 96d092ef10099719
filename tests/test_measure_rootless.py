"""Measuring without root: residency (cachestat or mincore) before and after each run,
eviction by posix_fadvise, read_ahead_kb recorded and not set; run as an unprivileged
user and compared with the tracefs counts of the same file."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from conftest import ROOT, need_root_tracefs, need_tool, run_cli
from elflayout.errors import ElflayoutError
from elflayout.measure import cache, rootless
from elflayout.measure.session import MeasurePlan
from test_measure import libpair  # noqa: F401  (the fixture)

sys.path.insert(0, str(ROOT / "bench"))
import _common  # noqa: E402


def test_cachestat_counts_own_file_and_eviction(tmp_path):
    if rootless.cachestat_status():
        pytest.skip(rootless.cachestat_status())
    f = tmp_path / "data"
    f.write_bytes(os.urandom(40 * cache.PAGE))
    s = rootless.cachestat(f)
    assert s["nr_cache"] == 40
    cache.evict(f)
    assert rootless.cachestat(f)["nr_cache"] == 0
    res = rootless.Residency("cachestat")
    before = res.snapshot(str(f))
    with open(f, "rb") as fh:
        fh.read(10 * cache.PAGE)
    rec = res.pages_read(before, res.snapshot(str(f)))
    # a 10-page read brings in at least those pages (read-ahead may add more, never fewer)
    assert 10 <= rec["pages_read"] <= 40 and rec["resident_before"] == 0 and rec["estimated"]
    assert rec["pages_read"] == cache.resident_pages(f)  # mincore agrees


def test_pages_read_arithmetic_and_lost_pages_flag():
    res = rootless.Residency("cachestat")
    rec = res.pages_read(rootless.Snapshot(3, evicted=5), rootless.Snapshot(10, evicted=7))
    assert rec["pages_read"] == 7 and rec["evicted_during_run"] == 2
    run = {"state": "selective", "files": {"/x": rec}}
    assert "2 page(s) evicted during the run" in rootless.interference(run)
    assert rootless.interference({"state": "selective", "files": {"/x": {"pages_read": 1}},
                                  "evict_left": {"/x": 4}}).startswith("/x: 4 page(s) could not be evicted")
    assert rootless.interference({"state": "selective", "files": {"/x": {"pages_read": 1}}}) is None


def test_rootless_plan_refusals(tmp_path):
    f = tmp_path / "lib.so"
    f.write_bytes(b"x" * 100)
    base = dict(variants=[("a", "true")], rootless=True)
    with pytest.raises(ElflayoutError, match="no census without root"):
        MeasurePlan(**base).check()
    with pytest.raises(ElflayoutError, match="--isolate needs root"):
        MeasurePlan(**base, files=[str(f)], isolate=True).check()
    MeasurePlan(**base, files=[str(f)]).check()  # an own file: fine


def unprivileged_python() -> list[str]:
    py = _common.unprivileged_python()
    if py is None:
        pytest.skip("no Python with numpy/scipy/rich runnable by user nobody")
    return py


def _pages(doc, lib, state="selective"):
    return sorted(r["files"][lib]["pages_read"] for r in doc["runs"] if r["state"] == state)


@pytest.mark.root
def test_unprivileged_user_counts_equal_tracefs(libpair):  # noqa: F811
    """As user nobody (setpriv): the rootless method is chosen by itself, said in one line,
    and its counts equal the page-cache tracepoint's for the same file and read-ahead."""
    need_root_tracefs()
    need_tool("setpriv")
    py = unprivileged_python()
    d = Path(tempfile.mkdtemp(prefix="elflayout-rootless-", dir="/var/tmp"))
    try:
        for src in (libpair["scattered"] / "libdata.so", libpair["driver"]):
            shutil.copy2(src, d / src.name)
        shutil.chown(d, "nobody", "nogroup")
        for p in d.iterdir():
            shutil.chown(p, "nobody", "nogroup")
        lib, cmd = str(d / "libdata.so"), f"LD_LIBRARY_PATH={d} {d / 'driver'}"
        args = ["measure", "--name", "s", cmd, "--files", lib, "--runs", "4", "--seed", "3"]
        r = subprocess.run([*py, "-m", "elflayout", *args, "-o", d / "rootless.json"], capture_output=True,
                           text=True, cwd="/")
        assert r.returncode == 0, r.stderr
        notes = [ln for ln in r.stderr.splitlines() if "measuring without root" in ln]
        assert len(notes) == 1 and "recorded, not set" in notes[0], r.stderr
        # tracefs as root, on the device's own read-ahead (the rootless run could not set it)
        run_cli(*args, "--read-ahead-kb", "-1", "--census", "none", "--quiet", "-o", d / "trace.json", check=0)
        rl, tr = (json.loads((d / n).read_text()) for n in ("rootless.json", "trace.json"))
        md = rl["metadata"]
        assert md["source"] == md["rootless"]["method"] and md["rootless"]["why"] == "not root"
        assert md["rootless"]["method"] in ("cachestat", "mincore") and "evicted again" in md["rootless"]["cannot_see"]
        assert md["controls"]["read_ahead_kb"]["applied"] == md["controls"]["read_ahead_kb"]["before"]
        assert md["lock"]["path"] == "/run/elflayout/measure.lock"  # root's lock: one queue per machine
        if md["read_ahead_kb"] != tr["metadata"]["read_ahead_kb"]:
            pytest.skip(f"read_ahead_kb changed between the sessions ({md['read_ahead_kb']} -> "
                        f"{tr['metadata']['read_ahead_kb']}) by another process")
        assert tr["metadata"]["source"] == "trace"
        assert not any(x.get("interference") for x in rl["runs"] + tr["runs"])
        assert _pages(rl, lib) == _pages(tr, lib) and _pages(rl, lib)[0] > 100
        assert _pages(rl, lib, "hot") == [0] * 4
        # a file this user may not write (root's, mode 644): refused in one line, exit 2
        os.chown(lib, 0, 0)
        r = subprocess.run([*py, "-m", "elflayout", *args, "-o", d / "no.json"], capture_output=True, text=True,
                           cwd="/")
        assert r.returncode == 2 and "hides the page-cache residency" in r.stderr, r.stderr
        assert "Traceback" not in r.stderr and not (d / "no.json").exists()
    finally:
        shutil.rmtree(d, ignore_errors=True)
