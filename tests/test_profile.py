"""Profiler: valgrind tool + trace backend against the synthetic ground truth, bad input, merge."""

import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import need_root_tracefs, run_cli

from elflayout.errors import ElflayoutError
from elflayout.layouts import PF_X


def need_firsttouch():
    from elflayout.profile.valgrind import tool_status

    why = tool_status()
    if why:
        pytest.skip(why)


@pytest.fixture(scope="module", params=["bfd", "lld"])
def synth(request):
    need_firsttouch()
    from elflayout.targets import synthetic

    return synthetic.build(None, n_objects=20, funcs_per_object=8, seed=0, linker=request.param)


@pytest.fixture(scope="module")
def synth_profile(synth, tmp_path_factory):
    out = tmp_path_factory.mktemp("prof") / "p.json"
    run_cli("profile", "--target", synth["lib"], "--map", synth["map"], "--data", "-o", out, "--", synth["driver"],
            check=0)
    return json.loads(out.read_text())


def _truth(synth):
    return json.loads(Path(synth["truth"]).read_text())


@pytest.mark.valgrind
def test_valgrind_function_order_equals_truth(synth, synth_profile):
    truth = _truth(synth)
    t = synth_profile["targets"][0]
    gen = [f["name"] for f in t["functions"] if f["name"].startswith("sy_o")]
    # exactly the truth: same functions (none executed only speculatively / never), same order
    assert gen == truth["functions"]
    firsts = [f["first"] for f in t["functions"]]
    assert firsts == sorted(firsts)  # (a run spanning two functions gives both the same first)


@pytest.mark.valgrind
def test_valgrind_object_order_equals_truth(synth, synth_profile):
    truth = _truth(synth)
    t = synth_profile["targets"][0]
    names = {Path(o).name for o in truth["objects"]}
    got = [Path(o["object"]).name for o in t["objects"] if Path(o["object"]).name in names]
    assert got == truth["objects"]
    # functions carry their object and input section from the link map
    f0 = next(f for f in t["functions"] if f["name"] == truth["functions"][0])
    assert Path(f0["object"]).name == truth["calls"][0]["object"]
    assert f0["section"] == ".text." + f0["name"]


@pytest.mark.valgrind
def test_valgrind_phases_match_truth(synth, synth_profile):
    truth = _truth(synth)
    ph = {f["name"]: f["phase"] for f in synth_profile["targets"][0]["functions"]}
    assert [ph[c["name"]] for c in truth["calls"]] == [c["phase"] for c in truth["calls"]]


@pytest.mark.valgrind
def test_valgrind_data_pages_show_relocation_in_loader_phase(synth, synth_profile):
    t = synth_profile["targets"][0]
    loader = [p for p in t["pages"] if p["phase"] == "loader"]
    # ld.so reads the relocation table and writes the relocated pointers before any constructor
    assert any(p["kind"] == "r" and p["section"] == ".rela.dyn" for p in loader)
    assert any(p["kind"] == "w" and p["section"] in (".data.rel.ro", ".init_array", ".got") for p in loader)
    assert not any(p["kind"] == "x" for p in loader if p["section"] == ".text")
    meta = synth_profile["metadata"]
    assert meta["backend"] == "valgrind" and meta["exit_status"] == 0 and meta["argv"] == [str(synth["driver"])]
    assert t["build_id"] and t["sha256"] and t["size"] == os.path.getsize(synth["lib"])


@pytest.mark.root
@pytest.mark.valgrind
def test_children_through_a_shell(synth, tmp_path):
    """A workload started through a shell: the library is only in the exec'd child."""
    truth = _truth(synth)
    sh = ["sh", "-c", f"true; {synth['driver']}; true"]  # not a lone command: sh forks + execs
    r = run_cli("profile", "--target", synth["lib"], "-o", tmp_path / "a.json", "--", *sh, check=2)
    assert "never loaded" in r.stderr and "--children" in r.stderr
    run_cli("profile", "--children", "--target", synth["lib"], "-o", tmp_path / "b.json", "--", *sh, check=0)
    doc = json.loads((tmp_path / "b.json").read_text())
    assert doc["metadata"]["processes"] >= 2
    t = doc["targets"][0]
    assert [f["name"] for f in t["functions"] if f["name"].startswith("sy_o")] == truth["functions"]
    need_root_tracefs()
    run_cli("profile", "--backend", "trace", "--target", synth["lib"], "-o", tmp_path / "c.json", "--", *sh, check=2)
    run_cli("profile", "--backend", "trace", "--children", "--target", synth["lib"], "-o", tmp_path / "d.json", "--",
            *sh, check=0)
    t = json.loads((tmp_path / "d.json").read_text())["targets"][0]
    assert t["pages"] or t["windows"]


