"""bench/run_all.py (listing, the generated page), bench/_common.py and bench_pipeline's section tables."""

import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

import _common  # noqa: E402
import bench_pipeline  # noqa: E402
import run_all  # noqa: E402
from elflayout.measure import session  # noqa: E402


def test_list_shows_every_bench_script():
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "run_all.py"), "--list"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    names = {line.split()[0] for line in r.stdout.splitlines()}
    scripts = {p.stem.removeprefix("bench_") for p in (ROOT / "bench").glob("bench_*.py")}
    assert scripts <= names, f"bench scripts run_all does not know: {scripts - names}"
    assert "python3 bench/bench_pipeline.py --runs 3" in r.stdout


def test_unknown_bench_is_an_error():
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "run_all.py"), "no-such"], capture_output=True, text=True)
    assert r.returncode == 2
    assert "unknown bench 'no-such'" in r.stderr


def test_page_written_and_other_sections_kept(tmp_path, monkeypatch):
    """Two fake benches: running one keeps the other's section; failures are recorded."""
    (tmp_path / "bench_a.py").write_text("print('figure A: 42 pages')\n")
    (tmp_path / "bench_b.py").write_text("import sys\nprint('partial B')\nprint('boom', file=sys.stderr)\nsys.exit(3)\n")
    benches = [run_all.Bench("a", "bench_a.py", ("--x", "1"), "fake A", "128"),
               run_all.Bench("b", "bench_b.py", (), "fake B", "n/a")]
    monkeypatch.setattr(run_all, "BENCH", tmp_path)
    monkeypatch.setattr(run_all, "BENCHES", benches)
    monkeypatch.setattr(run_all, "BY_NAME", {b.name: b for b in benches})
    page = tmp_path / "benchmarks.md"
    assert run_all.main(["a", "--quiet", "-o", str(page)]) == 0
    text = page.read_text()
    assert "figure A: 42 pages" in text and "`python3 bench/bench_a.py --x 1`" in text
    for fact in ("kernel", "CPU model", "cores", "read_ahead_kb", "load average"):
        assert fact in text
    assert "| b | `python3 bench/bench_b.py` | not run yet |" in text
    assert run_all.main(["b", "--quiet", "-o", str(page)]) == 1
    text = page.read_text()
    assert "figure A: 42 pages" in text, "section of the bench not re-run was dropped"
    assert "partial B" in text and "exit 3" in text and "boom" in text
    assert text.index("## a:") < text.index("## b:")


def test_refuses_to_replace_a_foreign_file(tmp_path):
    other = tmp_path / "notes.md"
    other.write_text("my notes\n")
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "run_all.py"), "inspect", "-o", str(other)],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "not a page written by run_all.py" in r.stderr
    assert other.read_text() == "my notes\n"
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "run_all.py"), "inspect", "-o", str(tmp_path / "no" / "x.md")],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "does not exist" in r.stderr


def test_markdown_output_fences_commands_and_demotes_headings():
    md = run_all.as_markdown("# title\n  $ elflayout measure x\n  (cached)\n| a | b |\n|---|---|\n## part\n")
    assert md.splitlines() == ["### title", "```text", "$ elflayout measure x", "(cached)", "```", "| a | b |",
                               "|---|---|", "#### part"]


@pytest.mark.parametrize("reads,expect", [([[0.0, 0, 2], [0.1, 1, 3]], 4), ([], 0)])
def test_section_counts_counts_distinct_pages(reads, expect):
    secs = [{"name": ".text", "offset": 4096, "size": 8192}, {"name": ".rodata", "offset": 12288, "size": 100}]
    got = bench_pipeline.section_counts(reads, secs)
    assert sum(got.values()) == expect
    if expect:
        assert got == {"(headers/other)": 1, ".text": 2, ".rodata": 1}


def test_section_groups_take_the_data_script_section_as_rodata():
    g = bench_pipeline.group_sections({".rodata": 86, ".rodata.elflayout": 484, ".text": 3, ".dynstr": 2, ".data": 5})
    assert g[".rodata"] == 570 and g[".dynsym+.dynstr+.gnu.hash"] == 2 and g["other"] == 5
    assert sum(g.values()) == 86 + 484 + 3 + 2 + 5


