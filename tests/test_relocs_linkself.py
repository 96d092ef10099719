"""``elflayout link --pack self``: the link-time self-applying form (relrhack's way), for
libraries lld links with no room for the post-link form.

A real library is linked with lld 16 through the path and checked; its driver runs
through it on this machine and, in a Debian 11 root (glibc 2.31), with byte-identical
output, while the plain ``-z pack-relative-relocs`` link does not load there. The
driver is a non-PIE program whose COPY relocation copies an exported pointer array
of the library before DT_INIT runs: those pointers must stay in RELA.
"""

import json
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from elftools.elf.enums import ENUM_RELOC_TYPE_x64

from conftest import need_tool, run_cli
from oldglibc_root import bullseye_root, run_in
from relocs_testlib import compile_lib
from elflayout import elfcore
from elflayout import layouts as L
from elflayout.relocs import linkself, realload, simload


def _lld16(tmp_path) -> Path:
    """A directory whose ld.lld is lld 16 (Debian's default lld 14 lacks -z pack-relative-relocs)."""
    need_tool("ld.lld-16")
    d = tmp_path / "lld16"
    d.mkdir(exist_ok=True)
    if not (d / "ld.lld").exists():
        (d / "ld.lld").symlink_to(shutil.which("ld.lld-16"))
    return d


def _has_copy_reloc(exe) -> bool:
    with elfcore.ElfImage(exe) as img:
        return any(np.any(img.reloc_types(t) == ENUM_RELOC_TYPE_x64["R_X86_64_COPY"])
                   for t in img.reloc_tables().values())


