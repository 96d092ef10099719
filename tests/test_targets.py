"""Targets: the synthetic ground-truth library (all linkers, truth checked against an
independent observation), relinked libpython (both workloads) and relinked libLLVM
(slow: byte-identical llc/opt output)."""

import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT, need_tool
from elflayout.errors import ElflayoutError
from elflayout.targets import synthetic

LINKERS = ("bfd", "gold", "lld")

# An LD_AUDIT module that logs every lazy PLT binding of an ``sy_*`` symbol. All calls
# to the library's exported functions (from the driver and between library functions)
# go through a PLT, and lazy binding happens on the first call through each PLT slot,
# so the first binding of each name gives the first-call order without touching the
# library: an observation independent of the library's own SY_HIT logging.
AUDIT_C = r"""
#define _GNU_SOURCE
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
static FILE *out;
unsigned int la_version(unsigned int v) { (void)v; return LAV_CURRENT; }
unsigned int la_objopen(struct link_map *m, Lmid_t l, uintptr_t *c)
{ (void)m; (void)l; (void)c; return LA_FLG_BINDTO | LA_FLG_BINDFROM; }
uintptr_t la_symbind64(Elf64_Sym *sym, unsigned int ndx, uintptr_t *rc, uintptr_t *dc,
                       unsigned int *flags, const char *name)
{
    (void)ndx; (void)rc; (void)dc; (void)flags;
    if (strncmp(name, "sy_", 3) == 0) {
        if (!out) out = fopen(getenv("AUDIT_OUT"), "w");
        if (out) { fprintf(out, "%s\n", name); fflush(out); }
    }
    return sym->st_value;
}
"""


@pytest.fixture(scope="session")
def synth_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("synth")


@pytest.fixture(scope="session")
def synth(synth_dir):
    """The tiny synthetic library linked with each linker (objects compiled once)."""
    for ln in LINKERS:
        need_tool(f"ld.{ln}")
    return {ln: synthetic.build(synth_dir, n_objects=20, funcs_per_object=8, seed=3, linker=ln) for ln in LINKERS}


@pytest.fixture(scope="session")
def audit_so(tmp_path_factory):
    d = tmp_path_factory.mktemp("audit")
    (d / "audit.c").write_text(AUDIT_C)
    subprocess.run(["gcc", "-shared", "-fPIC", "-O1", "-o", d / "audit.so", d / "audit.c"], check=True)
    return d / "audit.so"


def _clean_env(**extra):
    env = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "LD_BIND_NOW", synthetic.TRUTH_ENV)}
    env.update(extra)
    return env


@pytest.mark.parametrize("linker", LINKERS)
def test_synthetic_links_and_runs(synth, linker):
    b = synth[linker]
    for k in ("lib", "driver", "map", "truth"):
        assert b[k].is_file(), k
    assert b["map"].stat().st_size > 1000
    assert b["link_cmd"][0] == "gcc" and f"-fuse-ld={linker}" in b["link_cmd"]
    r = subprocess.run([str(b["driver"])], capture_output=True, text=True, env=_clean_env())
    assert r.returncode == 0, r.stderr
    assert r.stdout == b["output"] and "checksum" in r.stdout
    # the driver loads this very library (RUNPATH $ORIGIN)
    ldd = subprocess.run(["ldd", str(b["driver"])], capture_output=True, text=True).stdout
    assert str(b["lib"]) in ldd


def test_synthetic_same_output_across_linkers(synth):
    outs = {ln: b["output"] for ln, b in synth.items()}
    assert len(set(outs.values())) == 1, outs


