"""order.marks: first-access hot code kept off the folio an asynchronous readahead window
is marked on, when touching it would read a window of cold code; cold code sections fill
it in the real link."""

import json
import re
import subprocess

import pytest

from conftest import need_tool, run_cli


@pytest.fixture(scope="module")
def synth40(tmp_path_factory):
    """The synthetic library of 40 objects (lld, function sections), its ground-truth
    profile and link map: its first-access hot code runs onto a marked folio."""
    import order_testlib as testlib

    need_tool("ld.lld")
    wd = tmp_path_factory.mktemp("synth40")
    return testlib.build_profiled(wd, n_objects=40, funcs_per_object=8, seed=3, linker="lld")


def _predicted(profile, lib) -> int:
    r = run_cli("simulate", profile, "--lib", lib, "--read-ahead-kb", "128", "--json")
    return json.loads(r.stdout)["pages"]


def test_search_finds_the_marked_folio_and_predicts_fewer_pages(synth40):
    from elflayout.order import marks
    from elflayout.profile import model

    t = model.parse(synth40["prof"]).targets[0]
    found = marks.search(str(synth40["lib"]), t, 128, None)
    assert found["gaps"] and found["pages"] < found["plain"], found
    lay = found["layout"]
    for lo, hi in found["gaps"]:  # no hot function on a gap
        hot = lay.hot & (lay.new < hi) & (lay.new + lay.size > lo)
        assert not hot.any()


def test_link_fills_the_marked_folio_with_cold_code(synth40, tmp_path):
    """``link --algorithm first-access``: the step says how many folios it keeps cold,
    the order stays honoured, and the model predicts fewer pages for the real output
    than for the same link with ``--no-readahead-marks``."""
    objs = [str(o) for o in synth40["objects"]]
    pages, lines, predicted = {}, {}, {}
    for name, opts in (("marks", []), ("plain", ["--no-readahead-marks"])):
        lib = tmp_path / name / "libsynth.so"
        lib.parent.mkdir()
        r = run_cli("link", "--profile", synth40["profile"], "--objects-from", synth40["map"], "--algorithm",
                    "first-access", *opts, "--linker", "lld", "--", "gcc", "-shared", "-fuse-ld=lld", "-o", lib, *objs)
        assert r.returncode == 0, r.stderr
        assert "100.0% in profile order" in r.stderr
        lines[name] = next(ln for ln in r.stderr.splitlines() if ln.startswith("elflayout: link: readahead marks: "))
        algo = next(ln for ln in r.stderr.splitlines() if ln.startswith("elflayout: link: algorithm: "))
        predicted[name] = int(re.search(r"predicted: first-access (\d+) pages", algo)[1])
        pages[name] = _predicted(synth40["profile"], lib)
        env = {"LD_LIBRARY_PATH": str(lib.parent)}
        assert subprocess.run([str(synth40["driver"])], env=env, capture_output=True).returncode == 0
    assert lines["marks"].startswith("elflayout: link: readahead marks: 1 kept cold (readahead model"), lines
    assert lines["plain"].endswith("off (--no-readahead-marks)")
    assert pages["marks"] < pages["plain"], pages
    # the algorithm step predicts first-access as the link will make it: without the marks when they are off
    assert predicted["marks"] == pages["marks"] < predicted["plain"] == pages["plain"], (predicted, pages)