@pytest.mark.valgrind
def test_objects_from_dwarf_without_map(tmp_path):
    """Without a link map, DWARF compile units name the objects (first-execution order)."""
    need_firsttouch()
    for name, body in (("a.c", "int fa(int x){return x*7+1;}\n"), ("b.c", "int fa(int);\nint fb(int x){return fa(x)+2;}\n"),
                       ("c.c", "int fc(int x){return x-3;}\n")):
        (tmp_path / name).write_text(body)
    (tmp_path / "m.c").write_text("int fb(int); int fc(int); int main(void){return fc(fb(1)) == 99;}\n")
    subprocess.run(["gcc", "-g", "-O1", "-shared", "-fPIC", "-o", "libabc.so", "c.c", "a.c", "b.c"], cwd=tmp_path,
                   check=True)
    subprocess.run(["gcc", "-o", "m", "m.c", "-L.", "-labc", "-Wl,-rpath,$ORIGIN"], cwd=tmp_path, check=True)
    out = tmp_path / "p.json"
    run_cli("profile", "--target", tmp_path / "libabc.so", "-o", out, "--", tmp_path / "m", check=0)
    t = json.loads(out.read_text())["targets"][0]
    objs = [o["object"] for o in t["objects"] if o["object"] in ("a.c", "b.c", "c.c")]
    assert objs == ["b.c", "a.c", "c.c"]  # main calls fb (b.c) → fa (a.c), then fc (c.c)
    f = {x["name"]: x for x in t["functions"]}
    assert f["fb"]["object"] == "b.c" and f["fc"]["object"] == "c.c"


@pytest.mark.valgrind
def test_chase_past_conditional_exits(tmp_path):
    """Blocks VEX translates past a conditional exit are only recorded once they execute."""
    need_firsttouch()
    (tmp_path / "d.S").write_text("""
    .text
    .globl f
    .type f,@function
f:  xor %eax,%eax
    cmp $5,%edi
    jle 1f
    mov %esi,%eax          # arm: runs only when x > 5
    add $3,%eax
    jmp 1f
1:  add $1,%eax
    cmp $7,%edi
    jg 2f
3:  add $2,%eax
    ret
2:  add $9,%eax            # runs only when x > 7
    jmp 3b
    .size f, .-f
    .section .note.GNU-stack,"",@progbits
""")
    (tmp_path / "m.c").write_text("int f(int,int,int); int main(int c, char**v){int s=0;"
                                  "for(int i=0;i<3;i++) s+=f(c-1,2,3); return s==0;}\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", tmp_path / "libd.so", tmp_path / "d.S"], check=True)
    subprocess.run(["gcc", "-o", tmp_path / "m", tmp_path / "m.c", f"-L{tmp_path}", "-ld",
                    f"-Wl,-rpath,{tmp_path}"], check=True)
    nm = subprocess.run(["nm", tmp_path / "libd.so"], capture_output=True, text=True, check=True).stdout
    f = int(next(line.split()[0] for line in nm.splitlines() if line.endswith(" f")), 16)
    from elflayout.elfcore import ElfImage

    fo = ElfImage(tmp_path / "libd.so").vaddr_to_offset(f)
    arm, far = fo + 7, fo + 0x1A  # offsets of the two conditional blocks
    for args, want_arm, want_far in (([], False, False), (["1"] * 6, True, False), (["1"] * 8, True, True)):
        out = tmp_path / f"p{len(args)}.json"
        run_cli("profile", "--target", tmp_path / "libd.so", "-o", out, "--", tmp_path / "m", *args, check=0)
        x = [p for p in json.loads(out.read_text())["targets"][0]["pages"]]
        assert x  # pages recorded
        runs = _runs(tmp_path / "libd.so", tmp_path / "m", args, tmp_path)
        executed = lambda o: any(s <= o < s + n for s, n in runs)  # noqa: E731
        assert executed(fo)
        assert executed(arm) == want_arm, (args, runs)
        assert executed(far) == want_far, (args, runs)


def _runs(lib, exe, args, tmp):
    from elflayout.profile import valgrind

    r = valgrind.run([str(lib)], [str(exe), *args], stdout=subprocess.DEVNULL)
    x = r.events[r.events["kind"] == b"x"]
    return list(zip(x["offset"].tolist(), x["length"].tolist()))


@pytest.fixture(scope="module", params=["bfd", "lld"])
def synth_big(request):
    """~200 pages of code: enough fault-around windows for the page-order check to bite."""
    need_firsttouch()
    from elflayout.targets import synthetic

    return synthetic.build(None, n_objects=80, funcs_per_object=8, seed=1, linker=request.param)