def test_synthetic_shape(synth):
    b = synth["lld"]
    from elflayout.elfcore import ElfImage

    img = ElfImage(b["lib"])
    rel = img.reloc_tables()
    n_relative = sum(int((img.reloc_types(t) == img.relative_type()).sum()) for t in rel.values())
    assert n_relative > 1000                              # thousands of RELATIVE for 160 functions
    names = {s.name for s in img.sections}
    assert {".init_array", ".data.rel.ro", ".rodata", ".text"} <= names
    # one input section per function and per const table in the objects
    secs = subprocess.run(["readelf", "-SW", str(b["objects"][0])], capture_output=True, text=True).stdout
    assert secs.count(" .text.sy_o0000_f") == 8          # (not .rela.text.*)
    assert ".rodata.sy_o0000_f000_k" in secs
    # every function stays a distinct exported symbol (no ICF, no inlining away)
    dyn = subprocess.run(["nm", "-D", "--defined-only", str(b["lib"])], capture_output=True, text=True).stdout
    assert sum(1 for line in dyn.splitlines() if line.split()[-1].startswith("sy_o") and "_f" in line) == 160


@pytest.mark.parametrize("linker", LINKERS)
def test_synthetic_truth_matches_independent_observation(synth, linker, audit_so, tmp_path):
    b = synth[linker]
    truth = synthetic.load_truth(b["truth"])
    funcs = truth["functions"]
    assert len(funcs) == len(set(funcs)) > 20
    assert {c["phase"] for c in truth["calls"]} == {"init", "main"}
    # objects: first-call order of objects follows from the function order
    objs = []
    for c in truth["calls"]:
        if c["object"] not in objs:
            objs.append(c["object"])
    assert truth["objects"] == objs
    # 1. the truth-logging run again, in this test
    log = tmp_path / "truth.log"
    subprocess.run([str(b["driver"])], check=True, capture_output=True,
                   env=_clean_env(**{synthetic.TRUTH_ENV: str(log)}))
    plan = json.loads((b["sources_dir"] / "plan.json").read_text())
    ctor_of = {i: n for n, i in ((n, int(n[4:8])) for n in plan["ctors"])}
    total = len(plan["names"])
    logged = [plan["names"][g] if g < total else ctor_of[g - total]
              for g, _ in (map(int, line.split()) for line in log.read_text().splitlines())]
    assert logged == funcs
    # 2. LD_AUDIT lazy-binding order: independent of the library's instrumentation
    out = tmp_path / "audit.txt"
    r = subprocess.run([str(b["driver"])], capture_output=True, text=True,
                       env=_clean_env(LD_AUDIT=str(audit_so), AUDIT_OUT=str(out)))
    assert r.returncode == 0 and r.stdout == b["output"]
    wanted = set(f for f in funcs if not f.endswith("_ctor"))
    seen = []
    for name in out.read_text().split():
        if name in wanted and name not in seen:
            seen.append(name)
    assert seen == [f for f in funcs if not f.endswith("_ctor")]
    # 3. constructors run in the library's .init_array order
    ctors = [f for f in funcs if f.endswith("_ctor")]
    ia = [n for n in truth["metadata"]["init_array"] if n.endswith("_ctor")]
    assert ctors == [n for n in ia if n in ctors] and ctors


def test_synthetic_relink_with_object_order(synth):
    base = synth["gold"]
    order = list(reversed(base["objects"]))
    r = synthetic.relink(base, "gold", (), order)
    assert r["lib"] != base["lib"] and r["objects"] == order
    assert r["output"] == base["output"]                  # layout does not change the checksum
    t0, t1 = synthetic.load_truth(base["truth"]), synthetic.load_truth(r["truth"])
    assert sorted(t0["functions"]) == sorted(t1["functions"])
    c0 = [n for n in t0["metadata"]["init_array"] if n.endswith("_ctor")]
    c1 = [n for n in t1["metadata"]["init_array"] if n.endswith("_ctor")]
    assert c1 == list(reversed(c0))                        # constructor order follows link order
    # the map lists the objects in the new order
    text = r["map"].read_text()
    pos = [text.find(str(o)) for o in order[:5]]
    assert all(p >= 0 for p in pos) and pos == sorted(pos)


