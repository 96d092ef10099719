"""order.dynsym: the dynamic symbols ld.so looks up at start-up first in .dynsym, .gnu.version
and the .gnu.hash chains; lookups find the same symbols and the program runs the same."""

import shutil
import subprocess

import pytest

from elflayout.elfcore import ElfImage
from elflayout.errors import ElflayoutError
from elflayout.order import dynstr
from elflayout.order.dynsym import Tables, reorder, verify

N_FUNCS = 1500  # 36 KB of .dynsym: the hot symbols spread over all its pages when hash-ordered
CALLED = (7, 123, 250, 777, 1024, 1499)


def _build(tmp_path, hash_style="gnu", n_funcs=N_FUNCS) -> dict:
    if not shutil.which("ld.lld"):
        pytest.skip("lld not installed")
    src = tmp_path / "lib.c"
    src.write_text("".join(f"int f{i}(int x) {{ return x + {i}; }}\n" for i in range(n_funcs))
                   + "int (*table[])(int) = {" + ", ".join(f"f{i}" for i in range(0, N_FUNCS, 300)) + "};\n"
                   + "static int cells[300];\nint *rel[] = {" + ", ".join(f"cells + {i}" for i in range(300)) + "};\n"
                   + "int v1(void) { return 1; }\nint v2(void) { return 2; }\n"
                   + '__asm__(".symver v1, vers@V1");\n__asm__(".symver v2, vers@@V2");\n')
    (tmp_path / "lib.map").write_text("V1 { global: *; };\nV2 { global: vers; } V1;\n")
    main = tmp_path / "main.c"
    main.write_text("#include <stdio.h>\n" + "".join(f"int f{i}(int);\n" for i in CALLED)
                    + "extern int (*table[])(int);\nint vers(void);\n"
                    + "int main(void) { printf(\"%d %d %d\\n\", " + " + ".join(f"f{i}(1)" for i in CALLED)
                    + ", table[2](5), vers()); return 0; }\n")
    lib = tmp_path / "libd.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-fuse-ld=lld", f"-Wl,--hash-style={hash_style}",
                    f"-Wl,--version-script={tmp_path / 'lib.map'}", "-o", str(lib), str(src)], check=True)
    exe = tmp_path / "main"
    subprocess.run(["gcc", "-fuse-ld=lld", "-o", str(exe), str(main), str(lib), "-Wl,-rpath,$ORIGIN"], check=True)
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout
    return {"lib": lib, "exe": exe, "output": out}


def _positions(path, names) -> list[int]:
    with ElfImage(path) as img:
        t = Tables(img)
        return sorted(i for i, n in enumerate(t.names) if n in {x.encode() for x in names} and i >= t.symoffset)


def test_reorder_puts_looked_up_symbols_first_and_runs(tmp_path):
    b = _build(tmp_path)
    names, _ = dynstr.read_names(b["lib"], [b["exe"]])
    assert {f"f{i}" for i in CALLED} <= set(names)
    moved = tmp_path / "moved"
    moved.mkdir()
    shutil.copy(b["exe"], moved / "main")
    st = reorder(b["lib"], moved / "libd.so", names)
    assert st["hot"] >= len(CALLED)
    before, after = _positions(b["lib"], names), _positions(moved / "libd.so", names)
    assert len(before) == len(after)
    # linkers order by hash: the looked-up symbols lie all over the table; now in its first runs
    assert before[-1] - before[0] > N_FUNCS // 2
    with ElfImage(moved / "libd.so") as img:
        t = Tables(img)
        hot = [any(t.names[i].decode() in names for i in run) for run in t.runs()]
    assert hot == sorted(hot, reverse=True) and sum(hot) <= len(after)  # hot runs, then the others
    assert after[-1] - after[0] < N_FUNCS // 10
    assert subprocess.run([str(moved / "main")], capture_output=True, text=True, check=True).stdout == b["output"]
    dyn = [subprocess.run(["readelf", "--dyn-syms", "-W", str(f)], capture_output=True, text=True, check=True).stdout
           for f in (b["lib"], moved / "libd.so")]
    strip_names = [sorted(line.split()[1:] for line in d.splitlines()[3:] if line.strip()) for d in dyn]
    assert strip_names[0] == strip_names[1]  # the same symbols, versions included, in another order


