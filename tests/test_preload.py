"""Preload plans (elflayout.preload) and the C preloader (tools/preload)."""

import os
import shutil
import subprocess

import numpy as np
import pytest

from elflayout import fileio
from elflayout.errors import ElflayoutError
from elflayout.measure import cache
from elflayout.preload import inputs, model, plan, runner
from elflayout.storage.model import resolve

PAGE = 4096


def obs(path, pages, first=None, build_id=None, size=None, source="test"):
    pages = np.asarray(pages, dtype=np.int64)
    first = np.linspace(0, 1, len(pages)) if first is None else np.asarray(first, dtype=float)
    return inputs.Observation(str(path), build_id, size, pages, first, source)


def data_file(tmp_path, pages=256, name="data.bin"):
    f = tmp_path / name
    f.write_bytes(np.random.default_rng(0).bytes(pages * PAGE))
    return f


# -- planning ------------------------------------------------------------------------

def test_gap_rule_follows_the_device_model():
    hdd, ssd = resolve("hdd"), resolve("sata-ssd")
    gaps = np.array([4, 64, 256, 1024]) * 1024
    # hdd: 4 ms short seek = 480 KB at 120 MB/s -> read through up to a few hundred KiB
    assert list(plan.should_merge(hdd, gaps)) == [True, True, True, False]
    # SATA SSD: 0.1 ms = 50 KB at 500 MB/s
    assert list(plan.should_merge(ssd, gaps)) == [True, False, False, False]
    assert not plan.should_merge(resolve("none"), np.array([4096])).any()


def test_plan_merges_ranges_and_orders_by_offset(tmp_path):
    f = data_file(tmp_path)
    # runs: [0,4) [6,8) (gap 2 pages) [100,102) (gap 92 pages = 368 KiB) [200,201) (gap 98 pages)
    ins = inputs.Inputs([obs(f, [200, 100, 101, 0, 1, 2, 3, 6, 7], first=np.linspace(0, 1, 9))])
    p_ssd = plan.make_plan(ins, "sata-ssd")
    assert p_ssd.files[0].ranges == ((0, 8 * PAGE), (100 * PAGE, 2 * PAGE), (200 * PAGE, PAGE))
    p_hdd = plan.make_plan(ins, "hdd")
    assert p_hdd.files[0].ranges == ((0, 201 * PAGE),)
    for p in (p_ssd, p_hdd):
        assert p.files[0].needed_pages == 9
        assert p.metadata["totals"]["gap_pages"] == p.bytes // PAGE - 9
        assert p.metadata["dropped"]["ranges"] == 0
    none = plan.make_plan(ins, "none")
    assert len(none.files[0].ranges) == 4


def test_plan_union_of_runs_and_files_by_first_need(tmp_path):
    a, b = data_file(tmp_path, name="a.bin"), data_file(tmp_path, name="b.bin")
    ins = inputs.Inputs([obs(a, [10, 11], first=[0.5, 0.6]), obs(b, [0], first=[0.1]),
                         obs(a, [11, 12, 50], first=[0.0, 0.2, 0.9])])
    p = plan.make_plan(ins, "sata-ssd")
    assert [f.path for f in p.files] == [str(a), str(b)]  # a's page 11 is first needed (0.0)
    assert p.files[0].ranges == ((10 * PAGE, 3 * PAGE), (50 * PAGE, PAGE))
    assert p.files[0].needed_pages == 4


def test_cap_drops_latest_needed_ranges_and_counts_them(tmp_path):
    f = data_file(tmp_path)
    ins = inputs.Inputs([obs(f, [0, 1, 100, 101, 102, 200], first=[0.9, 0.9, 0.1, 0.1, 0.1, 0.5])])
    p = plan.make_plan(ins, "sata-ssd", max_bytes=4 * PAGE)
    # by priority: [100,103) (3 pages) fits, [200] (1 page) fits, [0,2) does not
    assert p.files[0].ranges == ((100 * PAGE, 3 * PAGE), (200 * PAGE, PAGE))
    d = p.metadata["dropped"]
    assert (d["ranges"], d["bytes"], d["needed_pages"]) == (1, 2 * PAGE, 2)
    assert p.bytes <= 4 * PAGE
    zero = plan.make_plan(ins, "sata-ssd", max_bytes=0)
    assert zero.files == [] and zero.metadata["dropped"]["needed_pages"] == 6


