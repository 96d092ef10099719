"""measure --isolate: the files under test served from a private loop device at their own
paths; another process flipping the disk's read_ahead_kb cannot disturb the runs."""

import contextlib
import json
import os
import random
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import ROOT, need_root_tracefs, run_cli
from elflayout.controls import MeasurementLock, StateFile, block_device_dir
from elflayout.errors import ElflayoutError
from elflayout.measure.session import MeasurePlan
from test_measure import _cmd, libpair  # noqa: F401  (the fixture)

FLIP_VALUES = (0, 16, 128, 512, 4096, 8192)


def test_isolate_plan_refusals(tmp_path):
    with pytest.raises(ElflayoutError, match="--census none needs --files"):
        MeasurePlan(variants=[("a", "true")], isolate=True, rootless=False, census="none").check()
    f = tmp_path / "x"
    f.write_bytes(b"x")
    with pytest.raises(ElflayoutError, match="choose one"):
        MeasurePlan(variants=[("a", "true")], isolate=True, rootless=False, files=[str(f)], storage="hdd").check()


@contextlib.contextmanager
def flipping_read_ahead(knob: Path, session: subprocess.Popen, period_s: float = 0.1):
    """Another process setting ``knob`` to random values every ``period_s`` while
    ``session`` holds the measurement lock (never while someone else's session does);
    the value found before is restored afterwards, under the lock."""
    with MeasurementLock():
        original = knob.read_text().strip()
    state = StateFile(f"test-flip-{knob.parent.parent.name}", {"knob": str(knob), "value": original,
                                                                "what": f"read_ahead_kb of {knob.parent.parent.name}"})
    stop, flips = threading.Event(), []
    rng = random.Random(7)

    def flip():
        while not stop.is_set() and session.poll() is None:
            if f"pid {session.pid}:" in (MeasurementLock.holder() or ""):
                v = rng.choice(FLIP_VALUES)
                knob.write_text(str(v))
                flips.append(v)
            time.sleep(period_s)

    t = threading.Thread(target=flip, daemon=True)
    t.start()
    try:
        yield flips
    finally:
        stop.set()
        t.join()
        with MeasurementLock():
            knob.write_text(original)
        state.remove()