def test_same_name_versions_keep_their_order(tmp_path):
    b = _build(tmp_path)
    out = tmp_path / "o.so"
    reorder(b["lib"], out, ["vers", "f3"])

    def vers(path):
        with ElfImage(path) as img:
            t = Tables(img)
            return [(i, t.versym[i]) for i, n in enumerate(t.names) if n == b"vers"]

    old, new = vers(b["lib"]), vers(out)
    assert [v for _, v in old] == [v for _, v in new] and len(new) == 2
    assert new[1][0] == new[0][0] + 1  # one run, now first in the table's hashed part
    with ElfImage(out) as img:
        assert new[0][0] in (Tables(img).symoffset, Tables(img).symoffset + 1)


def test_verify_catches_a_wrong_table(tmp_path):
    b = _build(tmp_path)
    out = tmp_path / "o.so"
    reorder(b["lib"], out, [f"f{i}" for i in CALLED])
    with ElfImage(out) as img:
        t = Tables(img)
        at = t.sym.offset + t.records.shape[1] * (t.symoffset + 1)
        es = t.records.shape[1]
    data = bytearray(out.read_bytes())
    data[at:at + es], data[at + es * 40:at + es * 41] = data[at + es * 40:at + es * 41], data[at:at + es]
    bad = tmp_path / "bad.so"
    bad.write_bytes(bytes(data))
    with pytest.raises(RuntimeError):
        verify(b["lib"], bad)


def test_reloc_symbols_follow_their_records(tmp_path):
    b = _build(tmp_path)
    out = tmp_path / "o.so"
    reorder(b["lib"], out, [f"f{i}" for i in CALLED][::-1])

    def named(path):
        with ElfImage(path) as img:
            t = Tables(img)
            return [(int(r["r_offset"]), t.names[int(r["r_info"]) >> 32]) for rel in img.reloc_tables().values()
                    for r in rel if int(r["r_info"]) >> 32]

    assert named(out) == named(b["lib"]) and named(out)


def test_refuses_sysv_hash(tmp_path):
    b = _build(tmp_path, hash_style="both")
    with pytest.raises(ElflayoutError, match="SysV .hash"):
        reorder(b["lib"], tmp_path / "o.so", ["f7"])
    assert not (tmp_path / "o.so").exists()


def test_refuses_a_table_the_linker_did_not_write(tmp_path):
    b = _build(tmp_path)
    with ElfImage(b["lib"]) as img:
        t = Tables(img)
        at = t.chain_at + 4 * (len(t.chain) - 1)
    data = bytearray(b["lib"].read_bytes())
    data[at] &= 0xFE  # the last chain no longer ends
    bad = tmp_path / "bad.so"
    bad.write_bytes(bytes(data))
    with pytest.raises(ElflayoutError, match="does not end"):
        reorder(bad, tmp_path / "o.so", ["f7"])
    assert not (tmp_path / "o.so").exists()


def test_link_order_dynsym(tmp_path):
    """``elflayout link --order-dynsym``: the linked library's looked-up symbols first, the
    program's output the same; without the option the linker's order stays."""
    from conftest import run_cli

    b = _build(tmp_path)
    names, _ = dynstr.read_names(b["lib"])
    spans = {}
    for name, opts in (("plain", []), ("ordered", ["--order-dynsym"])):
        out = tmp_path / name / "libd.so"
        out.parent.mkdir()
        r = run_cli("link", "--pack", "relr", *opts, "--linker", "lld", "--", "gcc", "-shared", "-fPIC",
                    "-fuse-ld=lld", "-Wl,--hash-style=gnu", f"-Wl,--version-script={tmp_path / 'lib.map'}", "-o", out,
                    tmp_path / "lib.c", check=0)
        assert r.returncode == 0, r.stderr
        shutil.copy(b["exe"], out.parent / "main")
        assert subprocess.run([str(out.parent / "main")], capture_output=True, text=True,
                              check=True).stdout == b["output"]
        pos = _positions(out, names)
        spans[name] = pos[-1] - pos[0]
        assert ("dynsym order: on" in r.stderr) == bool(opts)
    assert spans["ordered"] < spans["plain"] // 4