def test_last_range_clipped_at_end_of_file(tmp_path):
    f = tmp_path / "short.bin"
    f.write_bytes(b"x" * (PAGE * 2 + 100))
    p = plan.make_plan(inputs.Inputs([obs(f, [2])]), "hdd")
    assert p.files[0].ranges == ((2 * PAGE, 100),)


def test_identity_mismatch_refused_and_missing_file_counted(tmp_path):
    f = data_file(tmp_path)
    with pytest.raises(ElflayoutError, match="not the build"):
        plan.make_plan(inputs.Inputs([obs(f, [0], size=123)]), "hdd")
    p = plan.make_plan(inputs.Inputs([obs(f, [0]), obs(tmp_path / "gone.so", [0])]), "hdd")
    assert p.metadata["dropped"]["files"] == [{"path": str(tmp_path / "gone.so"), "reason": "no such file here"}]


def test_results_input_and_round_trip(tmp_path):
    f = data_file(tmp_path)
    st = os.stat(f)
    from elflayout import results as results_model

    runs = [{"variant": "v", "state": "selective", "round": i, "seq": i, "wall_s": 0.1, "pages_read": 3,
             "files": {str(f): {"pages_read": 3, "reads": [[0.01, 5, 2], [0.02, 0, 1]]}}} for i in range(2)]
    runs.append({"variant": "v", "state": "hot", "round": 0, "seq": 9, "wall_s": 0.1, "pages_read": 0,
                 "files": {str(f): {"pages_read": 0, "reads": []}}})
    md = {"files": {str(f): {"path": str(f), "build_id": None, "size": st.st_size}}}
    doc = results_model.build(md, [{"name": "v", "command": "x"}], runs, {})
    r = tmp_path / "r.json"
    fileio.dump_json(doc, r)
    ins = inputs.load([str(r)])
    assert len(ins.observations) == 2
    assert list(ins.observations[0].pages) == [0, 5, 6]
    assert list(ins.observations[0].first) == [1.0, 0.0, 0.0]
    p = plan.make_plan(ins, "none")
    assert plan.make_plan(ins, "sata-ssd").files[0].ranges == ((0, 7 * PAGE),)  # 16 KiB gap read through
    out = tmp_path / "plan.json"
    tp = model.save(p, out)
    assert tp == tmp_path / "plan.preload"
    back = model.load(out)
    assert back.files == p.files
    text = tp.read_text().splitlines()
    assert text[0] == "elflayout-preload-plan 1"
    assert text[1] == (f"F 2 {st.st_size} {st.st_mtime_ns // 10**9} {st.st_mtime_ns % 10**9} - {f}")
    assert text[2:] == [f"0 {PAGE}", f"{5 * PAGE} {2 * PAGE}"]
    with pytest.raises(ElflayoutError, match="no variant"):
        inputs.load([str(r)], ["nope"])


def test_profile_input(tmp_path):
    f = data_file(tmp_path)
    doc = fileio.envelope("profile", 1, {}, targets=[{
        "path": str(f), "build_id": None, "size": os.path.getsize(f), "sha256": None,
        "reads": [{"page": 8, "npages": 4, "first": 0, "t": 0.0}, {"page": 0, "npages": 1, "first": 1, "t": 0.5}]}])
    p = tmp_path / "p.json"
    fileio.dump_json(doc, p)
    ins = inputs.load([str(p)])
    assert list(ins.observations[0].pages) == [0, 8, 9, 10, 11]


# -- CLI -----------------------------------------------------------------------------