def test_synthetic_lld_symbol_ordering(synth, tmp_path):
    base = synth["lld"]
    funcs = synthetic.load_truth(base["truth"])["functions"]
    f = tmp_path / "order.txt"
    f.write_text("\n".join(funcs) + "\n")
    r = synthetic.relink(base, "lld", [f"-Wl,--symbol-ordering-file={f}"])
    nm = subprocess.run(["nm", "-n", str(r["lib"])], capture_output=True, text=True).stdout
    placed = [line.split()[-1] for line in nm.splitlines() if line.split()[-1] in set(funcs)]
    assert placed[:len(funcs)] == funcs
    assert r["output"] == base["output"]


def test_synthetic_bad_input(synth, tmp_path):
    with pytest.raises(ElflayoutError, match="not an object"):
        synthetic.relink(synth["bfd"], "bfd", (), ["nosuch.o"])
    with pytest.raises(ElflayoutError, match="exactly once"):
        synthetic.relink(synth["bfd"], "bfd", (), synth["bfd"]["objects"][:3])
    with pytest.raises(ElflayoutError, match="at least 1"):
        synthetic.build(tmp_path / "z", n_objects=0)
    with pytest.raises(ElflayoutError, match="unknown linker"):
        synthetic.build(tmp_path / "z", linker="nold")


def test_synthetic_cli(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT / "tools"))
    r = subprocess.run([sys.executable, "-m", "elflayout.targets.synthetic", "--objects", "3", "--funcs", "2",
                        "--seed", "1", "-o", str(tmp_path / "s")], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    assert "libsynth.so" in r.stdout and "checksum" in r.stdout
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "keep.txt").write_text("mine")
    r = subprocess.run([sys.executable, "-m", "elflayout.targets.synthetic", "--objects", "3", "--funcs", "2",
                        "-o", str(foreign)], capture_output=True, text=True, env=env)
    assert r.returncode == 2 and r.stderr.startswith("elflayout: error:") and "Traceback" not in r.stderr
    assert (foreign / "keep.txt").read_text() == "mine"


# ------------------------------------------------------------------ real targets
@pytest.fixture(scope="session")
def pythons():
    from elflayout.targets import libpython

    return {ln: libpython.prepare(ln) for ln in LINKERS}


@pytest.mark.download
@pytest.mark.slow
@pytest.mark.parametrize("linker", LINKERS)
def test_libpython_relinked_runs_workloads(pythons, linker):
    d = pythons[linker]
    assert len(d["objects"]) == 179 and d["map"].stat().st_size > 10000
    dyn = subprocess.run(["readelf", "-dW", str(d["lib"])], capture_output=True, text=True).stdout
    assert "Library soname: [libpython3.11.so.1.0]" in dyn
    for need in ("libexpat.so.1", "libz.so.1", "libm.so.6"):
        assert f"[{need}]" in dyn
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON") and k != "LD_LIBRARY_PATH"} | d["env"]
    for name, argv in d["workloads"].items():
        r = subprocess.run(argv, capture_output=True, text=True, env=env)
        assert r.returncode == 0, (name, r.stderr)
    # the launcher really runs on the relinked library, with C accelerators loaded through it
    probe = ("import ctypes, _decimal, _json; "
             "print([l.split()[-1] for l in open('/proc/self/maps') if 'libpython3.11.so' in l][0])")
    r = subprocess.run([str(d["launcher"]), "-c", probe], capture_output=True, text=True, env=env)
    assert r.returncode == 0 and r.stdout.strip() == str(d["lib"]), r.stderr


@pytest.mark.download
@pytest.mark.slow
def test_libpython_exports_match_debian(pythons):
    from elflayout.targets.libllvm import _dynsym_defined

    sys_lib = "/usr/lib/x86_64-linux-gnu/libpython3.11.so.1.0"
    if not os.path.exists(sys_lib):
        pytest.skip("Debian's libpython3.11 is not installed")
    ours = _dynsym_defined(pythons["lld"]["lib"])
    theirs = _dynsym_defined(sys_lib)
    # a newer Debian security update may add a symbol or two; nothing may go missing
    assert not (theirs - ours - {"__bss_start", "_edata", "_end"})
    assert len(ours - theirs) < 10