def test_cache_dir_empty_variable_means_the_default(tmp_path, monkeypatch):
    """ELFLAYOUT_CACHE set but empty: ~/.cache/elflayout, as for the product (not the
    current directory, which some scripts used to derive)."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    for value in ("", None):
        if value is None:
            monkeypatch.delenv("ELFLAYOUT_CACHE")
        else:
            monkeypatch.setenv("ELFLAYOUT_CACHE", value)
        assert _common.cache_dir("bench-x") == tmp_path / ".cache" / "elflayout" / "bench-x"
        assert (tmp_path / ".cache" / "elflayout" / "bench-x").is_dir()
    monkeypatch.setenv("ELFLAYOUT_CACHE", str(tmp_path / "c"))
    assert _common.cache_dir("bench-x") == tmp_path / "c" / "bench-x"
    assert bench_pipeline.work_dir() == tmp_path / "c" / "bench-pipeline"


PLANS = [
    session.MeasurePlan(variants=[("a b", "echo 'x y'"), ("c", "true")], states=["selective", "hot"], runs=3,
                        read_ahead_kb=128, census="none", files=["/x y/lib.so", "/z"], seed=1, retries=4),
    session.MeasurePlan(variants=[("v", "true")], states=["cold"], runs=1, warmup=2, read_ahead_kb=None, no_aslr=True,
                        pin=[0, 1], realtime=5, governor="performance", env={"A": "1=2"}, census_under=["/usr"],
                        timeout=None, trace=False, storage="hdd"),
]


@pytest.mark.parametrize("plan", PLANS, ids=["pipeline", "every-option"])
def test_measure_prints_the_command_of_the_plan_it_runs(plan, tmp_path, monkeypatch, capsys):
    """The printed ``elflayout measure`` line, parsed by the CLI's own parser, makes the
    very plan that ran."""
    ran = []
    monkeypatch.setattr(session, "measure", lambda p: ran.append(p) or {"runs": []})
    doc = _common.measure(plan, tmp_path / "r.json")
    assert doc == {"runs": []} and ran == [plan] and (tmp_path / "r.json").exists()
    line = capsys.readouterr().out.strip()
    assert line.startswith("$ python3 -m elflayout measure ") and line.endswith("   (in-process)")
    words = shlex.split(line.removesuffix("(in-process)"))[5:]
    assert words[-2:] == ["-o", str(tmp_path / "r.json")]
    got = _common.plan_from_args(words[:-2])
    got.argv = plan.argv
    assert got == plan


def test_bench_pipeline_prints_its_plan_as_before(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(session, "measure", lambda p: {"runs": []})
    bench_pipeline.measure(tmp_path / "r.json", {"v": ("/l.so", "true")}, 3)
    assert capsys.readouterr().out == (
        f"  $ python3 -m elflayout measure --name v true --state selective --state hot --runs 3 --read-ahead-kb 128 "
        f"--census none --files /l.so --seed 1 --retries 4 -o {tmp_path / 'r.json'}   (in-process)\n")


def test_cli_echoes_and_fails_with_the_verbs_words(capsys):
    r = _common.cli("relocs", "--help")
    assert r.returncode == 0 and "relocs" in r.stdout
    assert capsys.readouterr().out.startswith("  $ python3 -m elflayout relocs --help   (")
    _common.cli("relocs", "--help", echo=False)
    assert capsys.readouterr().out == ""
    with pytest.raises(SystemExit, match=r"elflayout relocs failed \(exit 2\):\n.*no-such"):
        _common.cli("relocs", "/no-such/lib.so", echo=False)


def test_fuzz_benches_share_options_chunks_and_last_lines(capsys):
    a = _common.fuzz_parser("Fuzzing X.\n\nMore.").parse_args(["--count", "250", "--start", "7"])
    assert (a.count, a.seed, a.start, a.jobs) == (250, 1, 7, 2)
    chunks = _common.fuzz_chunks(a.start, a.count, 100)
    assert chunks == [(7, 100), (107, 100), (207, 50)]
    assert sum(n for _, n in chunks) == a.count
    tally = type("T", (), {"by_kind": {"rela": 1200, "header": 3},
                           "failures": [(1, i, "rela", "libz.so.1", "boom") for i in range(25)]})()
    _common.print_fuzz_tail(tally, 0.0, 2)
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "variants by damage: header 3, rela 1,200"
    assert out[1].startswith("time: ") and out[1].endswith(" s with 2 workers")
    assert out[2:] == [f"  FAIL seed 1 variant {i} (rela, libz.so.1): boom" for i in range(20)]


def test_order_balance_study_balanced_order_cancels_position_effects():
    """A position effect biases a shuffled session's ratio; the balanced order cancels it."""
    import bench_order_balance

    res = bench_order_balance.study(np.array([np.log(1.05), 0.0, 0.0, 0.0]), rounds=10, trials=40, noise=0.01)
    assert res["shuffled"]["bias_max"] > 0.005
    assert res["balanced"]["bias_max"] < 1e-9 and res["balanced"]["a_first_min"] == 5 == res["balanced"]["a_first_max"]