def test_cli_bad_inputs_exit_2(tmp_path, cli):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    r = cli("preload", "plan", bad, "-o", tmp_path / "p.json", check=2)
    assert r.stderr.startswith("elflayout: error:") and len(r.stderr.strip().splitlines()) == 1
    r = cli("preload", "run", bad, "--", "true", check=2)
    assert r.stderr.startswith("elflayout: error:") and len(r.stderr.strip().splitlines()) == 1
    other = tmp_path / "other.json"
    fileio.dump_json(fileio.envelope("preload-plan", 1, {}, files=[{"path": "/x", "size": 1, "mtime_ns": 0,
                                                                     "ranges": [[0, 5]]}]), other)
    r = cli("preload", "run", other, "--", "true", check=2)
    assert "beyond the file" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    txt = tmp_path / "bad.preload"
    txt.write_text("hello\n")
    r = cli("preload", "run", txt, "--", "true", check=2)
    assert "not an elflayout preload plan" in r.stderr
    r = cli("preload", "plan", bad, "-o", tmp_path / "p.json", "--storage", "floppy", check=2)
    assert r.returncode == 2


# -- the C preloader -----------------------------------------------------------------

@pytest.fixture(scope="module")
def bins():
    if shutil.which("make") is None or shutil.which("gcc") is None:
        pytest.skip("make/gcc missing (run: make bootstrap)")
    return runner.binaries()


def on_disk_dir(tmp_path):
    """A directory on a disk-backed file system (tmpfs files never leave the page cache)."""
    from elflayout.measure.session import fs_of

    if fs_of(str(tmp_path)).get("fs") in ("tmpfs", "ramfs"):
        pytest.skip(f"{tmp_path} is on tmpfs: eviction cannot be tested")
    return tmp_path