def _link(tmp_path, obj, out, *opts, check=0, bindir=None):
    bindir = bindir or _lld16(tmp_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    return run_cli("link", *opts, "--linker", "lld", "--", "gcc", "-B", bindir, "-fuse-ld=lld", "-shared",
                   "-Wl,-soname,libt.so", "-o", out, obj, check=check)


def test_link_time_self_form_on_this_machine(tmp_path):
    obj = compile_lib(tmp_path, n_tables=12, ifunc=False)
    plain, relr, self_ = (tmp_path / d / "libt.so" for d in ("plain", "relr", "self"))
    _link(tmp_path, obj, relr, "--pack", "relr")
    r = _link(tmp_path, obj, self_, "--pack", "self", "--check")
    assert "real load equal" in r.stderr and "back to RELA for ld.so" in r.stderr
    plain.parent.mkdir()
    subprocess.run(["gcc", "-B", _lld16(tmp_path), "-fuse-ld=lld", "-shared", "-Wl,-soname,libt.so", "-o", plain,
                    obj], check=True)
    with elfcore.ElfImage(self_) as img:
        assert img.dt(L.DT_RELR) is None and L.DT_INIT in img.dynamic
        assert b"GLIBC_ABI_DT_RELR" not in bytes(img.mm[img.section(".gnu.version_r").offset:][:256])
    lo = simload.Loaded(self_)
    try:
        ap = lo.applier()
        assert ap is not None and ap["relro_len"] > 0  # .data.rel.ro made writable while applying
        assert lo.tag(L.DT_RELR | linkself.DT_RELRHACK_BIT) == ap["relr_start"]  # relrhack's hidden tag
    finally:
        lo.close()
    assert realload.dlopen_check(self_) is None
    # `relocs` counts the self-applied table, and no DT_RELR.
    doc = json.loads(run_cli("relocs", self_, "--json", check=0).stdout)
    sa = doc["self_applied"]
    assert sa["present"] and sa["form"] == "link-time" and sa["routine"] == ap["entry"]
    assert sa["count"] == elfcore.relr_decode(np.fromfile(self_, np.uint64, sa["bytes"] // 8, offset=sa["offset"])).size
    assert sa["count"] > 1000 and not doc["relr"]["present"]
    assert sum(d.get("SELF", 0) for d in doc["by_target_section"].values()) == sa["count"]
    assert f"self-applied" in run_cli("relocs", self_, check=0).stdout
    rdoc = json.loads(run_cli("relocs", relr, "--json", check=0).stdout)
    assert rdoc["relr"]["count"] == sa["count"] + doc["relative"]["count"] - rdoc["relative"]["count"]
    assert not rdoc["self_applied"]["present"]
    # mutable_ptrs is exported and holds pointers: its RELATIVE relocations went back to RELA.
    with elfcore.ElfImage(self_) as img:
        sym = next(s for s in img.elf.get_section_by_name(".dynsym").iter_symbols() if s.name == "mutable_ptrs")
        # lld keeps .rela.dyn .relr.dyn .rela.plt .elflayout.rela back to back: rewritten in place.
        assert img.section(".rela.dyn").addr == img.dt(L.DT_RELA) and img.section(".rela.dyn").type == "SHT_RELA"
        assert img.section(linkself.RELA_SECTION).size < 1024
        rela = img.reloc_tables()[".rela.dyn"]
        lo_, hi_ = sym["st_value"], sym["st_value"] + sym["st_size"]
        assert np.count_nonzero((rela["r_offset"] >= lo_) & (rela["r_offset"] < hi_)) == 3
    main = tmp_path / "main.c"
    outs = []
    for lib in (plain, relr, self_):
        exe = lib.parent / "main"
        subprocess.run(["gcc", "-no-pie", "-fno-pic", str(main), "-o", str(exe), f"-L{lib.parent}", "-lt",
                        "-Wl,-rpath,$ORIGIN"], check=True)
        assert _has_copy_reloc(exe)
        outs.append(subprocess.run([str(exe)], capture_output=True, check=True).stdout)
    assert outs[0] == outs[1] == outs[2] and b"lib_report" in outs[0]


def test_link_time_self_form_refusals(tmp_path):
    obj = compile_lib(tmp_path, n_tables=2, ifunc=False)
    out = tmp_path / "x" / "libt.so"
    r = run_cli("link", "--pack", "self", "--linker", "gold", "--", "gcc", "-fuse-ld=gold", "-shared", "-o", out,
                obj, check=2)
    assert "gold has no -z pack-relative-relocs" in r.stderr
    r = _link(tmp_path, obj, out, "--check", check=2)
    assert "only with --pack self" in r.stderr
    r = _link(tmp_path, obj, out, "--pack", "self", "--root", tmp_path, check=2)
    assert "--root: only with --check" in r.stderr
    r = _link(tmp_path, obj, out, "--pack", "self", "--split", check=2)
    assert "needs --profile" in r.stderr
    # lld 14 ignores -z pack-relative-relocs: nothing packed, refused with the reason.
    need_tool("ld.lld-14")
    old = tmp_path / "lld14"
    old.mkdir()
    (old / "ld.lld").symlink_to(shutil.which("ld.lld-14"))
    r = _link(tmp_path, obj, out, "--pack", "self", check=2, bindir=old)
    assert "no DT_RELR" in r.stderr and not out.exists()
    # An ifunc's resolver runs while ld.so relocates, before the routine: refused.
    ifunc = tmp_path / "ifunc"
    ifunc.mkdir()
    r = _link(tmp_path, compile_lib(ifunc, n_tables=2), out, "--pack", "self", check=2)
    assert "defines 1 ifunc symbol" in r.stderr and str(out) in r.stderr and "elflayout-self-" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and not out.exists()


@pytest.mark.root
@pytest.mark.download
@pytest.mark.slow
def test_link_time_self_form_in_an_old_root(tmp_path):
    root = bullseye_root()
    lib_dir = root / "usr/lib/x86_64-linux-gnu"
    work = root / "opt/elflayout/linkself"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    obj = compile_lib(work, n_tables=12, ifunc=False)
    libs = {d: work / d / "libt.so" for d in ("plain", "relr", "self")}
    libs["plain"].parent.mkdir()
    subprocess.run(["gcc", "-B", _lld16(tmp_path), "-fuse-ld=lld", "-shared", "-Wl,-soname,libt.so", "-o",
                    libs["plain"], obj], check=True)
    _link(tmp_path, obj, libs["relr"], "--pack", "relr")
    r = _link(tmp_path, obj, libs["self"], "--pack", "self", "--check", "--root", root)
    assert "real load equal" in r.stderr and f"loads in {root}" in r.stderr
    # The driver: non-PIE (a COPY relocation of mutable_ptrs), linked against the root's glibc.
    mo = work / "main.o"
    subprocess.run(["gcc", "-O1", "-fno-pic", "-c", work / "main.c", "-o", mo], check=True)
    exe = work / "main"
    subprocess.run(["gcc", "-no-pie", "-nostdlib", "-o", exe, lib_dir / "crt1.o", lib_dir / "crti.o", mo,
                    libs["plain"], root / "lib/x86_64-linux-gnu/libc.so.6", lib_dir / "libc_nonshared.a",
                    lib_dir / "crtn.o", "-Wl,--dynamic-linker=/lib64/ld-linux-x86-64.so.2"], check=True)
    assert _has_copy_reloc(exe)
    inside = {d: "/" + str(p.parent.relative_to(root)) for d, p in libs.items()}
    runs = {d: run_in(root, ["/opt/elflayout/linkself/main"], libdir=inside[d]) for d in libs}
    assert runs["plain"].returncode == 0 and b"lib_report" in runs["plain"].stdout, runs["plain"].stderr
    assert runs["self"].returncode == 0, runs["self"].stderr[-300:]
    assert runs["self"].stdout == runs["plain"].stdout
    assert runs["relr"].returncode != 0 and b"GLIBC_ABI_DT_RELR" in runs["relr"].stderr
    # On this machine (glibc >= 2.36) all three load.
    for d in libs:
        assert realload.dlopen_check(libs[d]) is None


@pytest.mark.download
@pytest.mark.slow
def test_link_time_self_form_of_libpython(tmp_path):
    """A real library: libpython3.11 relinked with lld 16 from Debian's PIC objects through
    --pack self --check; Python runs through it with byte-identical output."""
    from elflayout.targets import libpython

    d = libpython.prepare("lld")
    out = tmp_path / "self" / libpython.SONAME
    cmd = [a for a in d["link_cmd"] if not a.startswith("-Wl,-Map=")]  # not the cached build's map
    cmd = linkself.with_output(cmd, str(out))
    out.parent.mkdir()
    r = run_cli("link", "--pack", "self", "--check", "--linker", "lld", "--", cmd[0], "-B", _lld16(tmp_path),
                *cmd[1:], check=0)
    assert "real load equal" in r.stderr
    with simload.Loaded(out) as lo:
        ap = lo.applier()
        n = elfcore.relr_decode(lo.at(ap["relr_start"], ap["relr_end"] - ap["relr_start"], np.uint64)).size
    assert n > 10_000
    prog = [str(d["launcher"]), "-c", libpython.CHECK + "; import hashlib; print(hashlib.sha256(b'x').hexdigest())"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON") and k != "LD_LIBRARY_PATH"} | d["env"]
    want = subprocess.run(prog, capture_output=True, env=env)
    got = subprocess.run(prog, capture_output=True, env=env | {"LD_LIBRARY_PATH": str(out.parent),
                                                              "LD_DEBUG": "libs"})
    assert want.returncode == 0 and got.returncode == 0 and got.stdout == want.stdout and b"True True" in got.stdout
    assert f"calling init: {out}".encode() in got.stderr  # the packed copy ran


@pytest.mark.parametrize("linker", ["bfd", "mold"])
def test_link_time_self_form_with_gnu_ld_and_mold(tmp_path, linker):
    """GNU ld and mold have -z pack-relative-relocs too. mold 1.10 omits the
    GLIBC_ABI_DT_RELR need, so glibc 2.36 refuses its relr output: --pack relr says so,
    and --pack self still works (nothing is checked against a reference that cannot load)."""
    need_tool(f"ld.{linker}" if linker == "mold" else "ld.bfd")
    obj = compile_lib(tmp_path, n_tables=6, ifunc=False)
    link = ["--linker", linker, "--", "gcc", f"-fuse-ld={linker}", "-shared", "-Wl,-soname,libt.so"]
    self_, plain = tmp_path / "self" / "libt.so", tmp_path / "plain" / "libt.so"
    for p in (self_, plain):
        p.parent.mkdir()
    r = run_cli("link", "--pack", "self", "--check", *link, "-o", self_, obj, check=0)
    assert "relocated images equal at 2 load bases" in r.stderr
    assert ("real load skipped" if linker == "mold" else "real load equal") in r.stderr
    with elfcore.ElfImage(self_) as img:  # not lld's order: RELA moved whole into the reserved room
        assert img.section(linkself.RELA_SECTION).addr == img.dt(L.DT_RELA)
    subprocess.run(["gcc", f"-fuse-ld={linker}", "-shared", "-Wl,-soname,libt.so", "-o", plain, obj], check=True)
    relr = tmp_path / "relr.so"
    r = run_cli("link", "--pack", "relr", *link, "-o", relr, obj)
    if linker == "mold":
        assert r.returncode == 2 and "without a GLIBC_ABI_DT_RELR version need" in r.stderr and not relr.exists()
    else:
        assert r.returncode == 0 and not linkself.relr_need_missing(relr) and realload.dlopen_check(relr) is None
    outs = []
    for lib in (plain, self_):
        exe = lib.parent / "main"
        subprocess.run(["gcc", "-no-pie", "-fno-pic", str(tmp_path / "main.c"), "-o", str(exe), f"-L{lib.parent}",
                        "-lt", "-Wl,-rpath,$ORIGIN"], check=True)
        outs.append(subprocess.run([str(exe)], capture_output=True, check=True).stdout)
    assert outs[0] == outs[1] and b"lib_report" in outs[0]


def test_pack_self_with_an_ordering(tmp_path):
    """--pack self composes with --profile: the output is ordered and self-packed."""
    import order_testlib

    d = order_testlib.build_profiled(tmp_path / "synth", n_objects=6, funcs_per_object=8, seed=3)
    lib = tmp_path / "libsynth.so"
    r = run_cli("link", "--profile", d["profile"], "--pack", "self", "--check", "--linker", "lld", "--", "gcc",
                "-B", _lld16(tmp_path), "-fuse-ld=lld", "-shared", "-o", lib, *map(str, d["objects"]), check=0)
    assert "in profile order" in r.stderr and "relocated images equal at 2 load bases" in r.stderr
    res = json.loads(run_cli("check-order", lib, "--profile", d["profile"], "--json", check=0).stdout)
    assert res["in_order_fraction"] == 1.0
    assert json.loads(run_cli("relocs", lib, "--json", check=0).stdout)["self_applied"]["form"] == "link-time"
    got = subprocess.run([str(d["driver"])], capture_output=True, text=True, env={"LD_LIBRARY_PATH": str(tmp_path)})
    ref = subprocess.run([str(d["driver"])], capture_output=True, text=True)
    assert got.returncode == 0 and got.stdout == ref.stdout