def _pre_session(sel_disturbed: bool) -> dict:
    """A first session of bench_verdicts: a cold start takes 140 ms, a hot one 25 ms; the
    wrapper with no spin was 4 ms faster hot (load noise: it costs ~0.5 ms);
    ``sel_disturbed``: every selective run's eviction left the library resident (another
    process mapped it), so those runs took hot times."""
    runs = []
    for i in range(15):
        for v, st, wall in (("a", "hot", 0.025), ("spin0", "hot", 0.021), ("a", "selective", 0.140)):
            r = {"variant": v, "state": st, "round": i, "seq": len(runs), "wall_s": wall, "pages_read": 0}
            if st == "selective" and sel_disturbed:
                r["wall_s"] = 0.027
                r["interference"] = "libLLVM-16.so.1: 27000 page(s) could not be evicted before the run"
            runs.append(r)
    return {"variants": [{"name": "a"}, {"name": "spin0"}], "runs": runs, "metadata": {}}


def test_verdicts_spin_is_5_percent_of_undisturbed_runs_less_the_measured_cost():
    import bench_verdicts

    # the wrapper's cost is measured apart, not from the noisy hot medians (-4 ms here)
    assert bench_verdicts.spin_us(_pre_session(False), 0.0005) == {"hot": 750, "selective": 6500}
    # every selective run disturbed: their hot-like times would size a spin of 5% of a
    # hot start for the selective case (0.5% of a cold one); refused instead
    with pytest.raises(SystemExit, match="a/selective: 0 of 15 runs undisturbed.*could not be evicted.*--isolate"):
        bench_verdicts.spin_us(_pre_session(True), 0.0005)


@pytest.mark.skipif(not Path("/usr/bin/cc").exists(), reason="needs cc")
def test_verdicts_wrapper_cost_is_small_and_not_negative(tmp_path):
    import bench_verdicts

    for realtime in (False, True):
        cost = bench_verdicts.wrapper_cost(bench_verdicts.spinner(tmp_path), realtime, pairs=60)
        assert 0 <= cost < 0.005, cost  # one exec of a small program, never a speed-up
        assert os.sched_getscheduler(0) == os.SCHED_OTHER  # the policy is given back


def _verdicts_part(runs: int, spin: dict) -> dict:
    """A session of bench_verdicts: ``runs`` rounds of the 4 variants (hot only, enough here)."""
    cmds = {"a": "llc-16 --version", "a2": "llc-16 --version",
            **{k: f"/c/spin_exec-static {us} llc-16 --version" for k, us in spin.items()}}
    return {"variants": [{"name": k, "command": c} for k, c in cmds.items()], "metadata": {"runs": runs},
            "runs": [{"variant": v, "state": "hot", "round": i, "seq": 4 * i + j, "wall_s": 0.025}
                     for i in range(runs) for j, v in enumerate(cmds)]}


@pytest.mark.parametrize("chunk, sizes", [(None, ["8"]), (4, ["4", "4"])])
def test_verdicts_collection_resumes_with_the_spins_already_collected(tmp_path, monkeypatch, chunk, sizes):
    """An interrupted collection resumes where it stopped, in sessions of ``--chunk``
    rounds, and every new session injects the spins of the sessions before: sizing them
    anew (another wrapper cost, other load) would pool two different slowdowns."""
    import bench_verdicts

    out = tmp_path / "pool-28.json"
    parts = tmp_path / "pool-28.parts"
    parts.mkdir()
    spin = {"slow_hot": 1486, "slow_sel": 12568}
    (parts / "part000.json").write_text(json.dumps(_verdicts_part(20, spin)))
    (parts / "pre.json").write_text(json.dumps(_pre_session(False)))  # would size 750 / 6500 us
    monkeypatch.setattr(bench_verdicts, "wrapper_cost", lambda *a: 0.0005)
    monkeypatch.setattr(bench_verdicts, "spinner", lambda d: Path("/c/spin_exec-static"))
    sessions = []

    def fake_measure(f, *args):
        args = [str(a) for a in args]
        sessions.append(args)
        got = {args[i + 1]: int(args[i + 2].split()[1]) for i, a in enumerate(args) if a == "--name"
               and args[i + 1].startswith("slow_")}
        return _verdicts_part(int(args[args.index("--runs") + 1]), got)

    monkeypatch.setattr(bench_verdicts, "measure", fake_measure)
    doc = bench_verdicts.collect(28, out, 1, (), **({"chunk": chunk} if chunk else {}))
    assert [s[s.index("--runs") + 1] for s in sessions] == sizes
    assert all(f"/c/spin_exec-static {spin['slow_hot']} llc-16 --version" in s for s in sessions)
    assert all(f"/c/spin_exec-static {spin['slow_sel']} llc-16 --version" in s for s in sessions)
    assert doc["metadata"]["spin_us"] == spin and doc["metadata"]["sessions"] == 1 + len(sizes)
    assert sorted({r["round"] for r in doc["runs"]}) == list(range(28))  # renumbered after part000's 20
    assert doc["metadata"]["runs"] == 28