def _session(tmp_path, name, *args):
    """Start ``measure`` in a subprocess (selective, 8 rounds)."""
    out = tmp_path / name
    env = dict(os.environ, PYTHONPATH=str(ROOT / "tools"))
    p = subprocess.Popen([sys.executable, "-m", "elflayout", "measure", *args, "--state", "selective", "--runs", "8",
                          "--census", "none", "--retries", "0", "--quiet", "-o", str(out)], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    return p, out


def _finish(p, out, codes=(0,)):
    stdout, stderr = p.communicate(timeout=600)
    assert p.returncode in codes, stderr
    return json.loads(out.read_text()), stderr


def _pages(doc, lib):
    return [r["files"][lib]["pages_read"] for r in doc["runs"]]


def _loops_of(pid: int, settle_s: float = 0) -> list[str]:
    """Loop devices over session ``pid``'s image; waits up to ``settle_s`` for them to go
    (the kernel detaches an autoclear device asynchronously after the last unmount)."""
    deadline = time.monotonic() + settle_s
    while True:
        r = subprocess.run(["losetup", "-l", "-n", "-O", "NAME,BACK-FILE"], capture_output=True, text=True)
        found = [ln for ln in r.stdout.splitlines() if f"isolate-{pid}.img" in ln]
        if not found or time.monotonic() >= deadline:
            return found
        time.sleep(0.1)


@pytest.mark.root
@pytest.mark.slow
def test_isolated_counts_equal_quiet_while_read_ahead_flips(tmp_path, libpair):  # noqa: F811
    """Quiet (shared disk) vs isolated under a read_ahead_kb flipper: same pages, every
    run usable; the shared disk under the flipper is disturbed (the flipper works)."""
    need_root_tracefs()
    lib = str(libpair["scattered"] / "libdata.so")
    dev = block_device_dir(lib)
    if dev is None:
        pytest.skip(f"{lib} is not on a block device")
    knob = dev / "queue" / "read_ahead_kb"
    ino = os.stat(lib).st_ino
    args = ("--name", "s", _cmd(libpair, "scattered"), "--files", lib)

    quiet, _ = _finish(*_session(tmp_path, "quiet.json", *args))
    p, out = _session(tmp_path, "iso.json", *args, "--isolate")
    with flipping_read_ahead(knob, p) as flips:
        iso, _ = _finish(p, out)
    assert len(flips) >= 3, flips  # the flipper ran during the session
    md = iso["metadata"]["isolation"]
    assert md["device"].startswith("loop") and md["disk"] == dev.name and md["served"][lib].startswith(md["device"])
    assert iso["metadata"]["controls"]["read_ahead_kb"]["device"] == md["device"]
    assert not any(r.get("interference") for r in iso["runs"]), [r.get("interference") for r in iso["runs"]]
    assert {r["read_ahead_kb"] for r in iso["runs"]} == {128}
    q = [n for n, r in zip(_pages(quiet, lib), quiet["runs"]) if not r.get("interference")]
    assert q and set(_pages(iso, lib)) == set(q), (q, _pages(iso, lib))
    # torn down: no loop device left, the path serves the original file again, no mount point
    assert not _loops_of(p.pid, settle_s=5) and os.stat(lib).st_ino == ino
    assert not list(Path("/run/elflayout").glob(f"isolate-{p.pid}*"))
    assert lib not in Path("/proc/self/mountinfo").read_text()

    # the same flipper against the shared disk: runs are disturbed, and the message says why
    p, out = _session(tmp_path, "shared.json", *args)
    with flipping_read_ahead(knob, p):
        shared, _ = _finish(p, out, codes=(0, 1))
    assert any("read_ahead_kb of" in (r.get("interference") or "") for r in shared["runs"])


@pytest.mark.root
def test_isolation_torn_down_on_sigterm(tmp_path, libpair):  # noqa: F811
    need_root_tracefs()
    lib = str(libpair["scattered"] / "libdata.so")
    ino = os.stat(lib).st_ino
    p, out = _session(tmp_path, "t.json", "--name", "s", f"sleep 1; {_cmd(libpair, 'scattered')}", "--files", lib,
                      "--isolate")
    deadline = time.monotonic() + 300
    while not _loops_of(p.pid):
        assert p.poll() is None and time.monotonic() < deadline, p.communicate()[1]
        time.sleep(0.05)
    time.sleep(0.5)
    p.terminate()
    p.communicate(timeout=60)
    assert not _loops_of(p.pid, settle_s=5) and os.stat(lib).st_ino == ino and not out.exists()
    assert not list(Path("/run/elflayout").glob(f"isolate-{p.pid}*"))


@pytest.mark.root
@pytest.mark.slow
def test_census_then_isolation_while_read_ahead_flips(tmp_path, libpair):  # noqa: F811
    """No --files: the census on the shared disk finds the files, then they are served
    from the private device; under a read_ahead_kb flipper every run is usable and reads
    what a quiet run with the files named reads."""
    need_root_tracefs()
    lib = str(libpair["scattered"] / "libdata.so")
    dev = block_device_dir(lib)
    if dev is None:
        pytest.skip(f"{lib} is not on a block device")
    quiet, _ = _finish(*_session(tmp_path, "quiet.json", "--name", "s", _cmd(libpair, "scattered"), "--files", lib))
    out = tmp_path / "census-iso.json"
    p = subprocess.Popen([sys.executable, "-m", "elflayout", "measure", "--name", "s", _cmd(libpair, "scattered"),
                          "--census-under", str(libpair["scattered"]), "--isolate", "--state", "selective",
                          "--runs", "8", "--retries", "0", "--quiet", "-o", str(out)],
                         env=dict(os.environ, PYTHONPATH=str(ROOT / "tools")), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    with flipping_read_ahead(dev / "queue" / "read_ahead_kb", p) as flips:
        doc, _ = _finish(p, out)
    assert len(flips) >= 3, flips
    md = doc["metadata"]
    assert md["census"] and list(md["files"]) == [lib] and md["census_method"] == "evict"
    assert md["isolation"]["served"][lib].startswith(md["isolation"]["device"])
    assert md["controls"]["read_ahead_kb"]["device"] == md["isolation"]["device"]
    assert not any(r.get("interference") for r in doc["runs"]), [r.get("interference") for r in doc["runs"]]
    q = [n for n, r in zip(_pages(quiet, lib), quiet["runs"]) if not r.get("interference")]
    assert q and set(_pages(doc, lib)) == set(q), (q, _pages(doc, lib))
    assert lib not in Path("/proc/self/mountinfo").read_text()