@pytest.mark.valgrind
@pytest.mark.root
def test_trace_pages_consistent_with_truth(synth_big, tmp_path):
    """Page granularity: in the executable segment, trace events (a fault on one page, or a
    fault-around window mapped) follow valgrind's first-execution page order (which equals the
    truth, above), and every executed page is inside some event. Every faulted page was read
    from disk (evicted first) during the run."""
    need_root_tracefs()
    synth = synth_big
    # a private copy: the shared cache's library may be mapped (so not evictable) by other runs
    for k in ("lib", "driver"):
        shutil.copy2(synth[k], tmp_path / Path(synth[k]).name)
    lib, driver = tmp_path / Path(synth["lib"]).name, tmp_path / Path(synth["driver"]).name
    run_cli("profile", "--target", lib, "-o", tmp_path / "v.json", "--", driver, check=0)
    vdoc = json.loads((tmp_path / "v.json").read_text())
    assert [f["name"] for f in vdoc["targets"][0]["functions"] if f["name"].startswith("sy_o")] == \
        _truth(synth)["functions"]
    out = tmp_path / "t.json"
    run_cli("profile", "--backend", "trace", "--evict", "--read-ahead-kb", "64", "--target", lib, "-o", out, "--",
            driver, check=0)
    doc = json.loads(out.read_text())
    t = doc["targets"][0]
    assert doc["metadata"]["backend"] == "trace" and doc["metadata"]["granularity"] == "page"
    # the value it ran with, read before and after the run (set under the measurement lock)
    assert doc["metadata"]["read_ahead_kb"] == 64 and doc["metadata"]["lock_waited_s"] >= 0
    assert any("fault-around" in n for n in doc["metadata"]["notes"])
    faults = [p for p in t["pages"] if p["kind"] == "t"]
    assert faults and t["reads"]
    for p in faults:
        # (the read of a page happens inside its fault handler, so it is recorded just after the fault)
        assert any(r["page"] <= p["page"] < r["page"] + r["npages"] for r in t["reads"])
    from elflayout.elfcore import ElfImage

    loads = ElfImage(lib).loads
    rx = next(s for s in loads if s.flags & PF_X)
    lo, hi = rx.offset // 4096, (rx.offset + rx.filesz - 1) // 4096
    # Events carry file pages, not the mapping: a page at a segment boundary may be mapped by
    # the neighbouring segment's VMA too. Fault-around stays inside one VMA, so a window wholly
    # inside the executable segment's pages is its own; faults on shared boundary pages are skipped.
    shared = {q for s in loads if s is not rx for q in range(s.offset // 4096, (s.offset + s.filesz - 1) // 4096 + 1)}
    inrx = lambda p: lo <= p <= hi  # noqa: E731
    vg = [p["page"] for p in vdoc["targets"][0]["pages"] if p["kind"] == "x" and inrx(p["page"])]
    events = sorted([(p["first"], {p["page"]}) for p in faults if inrx(p["page"]) and p["page"] not in shared]
                    + [(w["first"], set(range(w["page"], w["page"] + w["npages"]))) for w in t["windows"]
                       if inrx(w["page"]) and inrx(w["page"] + w["npages"] - 1)], key=lambda e: e[0])
    assert events, "no touch of the executable segment recorded"
    # Each event is triggered by the first execution of some page in it (an executed page is
    # mapped, and stays mapped), so positions in valgrind's order must be choosable in
    # non-decreasing order. (One touch can give several events: a fault-around window that could
    # not map the page yet (still being read), then the fault itself. And a window maps only the
    # pages already read, so it does not prove all its pages mapped.)
    pos = {p: i for i, p in enumerate(vg)}
    assert vg[0] in events[0][1]
    last = -1
    for first, pages in events:
        cand = sorted(pos[p] for p in pages if p in pos and pos[p] >= last)
        assert cand, (first, sorted(pages), "no executed page left to trigger this event")
        last = cand[0]
    # Nearly every executed page lies in some event. (Not all: now and then a page is mapped with
    # no fault or map_pages event in its range, seen on 6.18 with large folios.)
    seen = set().union(*(e[1] for e in events))
    assert len(set(vg) - shared - seen) <= 0.2 * len(set(vg))


# -- bad input ------------------------------------------------------------------------------

LIBC = "/usr/lib/x86_64-linux-gnu/libc.so.6"


@pytest.mark.valgrind
def test_target_never_loaded(synth, tmp_path):
    r = run_cli("profile", "--target", synth["lib"], "-o", tmp_path / "p.json", "--", "/bin/true", check=2)
    assert "never loaded" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "p.json").exists()


@pytest.mark.valgrind
@pytest.mark.parametrize("cmd,status", [(["sh", "-c", "exit 3"], 3), (["sh", "-c", "kill -SEGV $$"], -11)])
def test_workload_failure_still_writes_profile(tmp_path, cmd, status):
    need_firsttouch()
    out = tmp_path / "p.json"
    r = run_cli("profile", "--target", LIBC, "-o", out, "--", *cmd, check=1)
    assert "warning" in r.stderr and "allow-failure" in r.stderr
    doc = json.loads(out.read_text())
    assert doc["metadata"]["exit_status"] == status
    assert doc["targets"][0]["functions"]
    run_cli("profile", "--allow-failure", "--force", "--target", LIBC, "-o", out, "--", *cmd, check=0)


@pytest.mark.valgrind
def test_timeout_kills_the_workload_and_its_children(tmp_path):
    """--timeout: a workload still running is killed with its children and reported in one
    line (exit 2, no profile); its background child does not outlive it."""
    need_firsttouch()
    out, pidfile = tmp_path / "p.json", tmp_path / "child.pid"
    t = time.monotonic()
    r = run_cli("profile", "--timeout", "2", "--target", LIBC, "-o", out, "--", "sh", "-c",
                f"sleep 300 & echo $! > {pidfile}; wait", check=2)
    assert time.monotonic() - t < 60
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and "still running after 2 s: killed with its children (--timeout" in err[0], r.stderr
    assert not out.exists()
    child = int(pidfile.read_text())
    assert not Path(f"/proc/{child}").exists() or "Z" in Path(f"/proc/{child}/stat").read_text().split(")")[1][:3]


@pytest.mark.valgrind
def test_map_of_another_link(synth, tmp_path):
    from elflayout.targets import synthetic

    other = synthetic.build(None, n_objects=20, funcs_per_object=8, seed=0,
                            linker="lld" if synth["linker"] == "bfd" else "bfd")
    r = run_cli("profile", "--target", synth["lib"], "--map", other["map"], "-o", tmp_path / "p.json", "--",
                synth["driver"], check=2)
    assert "does not describe" in r.stderr and not (tmp_path / "p.json").exists()


@pytest.mark.valgrind
def test_workload_sigkilled_from_outside(tmp_path):
    """SIGKILL from another process gives valgrind no chance to finish its log: what was flushed
    (mappings at once, events in chunks) still makes a profile, with a note and a warning.
    (A workload that kills itself goes through valgrind's kill wrapper: the log is complete.)"""
    need_firsttouch()
    out = tmp_path / "p.json"
    r = run_cli("profile", "--target", LIBC, "-o", out, "--", "sh", "-c", "sh -c 'kill -KILL $PPID'; true", check=1)
    assert "signal 9" in r.stderr and "Traceback" not in r.stderr
    doc = json.loads(out.read_text())
    assert any("no end record" in n for n in doc["metadata"]["notes"])
    assert doc["targets"][0]["mappings"]


def test_raw_log_truncated(tmp_path):
    from elflayout.profile import valgrind

    with pytest.raises(ElflayoutError, match="not a firsttouch log"):
        (tmp_path / "bad").write_bytes(b"hello")
        valgrind.read_log(tmp_path / "bad")
    head = b"FIRSTTOUCH 1\nrecsize 32\ndata 0\npid 1\nt0 5\nexe /x\ntarget 0 1 2 /l.so\n--\n"
    rec = np.zeros(2, valgrind.REC_DTYPE)
    rec["kind"] = ord("m"), ord("x")
    rec["seq"] = 0, 1
    rec["addr"] = 0x1000, 0x1010
    rec["len"] = 0x2000, 4
    rec["t_ns"] = 0x3000, 7
    (tmp_path / "log").write_bytes(head + rec.tobytes() + b"\0" * 5)
    log = valgrind.read_log(tmp_path / "log")
    assert not log.complete and any("partial record" in n for n in log.notes)
    ev, marks = valgrind.combine([log])
    assert ev["offset"].tolist() == [0x3010] and ev["kind"].tolist() == [b"x"]
    assert marks["first_map_seq"] == {0: 0}


def test_tool_not_built(tmp_path):
    r = run_cli("profile", "--target", LIBC, "-o", tmp_path / "p.json", "--", "/bin/true", check=2,
                env={"ELFLAYOUT_VALGRIND_LIB": str(tmp_path / "nowhere")})
    assert "make bootstrap" in r.stderr and "Traceback" not in r.stderr


def test_bad_arguments(tmp_path):
    out = tmp_path / "p.json"
    assert "no workload" in run_cli("profile", "--target", LIBC, "-o", out, check=2).stderr
    assert "no such file" in run_cli("profile", "--target", tmp_path / "x.so", "-o", out, "--", "true", check=2).stderr
    out.write_text("{}")
    assert "--force" in run_cli("profile", "--target", LIBC, "-o", out, "--", "true", check=2).stderr
    r = run_cli("profile", "--backend", "trace", "--data", "--target", LIBC, "-o", tmp_path / "q.json", "--", "true",
                check=2)
    assert "--data" in r.stderr


# -- format and merge -----------------------------------------------------------------------

def _doc(path, build_id, funcs, pages=(), argv=("w",)):
    from elflayout.profile import model

    fl = [{"name": n, "offset": o, "size": 8, "section": ".text", "object": ob, "first": s} for n, o, ob, s in funcs]
    objs, seen = [], set()
    for f in fl:
        if f["object"] not in seen:
            seen.add(f["object"])
            objs.append({"object": f["object"], "first": f["first"]})
    pg = [{"page": p, "kind": k, "first": s} for p, k, s in pages]
    meta = model.base_metadata(list(argv), "valgrind", "block")
    return model.new_profile(meta, [{"path": path, "build_id": build_id, "size": 1, "sha256": "00",
                                     "functions": fl, "sections": [], "objects": objs, "pages": pg, "reads": []}])


def test_validate_rejects_unordered(tmp_path):
    from elflayout.profile import model

    d = _doc("/l.so", "aa", [("a", 0, "a.o", 5), ("b", 8, "b.o", 2)])
    with pytest.raises(ElflayoutError, match="first-access order"):
        model.validate(d)


def test_merge_concat_and_rank(tmp_path):
    from elflayout.profile import merge, model

    a = _doc("/l.so", "aa", [("f1", 0, "a.o", 0), ("f2", 8, "b.o", 1), ("f3", 16, "a.o", 2), ("f4", 24, "c.o", 3)],
             pages=[(0, "x", 0), (3, "x", 3)])
    b = _doc("/l.so", "aa", [("f5", 32, "d.o", 0), ("f2", 8, "b.o", 1)], pages=[(3, "x", 0), (5, "x", 1)])
    a, b = model.parse(a), model.parse(b)
    m = merge.merge([a, b], force=False, rule="concat")
    t = m["targets"][0]
    assert [f["name"] for f in t["functions"]] == ["f1", "f2", "f3", "f4", "f5"]
    assert [o["object"] for o in t["objects"]] == ["a.o", "b.o", "c.o", "d.o"]
    assert [(p["page"], p["kind"]) for p in t["pages"]] == [(0, "x"), (3, "x"), (5, "x")]
    for k in ("functions", "objects", "pages"):
        firsts = [e["first"] for e in t[k]]
        assert firsts == sorted(set(firsts)), k  # renumbered, strictly increasing here
    r = merge.merge([a, b], rule="rank")["targets"][0]
    # f5 is first in b (relative position 0) and ties with f1 (0 in a): a wins ties by order
    assert [f["name"] for f in r["functions"]][:2] in (["f1", "f5"], ["f5", "f1"])
    assert [f["name"] for f in r["functions"]].index("f2") < [f["name"] for f in r["functions"]].index("f4")


def test_merge_keeps_the_data_flag_its_inputs_agree_on():
    """A merge of ``--data`` runs (``profile --repeat``) says it recorded data, so a cache
    keyed on the flag (bench_pipeline.cached_profile) reuses it; inputs that differ say nothing."""
    from elflayout.profile import merge, model

    def doc(data):
        d = _doc("/l.so", "aa", [("f1", 0, "a.o", 0)])
        if data is not None:
            d["metadata"]["data"] = data
        return model.parse(d)

    assert merge.merge([doc(True), doc(True)])["metadata"]["data"] is True
    assert merge.merge([doc(False), doc(False)])["metadata"]["data"] is False
    assert "data" not in merge.merge([doc(True), doc(False)])["metadata"]
    assert "data" not in merge.merge([doc(True), doc(None)])["metadata"]


def test_merge_phased_keeps_a_short_workloads_code_together(tmp_path):
    """Two short workloads (s1, s2: a startup, and b printed by the startups only) and
    three long ones (the startup, then c*, and l* run by fewer): ``shared`` puts b after
    c*, which more workloads run; ``phased`` puts everything the short phase touches
    first, then the long phase's code by ``shared``; ``recombine`` agrees with ``merge``."""
    from elflayout.profile import merge, model

    start = [("a1", 0, "a.o"), ("a2", 8, "a.o")]
    short = [start + [("b", 16, "b.o")]] * 2
    common = [(f"c{i}", 16 + 8 * i, "c.o") for i in range(1, 6)]
    long = [start + common + [("l1", 64, "l.o")], start + common, start + common + [("l2", 72, "l.o")]]
    docs = [model.parse(_doc("/l.so", "aa", [(n, o, ob, i) for i, (n, o, ob) in enumerate(fs)]))
            for fs in short + long]
    names = lambda m: [f["name"] for f in m["targets"][0]["functions"]]  # noqa: E731
    assert merge.phases([3, 3, 7, 6, 7]) == [0, 0, 1, 0, 1]  # more than twice the smallest of a phase: the next
    assert merge.phases([3, 3, 7, 7, 7]) == [0, 0, 1, 1, 1]
    c = ["c1", "c2", "c3", "c4", "c5"]
    assert names(merge.merge(docs, rule="shared")) == ["a1", "a2", *c, "b", "l1", "l2"]
    m = merge.merge(docs, rule="phased", workloads=[{"name": f"w{i}"} for i in range(len(docs))])
    assert names(m) == ["a1", "a2", "b", *c, "l1", "l2"]
    re = merge.recombine(model.parse(merge.merge(docs, rule="shared", workloads=[{"name": f"w{i}"} for i in range(5)])),
                         "phased")
    assert [f.name for f in re.targets[0].functions] == names(m)


def test_merge_refuses_other_build(tmp_path):
    from elflayout.fileio import dump_json

    dump_json(_doc("/l.so", "aa", [("f1", 0, "a.o", 0)]), tmp_path / "a.json")
    dump_json(_doc("/l.so", "bb", [("f1", 0, "a.o", 0)]), tmp_path / "b.json")
    r = run_cli("merge", tmp_path / "a.json", tmp_path / "b.json", "-o", tmp_path / "m.json", check=2)
    assert "different build" in r.stderr and "--force" in r.stderr
    run_cli("merge", "--force", tmp_path / "a.json", tmp_path / "b.json", "-o", tmp_path / "m.json", check=0)
    r = run_cli("merge", tmp_path / "a.json", tmp_path / "nope.json", "-o", tmp_path / "n.json", check=2)
    assert "no such file" in r.stderr


# -- real targets ---------------------------------------------------------------------------

@pytest.mark.valgrind
@pytest.mark.slow
def test_llc_version_functions(tmp_path):
    need_firsttouch()
    need_tool_llc = shutil.which("llc-16")
    if not need_tool_llc:
        pytest.skip("llc-16 is not installed (run: make bootstrap)")
    out = tmp_path / "llc.json"
    run_cli("profile", "--target", "/usr/lib/x86_64-linux-gnu/libLLVM-16.so.1", "-o", out, "--", "llc-16",
            "--version", check=0)
    t = json.loads(out.read_text())["targets"][0]
    assert len(t["functions"]) >= 3600  # an independent callgrind count gives 3,656
    assert sum(f["source"] == "dynsym" for f in t["functions"]) > 300  # named where exported
    assert all(f["source"] in ("dynsym", "eh_frame") for f in t["functions"])  # stripped: no symtab
    assert t["phases"]["main_start"] is not None and {f["phase"] for f in t["functions"]} >= {"init", "main"}


@pytest.mark.download
@pytest.mark.valgrind
@pytest.mark.slow
def test_libpython_import_objects_via_linkmap(tmp_path):
    need_firsttouch()
    from elflayout.targets import libpython

    d = libpython.prepare("bfd")
    out = tmp_path / "py.json"
    env = [a for k, v in d["env"].items() for a in ("--env", f"{k}={v}")]
    run_cli("profile", *env, "--target", d["lib"], "--map", d["map"], "-o", out, "--", *d["workloads"]["imports"],
            check=0)
    t = json.loads(out.read_text())["targets"][0]
    assert len(t["functions"]) > 1000
    with_obj = [f for f in t["functions"] if f["object"] and f["object"].endswith(".o")]
    assert len(with_obj) >= 0.95 * len(t["functions"])
    objs = [Path(o["object"]).name for o in t["objects"]]
    assert any("ceval" in o for o in objs) and any("pylifecycle" in o for o in objs)
    # every object a profiled function belongs to is in the objects list, once
    assert len(objs) == len(set(objs)) and {Path(f["object"]).name for f in with_obj} <= set(objs)


# -- limits of the valgrind tool are counted, not silent ---------------------------------------

@pytest.mark.valgrind
def test_tool_counts_mappings_past_its_table(tmp_path, monkeypatch):
    """With a 1-entry mapping table (--ft-max-maps=1) libc's other mappings cannot be
    recorded: the tool counts them in its end records and the profile says so."""
    need_firsttouch()
    from elflayout.profile import record, valgrind

    cmd = valgrind.valgrind_command([LIBC], str(tmp_path / "ft.log"), False)
    subprocess.run(["valgrind", *cmd[1:3], "--ft-max-maps=1", *cmd[3:], "/bin/true"], check=True,
                   env=dict(os.environ, VALGRIND_LIB=str(valgrind.tool_dir())))
    log = valgrind.read_log(tmp_path / "ft.log")
    assert log.complete and log.dropped.get(1, 0) >= 1
    assert any("mappings past the tool's table" in w for w in log.warnings())
    # the same through `profile`: a warning in metadata.warnings (and on stderr)
    real = valgrind.valgrind_command
    monkeypatch.setattr(valgrind, "valgrind_command",
                        lambda *a, **k: [*real(*a, **k)[:3], "--ft-max-maps=1", *real(*a, **k)[3:]])
    setup = record.prepare(record.Setup(targets=[LIBC]))
    doc = record.record(setup, record.Workload("true", ["/bin/true"]))
    assert doc["metadata"]["dropped"]["1"] >= 1
    assert any("mappings past" in w for w in doc["metadata"]["warnings"])
    # and an unconstrained run drops nothing
    monkeypatch.setattr(valgrind, "valgrind_command", real)
    doc = record.record(setup, record.Workload("true", ["/bin/true"]))
    assert doc["metadata"]["dropped"] == {} and doc["metadata"]["warnings"] == []


def test_drop_records_are_read(tmp_path):
    from elflayout.profile import valgrind

    head = b"FIRSTTOUCH 1\nrecsize 32\ndata 0\npid 1\nt0 5\nexe /x\ntarget 0 1 2 /l.so\n--\n"
    rec = np.zeros(3, valgrind.REC_DTYPE)
    rec["kind"] = ord("D"), ord("D"), ord("Z")
    rec["flags"] = 2, 5, 0
    rec["addr"] = 7, 3, 0
    (tmp_path / "log").write_bytes(head + rec.tobytes())
    log = valgrind.read_log(tmp_path / "log")
    assert log.complete and log.dropped == {2: 7, 5: 3}
    w = log.warnings()
    assert any("7 instruction runs" in x for x in w) and any("3 records lost to failed writes" in x for x in w)


# -- a set of workloads: one command under several stdout conditions -------------------------

STDOUT_LIB = r"""
int on_tty(int x) { return x + 1; }
int on_pipe(int x) { return x + 2; }
int on_file(int x) { return x + 3; }
int on_null(int x) { return x + 4; }
int common(int x) { return x * 2; }
"""
STDOUT_MAIN = r"""
#include <sys/stat.h>
#include <unistd.h>
int on_tty(int), on_pipe(int), on_file(int), on_null(int), common(int);
int main(void) {
    struct stat st;
    int r = common(1);
    if (isatty(1)) r += on_tty(r);
    else if (fstat(1, &st) == 0 && S_ISFIFO(st.st_mode)) r += on_pipe(r);
    else if (S_ISREG(st.st_mode)) r += on_file(r);
    else r += on_null(r);
    return r == 0;
}
"""


@pytest.fixture(scope="module")
def stdout_prog(tmp_path_factory):
    d = tmp_path_factory.mktemp("stdout")
    (d / "w.c").write_text(STDOUT_LIB)
    (d / "m.c").write_text(STDOUT_MAIN)
    subprocess.run(["gcc", "-shared", "-fPIC", "-O1", "-o", d / "libw.so", d / "w.c"], check=True)
    subprocess.run(["gcc", "-O1", "-o", d / "m", d / "m.c", f"-L{d}", "-lw", f"-Wl,-rpath,{d}"], check=True)
    return d


@pytest.mark.valgrind
def test_workload_set_under_stdout_conditions(stdout_prog, tmp_path):
    """Each stdout condition runs its own code; the merged profile holds all of it, and
    each entry's ranks say which conditions touched it."""
    need_firsttouch()
    from elflayout.profile import merge, model

    d = stdout_prog
    out = tmp_path / "set.json"
    r = run_cli("profile", "--target", d / "libw.so", "-o", out, "--stdout", "tty", "--stdout", "pipe",
                "--stdout", "file", "--stdout", "null", "--", d / "m", check=0)
    assert "4 workloads merged" in r.stdout
    p = model.load(out)
    names = [w["name"] for w in p.workloads]
    assert names == ["m >tty", "m >pipe", "m >file", "m >null"]
    t = p.targets[0]
    ranks = {f.name: f.ranks for f in t.functions}
    assert {"on_tty", "on_pipe", "on_file", "on_null", "common"} <= set(ranks)
    for i, fn in enumerate(("on_tty", "on_pipe", "on_file", "on_null")):
        assert [r is not None for r in ranks[fn]] == [j == i for j in range(4)], (fn, ranks[fn])
    assert all(r is not None for r in ranks["common"])
    # one workload's own view: only what it touched, in its own order
    v = merge.workload_view(p, 1).targets[0]
    got = [f.name for f in v.functions]
    assert "on_pipe" in got and "on_tty" not in got and got.index("common") < got.index("on_pipe")
    # re-combining by mean puts common (touched by all) before the per-condition functions
    m = [f.name for f in merge.recombine(p, "mean").targets[0].functions]
    assert all(m.index("common") < m.index(fn) for fn in ("on_tty", "on_pipe", "on_file", "on_null"))


def test_workload_names_and_bad_workloads(tmp_path):
    r = run_cli("profile", "--target", LIBC, "-o", tmp_path / "p.json", "--workload", "true", check=2)
    assert "NAME=VALUE" in r.stderr
    r = run_cli("profile", "--target", LIBC, "-o", tmp_path / "p.json", "--workload", "a=true",
                "--workload", "a=false", check=2)
    assert "given twice" in r.stderr
    r = run_cli("profile", "--target", LIBC, "-o", tmp_path / "p.json", "--workload", "a='unclosed", check=2)
    assert "Traceback" not in r.stderr and "--workload" in r.stderr


# -- --repeat: a program whose code path changes from run to run -------------------------

ALTERNATE_MAIN = r"""
#include <stdio.h>
#include <stdlib.h>
int on_tty(int), on_pipe(int), common(int);
int main(void) {
    /* The path alternates between runs: a counter kept in a file (like a hash seed or
       the garbage collector's timing, it differs from one run to the next). */
    const char *path = getenv("COUNTER_FILE");
    int n = 0;
    FILE *f = fopen(path, "r");
    if (f) { if (fscanf(f, "%d", &n) != 1) n = 0; fclose(f); }
    f = fopen(path, "w");
    fprintf(f, "%d\n", n + 1);
    fclose(f);
    int r = common(n);
    r += (n & 1) ? on_pipe(r) : on_tty(r);
    return r < 0;
}
"""


@pytest.mark.valgrind
def test_repeat_records_every_run_path(stdout_prog, tmp_path):
    """--repeat N runs a workload N times and merges the runs: code only some runs
    execute is in the profile, and each run is a workload of its own."""
    need_firsttouch()
    from elflayout.profile import model

    d = stdout_prog
    (tmp_path / "alt.c").write_text(ALTERNATE_MAIN)
    exe = tmp_path / "alt"
    subprocess.run(["gcc", "-O1", "-o", exe, tmp_path / "alt.c", f"-L{d}", "-lw", f"-Wl,-rpath,{d}"], check=True)
    env = ["--env", f"COUNTER_FILE={tmp_path / 'counter'}"]
    one = tmp_path / "one.json"
    run_cli("profile", "--target", d / "libw.so", "-o", one, *env, "--", exe)
    names1 = {f.name for f in model.load(one).targets[0].functions}
    assert "on_tty" in names1 and "on_pipe" not in names1  # counter 0: one path only
    out = tmp_path / "rep.json"
    r = run_cli("profile", "--target", d / "libw.so", "-o", out, *env, "--repeat", "2", "--", exe)
    assert "2 workloads merged" in r.stdout
    p = model.load(out)
    assert [w["name"] for w in p.workloads] == ["alt #1", "alt #2"]
    ranks = {f.name: f.ranks for f in p.targets[0].functions}
    assert [x is not None for x in ranks["on_pipe"]] == [True, False]  # counter 1, then 2
    assert [x is not None for x in ranks["on_tty"]] == [False, True]
    assert all(x is not None for x in ranks["common"])
    r = run_cli("profile", "--target", d / "libw.so", "-o", tmp_path / "x.json", "--repeat", "0", "--", exe, check=2)
    assert "--repeat 0" in r.stderr and "Traceback" not in r.stderr


# -- --clean-env, and native faults fed back (merge --faults) -------------------------------

ENV_MAIN = r"""
#include <stdlib.h>
int on_tty(int), on_pipe(int), common(int);
int main(void) {
    int r = common(1);
    r += getenv("ELFLAYOUT_TEST_COND") ? on_tty(r) : on_pipe(r);
    return r < 0;
}
"""


@pytest.mark.valgrind
def test_clean_env_drops_the_callers_variables(stdout_prog, tmp_path):
    """--clean-env: the caller's variables do not reach the workload, --env ones do."""
    need_firsttouch()
    from elflayout.profile import model

    d = stdout_prog
    (tmp_path / "e.c").write_text(ENV_MAIN)
    exe = tmp_path / "e"
    subprocess.run(["gcc", "-O1", "-o", exe, tmp_path / "e.c", f"-L{d}", "-lw", f"-Wl,-rpath,{d}"], check=True)
    caller = {"ELFLAYOUT_TEST_COND": "1"}
    got = {}
    for name, extra in (("inherit", []), ("clean", ["--clean-env"]),
                        ("clean+env", ["--clean-env", "--env", "ELFLAYOUT_TEST_COND=1"])):
        out = tmp_path / f"{name}.json"
        run_cli("profile", "--target", d / "libw.so", "-o", out, *extra, "--", exe, env=caller, check=0)
        p = model.load(out)
        got[name] = {f.name for f in p.targets[0].functions} & {"on_tty", "on_pipe"}
        assert bool(p.metadata.get("clean_env")) == ("clean" in name)
    assert got == {"inherit": {"on_tty"}, "clean": {"on_pipe"}, "clean+env": {"on_tty"}}


PAGED_LIB = "".join(f"__attribute__((aligned(4096))) int f{i}(int x) {{ return x * {i + 3} + {i}; }}\n"
                    for i in range(200))
PAGED_MAIN = r"""
#include <stdlib.h>
int f0(int), f1(int), f120(int);
int main(void) {
    int r = f1(f0(1));
    if (getenv("EXTRA")) r += f120(r);  /* only in the traced (native) runs */
    return r < 0;
}
"""


@pytest.mark.root
@pytest.mark.valgrind
def test_merge_faults_appends_natively_faulted_functions(tmp_path):
    """A valgrind profile without f120; a trace of a run that calls it faults on f120's
    page (every function has a page of its own; f120 is far from the read-arounds of f0's
    page and of .data at the end of the file);
    merge --faults appends f120, after everything the profile had."""
    need_firsttouch()
    need_root_tracefs()
    from elflayout.profile import model
    from elflayout.targets import cache_dir

    d = Path(tempfile.mkdtemp(prefix="faults-", dir=cache_dir("test-feedback")))  # on disk: evictable
    try:
        (d / "p.c").write_text(PAGED_LIB)
        (d / "m.c").write_text(PAGED_MAIN)
        subprocess.run(["gcc", "-shared", "-fPIC", "-O1", "-o", d / "libp.so", d / "p.c"], check=True)
        subprocess.run(["gcc", "-O1", "-o", d / "m", d / "m.c", f"-L{d}", "-lp", f"-Wl,-rpath,{d}"], check=True)
        prof, trace, out = tmp_path / "v.json", tmp_path / "t.json", tmp_path / "fb.json"
        run_cli("profile", "--target", d / "libp.so", "-o", prof, "--", d / "m", check=0)
        assert "f120" not in {f.name for f in model.load(prof).targets[0].functions}
        run_cli("profile", "--backend", "trace", "--evict", "--read-ahead-kb", "128", "--target", d / "libp.so",
                "--env", "EXTRA=1", "-o", trace, "--", d / "m", check=0)
        r = run_cli("merge", prof, "--faults", trace, "-o", out, check=0)
        assert "functions on them appended" in r.stdout
        fs = model.load(out).targets[0].functions
        names = [f.name for f in sorted(fs, key=lambda f: f.first)]
        assert "f120" in names and names.count("f0") == 1
        before = {f.name for f in model.load(prof).targets[0].functions}
        assert all(n not in before for n in names[len(before):]) and names[:len(before)] == [
            f.name for f in sorted(model.load(prof).targets[0].functions, key=lambda f: f.first)]
        # bad use: two profiles, or a valgrind profile given as the trace
        r = run_cli("merge", prof, prof, "--faults", trace, "-o", tmp_path / "x.json", check=2)
        assert "one profile" in r.stderr
        r = run_cli("merge", prof, "--faults", prof, "-o", tmp_path / "y.json", check=2)
        assert "not a --backend trace profile" in r.stderr and "Traceback" not in r.stderr
    finally:
        shutil.rmtree(d, ignore_errors=True)