@pytest.mark.parametrize("hog", [True, False])
def test_verdicts_collection_records_the_cpu_hog_and_the_load(tmp_path, monkeypatch, hog):
    """The power figure is for a quiet machine: ``--no-hog`` collects with no CPU hog
    beside, and the pool says which it was and the load before each session (the old
    pool always started a hog and its description always said so)."""
    import bench_verdicts

    spin = {"slow_hot": 1486, "slow_sel": 12568}
    parts = tmp_path / "pool-8.parts"
    parts.mkdir()
    (parts / "part000.json").write_text(json.dumps(_verdicts_part(4, spin)))
    started = []
    real_popen = subprocess.Popen
    monkeypatch.setattr(bench_verdicts.subprocess, "Popen", lambda *a, **k: started.append(a) or real_popen(["true"]))
    monkeypatch.setattr(bench_verdicts, "spinner", lambda d: Path("/c/spin_exec-static"))
    monkeypatch.setattr(bench_verdicts, "measure", lambda f, *a: _verdicts_part(4, spin))
    monkeypatch.setattr(bench_verdicts.os, "getloadavg", lambda: (3.5, 2.0, 1.0))
    doc = bench_verdicts.collect(8, tmp_path / "pool-8.json", 1, (), chunk=4, hog=hog)
    assert len(started) == hog
    assert doc["metadata"]["cpu_hog"] is hog and doc["metadata"]["load_1min"] == [3.5]
    words = bench_verdicts.HOG_WORDS[hog] + bench_verdicts.load_words(doc["metadata"]["load_1min"])
    assert words == ("CPU hog beside" if hog else "no CPU hog") + "; load average 3.5-3.5 before its sessions"


def test_verdicts_assemble_renumbers_rounds_of_sessions_of_any_size():
    import bench_verdicts

    spin = {"slow_hot": 1, "slow_sel": 2}
    doc = bench_verdicts.assemble([_verdicts_part(20, spin), _verdicts_part(8, spin), _verdicts_part(4, spin)], spin)
    rounds = [sorted({r["round"] for r in doc["runs"] if r["session"] == k}) for k in range(3)]
    assert rounds == [list(range(20)), list(range(20, 28)), list(range(28, 32))]
    assert doc["metadata"]["runs"] == 32 and doc["metadata"]["sessions"] == 3


def test_verdicts_power_summary_conditions_on_the_printed_mde():
    import bench_verdicts

    # (detected, printed MDE): the conditional rate counts only trials whose MDE is at
    # most the limit (5%) or the realised slowdown (7%); a trial with no MDE is in neither
    res = [(True, 0.04), (False, 0.05), (True, 0.03), (True, 0.06), (False, 0.09), (True, None)]
    s = bench_verdicts.power_summary(res, 1.07)
    assert (s["trials"], s["detected"]) == (6, 4)
    assert (s["mde_within_limit"], s["detected_within_limit"]) == (3, 2)
    assert (s["mde_within_real"], s["detected_within_real"]) == (4, 3)
    assert s["mde_above_limit"] == 2 and s["median_mde_above_limit"] == pytest.approx(0.075)
    line = bench_verdicts.power_line(50, s, 1.07)
    assert "n= 50: detected 4/6 (67%); printed MDE <= 5% in 3 trials, detected in 2 of them (67%)" in line
    assert "MDE <= the realised 7.0% in 4, detected in 3 (75%)" in line
    none = bench_verdicts.power_summary([(False, 0.2)], 1.05)
    assert "printed MDE <= 5% in 0 trials, detected in 0 of them;" in bench_verdicts.power_line(5, none, 1.05)