def planned(tmp_path, f, ranges_pages):
    pages = [p for a, b in ranges_pages for p in range(a, b)]
    p = plan.make_plan(inputs.Inputs([obs(f, pages)]), "none")
    assert [(o // PAGE, (o + n) // PAGE) for o, n in p.files[0].ranges] == ranges_pages
    out = tmp_path / "plan.json"
    model.save(p, out)
    return out


def read_ahead_pages(path) -> int:
    from elflayout.controls import block_device_dir

    d = block_device_dir(path)
    try:
        return int((d / "queue" / "read_ahead_kb").read_text()) // 4 if d else 64
    except (OSError, ValueError):
        return 2048


def sparse_file(d, pages):
    """A file of ``pages`` pages, mostly a hole: big enough that the ranges lie further
    apart than the device's read-ahead window, without writing megabytes."""
    f = d / "sparse.bin"
    with open(f, "wb") as fh:
        fh.write(b"x" * PAGE)
        fh.truncate(pages * PAGE)
    return f


def assert_read_exactly(f, ranges_pages, margin=None):
    """Planned pages resident; pages further than ``margin`` (the device's read-ahead
    window: a read may be extended by up to that much) from any range are not."""
    margin = max(64, read_ahead_pages(f)) if margin is None else margin
    res = cache.residency(f)
    want = np.zeros(len(res), bool)
    near = np.zeros(len(res), bool)
    for a, b in ranges_pages:
        want[a:b] = True
        near[max(0, a - margin):b + margin] = True
    assert res[want].all(), f"planned pages not read: {np.flatnonzero(want & ~res)[:10]}"
    assert not res[~near].any(), f"unplanned pages read: {np.flatnonzero(res & ~near)[:10]}"


RANGES = [(0, 8), (5000, 5040), (12000, 12001)]  # further apart than a 8 MiB read-ahead window


@pytest.mark.parametrize("method", ["pread", "readahead", "fadvise"])
def test_launcher_reads_planned_ranges(tmp_path, bins, method):
    d = on_disk_dir(tmp_path)
    f = sparse_file(d, 14000)
    pl = planned(d, f, RANGES)
    ev = cache.evict(f)
    if ev["left"]:
        pytest.skip(f"could not evict the test file: {ev['why']}")
    r = subprocess.run(runner.launcher_argv(pl, ["sh", "-c", "exit 7"], method=method), capture_output=True,
                       text=True)
    assert r.returncode == 7 and r.stderr == ""
    if method != "pread":  # queued reads: give them a moment to land
        for _ in range(100):
            if cache.residency(f)[[a for a, _ in RANGES]].all():
                break
            subprocess.run(["sleep", "0.05"])
    assert_read_exactly(f, RANGES)
    if method == "pread":  # hot: everything cached, nothing is read again
        r = subprocess.run(runner.launcher_argv(pl, ["true"], verbose=True), capture_output=True, text=True)
        assert ": 1 files (0 skipped), 0 ranges read" in r.stderr, r.stderr


@pytest.mark.parametrize("audit", [True, False])
def test_library_reads_planned_ranges(tmp_path, bins, audit):
    d = on_disk_dir(tmp_path)
    f = sparse_file(d, 14000)
    pl = planned(d, f, RANGES)
    cache.evict(f)
    env = dict(os.environ, **runner.library_env(model.text_path(pl), audit=audit))
    r = subprocess.run(["true"], env=env, capture_output=True, text=True)
    assert r.returncode == 0 and r.stderr == ""
    assert_read_exactly(f, RANGES)


def test_stale_file_skipped_with_one_line(tmp_path, bins):
    d = on_disk_dir(tmp_path)
    f = data_file(d, pages=64)
    g = data_file(d, pages=64, name="other.bin")
    p = plan.make_plan(inputs.Inputs([obs(f, [0, 1, 2]), obs(g, [10, 11])]), "none")
    out = d / "plan.json"
    model.save(p, out)
    st = os.stat(f)
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # "changed" after planning
    cache.evict(f)
    cache.evict(g)
    r = subprocess.run(runner.launcher_argv(out, ["true"]), capture_output=True, text=True)
    assert r.returncode == 0
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and str(f) in lines[0] and "not preloaded" in lines[0], r.stderr
    assert not cache.residency(f).any()  # the stale file: nothing read
    assert cache.residency(g)[10:12].all()  # the others still are


def test_build_id_mismatch_skipped(tmp_path, bins):
    elf = tmp_path / "true-copy"
    shutil.copy("/bin/true", elf)
    p = plan.make_plan(inputs.Inputs([obs(elf, [0])]), "none")
    assert p.files[0].build_id
    fp = p.files[0]
    p.files[0] = model.FilePlan(fp.path, fp.size, fp.mtime_ns, "00" * 20, fp.ranges, fp.needed_pages, fp.first)
    out = tmp_path / "plan.json"
    model.save(p, out)
    r = subprocess.run(runner.launcher_argv(out, ["true"]), capture_output=True, text=True)
    assert r.returncode == 0
    assert len(r.stderr.strip().splitlines()) == 1 and "build-id" in r.stderr and "plan has 0000" in r.stderr


def test_missing_or_bad_plan_never_stops_the_program(tmp_path, bins):
    launcher, _ = bins
    for plan_path in (tmp_path / "missing.preload", tmp_path / "bad.preload"):
        if plan_path.name == "bad.preload":
            plan_path.write_text("garbage\n")
        r = subprocess.run([str(launcher), str(plan_path), "--", "sh", "-c", "echo ran; exit 3"],
                           capture_output=True, text=True)
        assert (r.returncode, r.stdout) == (3, "ran\n")
        assert len(r.stderr.strip().splitlines()) == 1 and "starting without preload" in r.stderr
        env = dict(os.environ, **runner.library_env(plan_path))
        r = subprocess.run(["sh", "-c", "echo ran"], env=env, capture_output=True, text=True)
        assert r.returncode == 0 and r.stdout == "ran\n"
        assert len(r.stderr.strip().splitlines()) == 1
    # a malformed line in the middle: what came before is applied, one line
    f = data_file(tmp_path, pages=16)
    st = os.stat(f)
    half = tmp_path / "half.preload"
    half.write_text(f"elflayout-preload-plan 1\nF 1 {st.st_size} {st.st_mtime_ns // 10**9} "
                    f"{st.st_mtime_ns % 10**9} - {f}\n0 4096\nF x\n")
    r = subprocess.run([str(launcher), str(half), "--", "true"], capture_output=True, text=True)
    assert r.returncode == 0 and len(r.stderr.strip().splitlines()) == 1 and "line 4" in r.stderr


def test_plan_applied_once_per_process_tree(tmp_path, bins):
    f = data_file(tmp_path, pages=16)
    pl = planned(tmp_path, f, [(0, 2)])
    env = dict(os.environ, **runner.library_env(model.text_path(pl)), ELFLAYOUT_PRELOAD_VERBOSE="1")
    r = subprocess.run(["sh", "-c", "sh -c true; true"], env=env, capture_output=True, text=True)
    assert r.returncode == 0
    assert len([ln for ln in r.stderr.splitlines() if "ranges" in ln]) == 1, r.stderr


def test_map_rewrites_paths(tmp_path, bins):
    d = on_disk_dir(tmp_path)
    a = d / "a"
    a.mkdir()
    f = data_file(a, pages=64)
    pl = planned(d, f, [(0, 4)])
    b = d / "b"
    os.rename(a, b)
    g = b / f.name
    cache.evict(g)
    r = subprocess.run(runner.launcher_argv(pl, ["true"], map_=[f"{a}={b}"]), capture_output=True, text=True)
    assert r.returncode == 0 and r.stderr == ""
    assert cache.residency(g)[:4].all()


@pytest.mark.root
@pytest.mark.parametrize("storage", [None, "none"])
def test_measure_with_and_without_preload(tmp_path, bins, storage):
    """measure --preload: each variant gets a NAME+preload twin started by the launcher;
    its runs read the planned ranges (counted by the page-cache tracepoint), also when
    the file is served from a storage mount (the plan's path is mapped onto it)."""
    from conftest import need_root_tracefs
    from elflayout.measure.session import MeasurePlan, measure

    need_root_tracefs()
    if storage:
        from elflayout.storage import server

        why = server.fuse_status()
        if why:
            pytest.skip(why)
    d = on_disk_dir(tmp_path)
    f = data_file(d, pages=512)
    pl = planned(d, f, [(0, 64), (300, 340)])
    variants = runner.measure_variants([("head", f"head -c 4096 {{mount}}/{f.name} >/dev/null" if storage
                                         else f"head -c 4096 {f} >/dev/null")], str(pl), [str(f)], storage)
    doc = measure(MeasurePlan(variants, states=["selective"], runs=2, files=[str(f)], census="none", storage=storage,
                              argv=["test"]))
    assert [v["name"] for v in doc["variants"]] == ["head", "head+preload"]
    pages = {v: [r["pages_read"] for r in doc["runs"] if r["variant"] == v] for v in ("head", "head+preload")}
    assert all(p < 64 for p in pages["head"]), pages  # one read-ahead window at most
    assert all(p >= 104 for p in pages["head+preload"]), pages  # the plan's 104 pages


def test_measure_preload_bad_plan(tmp_path, cli):
    f = data_file(tmp_path, pages=4)
    r = cli("measure", "--name", "t", "true", "--files", f, "--census", "none", "--preload", tmp_path / "nope.json",
            "-o", tmp_path / "r.json", check=2)
    assert "nope.json: no such file" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_cli_run_passes_options_and_status(tmp_path, cli, bins):
    f = data_file(tmp_path, pages=16)
    pl = planned(tmp_path, f, [(0, 2)])
    r = cli("preload", "run", pl, "--verbose", "--", "sh", "-c", "echo ran; exit 4")
    assert r.returncode == 4 and r.stdout == "ran\n"
    assert "1 files (0 skipped)" in r.stderr
    r = cli("preload", "run", pl, "--", "sh", "-c", "echo $0 $1", "--version", "x")
    assert r.returncode == 0 and r.stdout == "--version x\n"  # the command's own options stay its own
    r = cli("preload", "run", pl, "--verbose", check=2)
    assert "the command after '--'" in r.stderr


def test_access_plot_names_the_preload_reads():
    from elflayout.report import access

    def run(v):
        return {"variant": v, "state": "selective", "round": 0, "seq": 0, "wall_s": 0.1, "pages_read": 12,
                "files": {"/x.so": {"pages_read": 12, "reads": [[0.001, 0, 8], [0.002, 8, 2], [0.02, 30, 2]],
                                    "faults": [[0.01, 3], [0.021, 30]]}}}
    doc = fileio.envelope("results", 1, {"files": {}}, runs=[run("a"), run("a+preload")],
                          variants=[{"name": "a", "command": "x"},
                                    {"name": "a+preload", "command": "build/preload/elflayout-preload p -- x"}])
    panels, _ = access.results_panels(doc, {"a": "/x.so", "a+preload": "/x.so"}, "selective")
    assert "preload" not in panels[0].title
    assert "preload: 10 pages read before the first fault" in panels[1].title