@pytest.mark.download
@pytest.mark.slow
def test_libpython_object_order(pythons):
    from elflayout.targets import libpython

    base = pythons["lld"]
    order = list(reversed(base["objects"]))
    d = libpython.prepare("lld", object_order=order)
    assert d["lib"] != base["lib"] and d["objects"] == order
    # lld map: input .text sections appear per object in link order
    seen = []
    for line in d["map"].read_text().splitlines():
        if ":(.text" in line:
            obj = line.split()[-1].split(":(")[0]
            if obj not in seen and "/libpython/objects/" in obj:
                seen.append(obj)
    assert len(seen) > 100 and seen == [str(o) for o in order if str(o) in seen]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")} | d["env"]
    r = subprocess.run(d["workloads"]["imports"], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    with pytest.raises(ElflayoutError, match="not one of"):
        libpython.prepare("lld", object_order=["nosuch.o"])


@pytest.mark.slow
def test_libllvm_system():
    from elflayout.targets import libllvm

    s = libllvm.system()
    assert s["lib"].exists()
    for name, argv in s["workloads"].items():
        r = subprocess.run(argv, capture_output=True)
        assert r.returncode == 0, name
    r = subprocess.run(s["workloads"]["opt"], capture_output=True, text=True)
    assert "define" in r.stdout and "sum_squares" in r.stdout


@pytest.mark.download
@pytest.mark.slow
@pytest.mark.parametrize("linker", ("lld", "gold"))
def test_libllvm_relinked_identical_output(linker):
    from elflayout.targets import libllvm

    d = libllvm.relink(linker)
    assert d["map"].stat().st_size > 1_000_000
    assert not libllvm._missing_exports(d["lib"])
    sizes = libllvm.verify(d["outdir"])      # raises unless llc/opt output is byte-identical
    assert sizes["opt -O2"] > 500 and sizes["llc -O2"] > 500
    env = os.environ | d["env"]
    r = subprocess.run(["ldd", "/usr/bin/llc-16"], capture_output=True, text=True, env=env)
    assert str(d["lib"]) in r.stdout


@pytest.mark.slow
def test_libllvm_profile_ordered_relink_example(tmp_path):
    """examples/libllvm/relink.py --ordered: profile llc-16 --version on the default lld
    relink, order, relink with lld's ordering file, verified identical llc/opt output."""
    need_tool("valgrind")
    r = subprocess.run([sys.executable, str(ROOT / "examples" / "libllvm" / "relink.py"), "--linker", "lld",
                        "--ordered", "--work", str(tmp_path)], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert "lld profile order:" in r.stdout
    assert r.stdout.count("verified byte-identical") == 2 or "(cached)" in r.stdout
    assert (tmp_path / "llc-version.profile.json").exists() and (tmp_path / "llc-version.lld.order").exists()
    assert "in profile order" in r.stdout


def test_debsrc_uses_the_mirror_apt_already_uses(tmp_path):
    """deb-src lines point where this machine's packages come from: a deb822 .sources file
    first, then a classic list (with or without options), else Debian's own mirror."""
    from elflayout.targets import debsrc

    etc = tmp_path / "apt"
    (etc / "sources.list.d").mkdir(parents=True)
    assert debsrc.machine_mirror(etc) == debsrc.DEFAULT_MIRROR
    (etc / "sources.list").write_text("# comment\ndeb [arch=amd64] http://mirror.example/debian/ bookworm main\n")
    assert debsrc.machine_mirror(etc) == "http://mirror.example/debian"
    (etc / "sources.list.d" / "debian.sources").write_text(
        "Types: deb\nURIs: http://other.example/debian\nSuites: bookworm\nComponents: main\n")
    assert debsrc.machine_mirror(etc) == "http://other.example/debian"
    osr = tmp_path / "os-release"
    osr.write_text('PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nVERSION_CODENAME=bookworm\n')
    assert debsrc.release(osr) == "bookworm"