def test_verdicts_study_runs_only_the_studies_asked(monkeypatch, tmp_path):
    """``--studies aa power`` skips the coverage study (minutes on a loaded machine)."""
    import bench_verdicts
    from elflayout import results as model

    ran = []
    monkeypatch.setattr(model, "read", lambda p: object())
    monkeypatch.setattr(bench_verdicts, "describe_pool", lambda pool, path: ran.append("describe"))
    for name in bench_verdicts.STUDIES:
        monkeypatch.setattr(bench_verdicts, f"study_{name}", lambda *a, name=name: ran.append(name) or 4)
    assert bench_verdicts.study(tmp_path / "p.json", 10, 1, 5, studies=["aa", "power"]) is None
    assert ran == ["describe", "aa", "power"]
    ran.clear()
    assert bench_verdicts.study(tmp_path / "p.json", 10, 1, 5) == 4
    assert ran == ["describe", "coverage", "aa", "power"]


def test_verdicts_aa_rates_leave_out_files_without_the_row():
    import bench_verdicts

    sel, hot = ("wall_s", "selective"), ("wall_s", "hot")
    # 4 files: one alarms on selective wall time; two have no selective row (every run
    # of the cell disturbed): the rate is 1 of the 2 files with the row, not 1 of 4
    rows = [({sel: True, hot: False}, 14, 2), ({sel: False, hot: False}, 14, 2), ({hot: True}, 14, 2),
            ({hot: False}, 14, 2)]
    assert bench_verdicts.alarm_rates(rows, (sel, hot)) == {sel: (1, 2), hot: (1, 4)}
    line = bench_verdicts.alarm_line(rows, (sel, hot))
    assert "wall_s:selective 1/2 (50.0%)" in line and "wall_s:hot 1/4 (25.0%)" in line
    assert "2 of these rows absent" in line and "any alarm after Holm 2/4" in line


@pytest.mark.root
def test_chromium_rootless_copy_is_nobodys_and_starts_the_copy(tmp_path, monkeypatch, request):
    """The rootless comparison measures a copy user nobody owns (else the kernel hides its
    residency), started from the copy with a fresh HOME and profile nobody can write."""
    import pwd

    import bench_chromium

    app = tmp_path / "app-src"
    (app / "sub").mkdir(parents=True)
    (app / "prog").write_text("#!/bin/sh\nprintf '%s\\n' \"$HOME\" \"$1\" > \"$1/ran\"; cp \"$1/ran\" \"$0.log\"\n")
    (app / "prog").chmod(0o755)
    (app / "sub" / "data.pak").write_bytes(b"x" * 5000)
    (app / "link").symlink_to("prog")
    monkeypatch.setattr(bench_chromium, "APP", bench_chromium.Target("fake", "prog", str(app), 'prog "$d"'))
    base = Path(tempfile.mkdtemp(dir="/var/tmp"))  # nobody cannot enter pytest's tmp_path
    request.addfinalizer(lambda: shutil.rmtree(base, ignore_errors=True))
    sh, files = bench_chromium.rootless_copy(base)
    nobody = pwd.getpwnam("nobody")
    assert files == [str(base / "app" / "prog"), str(base / "app" / "sub" / "data.pak")]
    assert all(os.lstat(p).st_uid == nobody.pw_uid for p in [base, sh, *files, base / "profiles"])
    subprocess.run([*_common.AS_NOBODY, str(sh)], check=True, cwd="/")
    home, prof = (base / "app" / "prog.log").read_text().split()
    assert home == prof and prof.startswith(str(base / "profiles"))
    assert not list((base / "profiles").iterdir())  # the profile is removed after the run


def test_verdicts_power_can_scale_the_wrappers_runs_to_an_exact_slowdown():
    """The spin is sized from a first session; when the pool's median differs, the real
    slowdown is not the 5% asked (6.7% seen). ``scaled`` sets it exactly on the wrapper's
    runs only, for the field and the stored record the comparisons read."""
    import bench_verdicts
    from elflayout.results import Run

    def run(v, w):
        return Run(variant=v, state="hot", round=0, seq=0, wall_s=w, pages_read=0, source="t", files={},
                   raw={"wall_s": w})

    rounds = {0: [run("a", 0.040), run("slow_hot", 0.042)]}
    out = bench_verdicts.scaled(rounds, "slow_hot", 1.05 / 1.0669)
    a, slow = out[0]
    assert a is rounds[0][0]
    assert slow.wall_s == pytest.approx(0.042 * 1.05 / 1.0669) and slow.value("wall_s") == pytest.approx(slow.wall_s)
    assert rounds[0][1].wall_s == 0.042  # the pool itself is left as measured