@pytest.mark.slow
def test_reshaped_table_trades_bloom_words_for_buckets(tmp_path):
    """With fewer symbols a bucket the runs holding looked-up symbols hold fewer others: the
    bloom filter halves (the section keeps its size) below the 8 bits a symbol it once
    kept, down to 2, and every name is still found while names the library does not
    define are not; the linker's shape stays on request. One symbol in five looked up,
    as on libLLVM-16."""
    b = _build(tmp_path, n_funcs=22000)  # lld: 8,192 bloom words, 24 bits a symbol
    names = [f"f{i}" for i in range(0, 22000, 5)] + dynstr.read_names(b["lib"], [b["exe"]])[0]
    d = tmp_path / "reshaped"
    d.mkdir()
    shutil.copy(b["exe"], d / "main")
    st = reorder(b["lib"], d / "libd.so", names)
    (old_b, new_b), (old_w, new_w) = st["buckets"], st["bloom_words"]
    assert new_w < old_w and new_b == old_b + (old_w - new_w) * 2
    assert 2 * st["hashed"] <= new_w * 64 < 8 * st["hashed"]
    with ElfImage(d / "libd.so") as img:
        t = Tables(img)
        assert t.maskwords == new_w and t.lookup(b"f4321") is not None
        assert [t.lookup(n) for n in (b"printf", b"f22000", b"no_such_symbol", b"f1x")] == [None] * 4
    assert subprocess.run([str(d / "main")], capture_output=True, text=True, check=True).stdout == b["output"]
    kept = reorder(b["lib"], tmp_path / "kept.so", names, reshape=False)
    assert kept["buckets"] == [old_b, old_b] and kept["bloom_words"] == [old_w, old_w]
    with ElfImage(d / "libd.so") as img, ElfImage(tmp_path / "kept.so") as img2:
        assert img.section(".gnu.hash").size == img2.section(".gnu.hash").size


def test_verify_catches_a_bloom_filter_that_hides_a_symbol(tmp_path):
    b = _build(tmp_path)
    out = tmp_path / "o.so"
    reorder(b["lib"], out, ["f7"])
    with ElfImage(out) as img:
        t = Tables(img)
        lo, hi = t.bloom_at, t.bucket_at
    data = bytearray(out.read_bytes())
    data[lo:hi] = bytes(hi - lo)
    bad = tmp_path / "bad.so"
    bad.write_bytes(bytes(data))
    with pytest.raises(RuntimeError, match="finds another symbol"):
        verify(b["lib"], bad)


def test_names_read_can_end_dynstr_next_to_the_relocations(tmp_path):
    """``dynstr.names_not_read`` first (``dynstr_order``): the names ld.so reads end .dynstr,
    which lld follows with .rela.dyn, read whole at start-up; the program runs the same."""
    from elflayout.order import dynstr_order

    b = _build(tmp_path)
    names, _ = dynstr.read_names(b["lib"], [b["exe"]])
    cold = dynstr.names_not_read(b["lib"], names)
    assert cold and not set(cold) & set(names) and len(cold) == len(set(cold))
    d = tmp_path / "last"
    d.mkdir()
    shutil.copy(b["exe"], d / "main")
    dynstr_order.reorder(b["lib"], d / "libd.so", cold)
    with ElfImage(d / "libd.so") as img:
        t = Tables(img)
        ds = img.section(".dynstr")
        nxt = min((s for s in img.sections if s.offset >= ds.offset + ds.size and s.size), key=lambda s: s.offset)
        st_name = t.records[:, :4].copy().view("<u4").ravel().tolist()
    read = {n.encode() for n in names}
    hot = [o for o, n in zip(st_name, t.names) if n in read]
    other = [o for o, n in zip(st_name, t.names) if n and n not in read]
    assert nxt.name == ".rela.dyn" and min(hot) > max(other)
    assert subprocess.run([str(d / "main")], capture_output=True, text=True, check=True).stdout == b["output"]
