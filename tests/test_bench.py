"""bench/run_all.py (listing, the generated page) and bench_pipeline's physical-limit estimator."""

import math
import subprocess
import sys
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

from conftest import need_tool

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

import bench_pipeline  # noqa: E402
import run_all  # noqa: E402
from elflayout.elfcore import relr_size  # noqa: E402

import numpy as np  # noqa: E402


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


SRC = r"""
const char ro_table[20000] = {1};
static int data[6000] = {1};
int *data_addr(void) { return data; }
int *ptrs[1000] = {%s};
extern int ext_var;
int *ext_ptr = &ext_var;
%s
"""


def _section(elf, name):
    s = elf.get_section_by_name(name)
    return s["sh_offset"], s["sh_size"]


def test_physical_limit_known_answer(tmp_path):
    need_tool("gcc")
    src = tmp_path / "t.c"
    src.write_text(SRC % (", ".join(f"&data[{i}]" for i in range(1000)),
                          "\n".join(f"int f{i}(int x) {{ return x * {i} + {i % 7}; }}" for i in range(300))))
    lib = tmp_path / "libt.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-O0", "-fuse-ld=bfd", "-o", lib, src], check=True)
    with open(lib, "rb") as f:
        elf = ELFFile(f)
        text_off, _ = _section(elf, ".text")
        data_off, data_size = _section(elf, ".data")
        ro_off, ro_size = _section(elf, ".rodata")
        rela_off, rela_size = _section(elf, ".rela.dyn")
        rela = elf.get_section_by_name(".rela.dyn")
        types = np.array([r["r_info_type"] for r in rela.iter_relocations()])
        offs = np.array([r["r_offset"] for r in rela.iter_relocations()], dtype=np.uint64)
        plt = elf.get_section_by_name(".rela.plt")
        plt_size = plt["sh_size"] if plt is not None else 0
        size = lib.stat().st_size
    data_page = -(-data_off // 4096)  # a page whose first byte lies in .data
    ro_page = -(-ro_off // 4096)
    rela_page = -(-rela_off // 4096)
    assert data_page * 4096 < data_off + data_size and ro_page * 4096 < ro_off + ro_size
    assert rela_page * 4096 < rela_off + rela_size, "test library: .rela.dyn should span a page start"
    bss_page = size // 4096 + 10  # beyond the file: anonymous memory, not read from disk
    fn_page = text_off // 4096
    from elflayout.profile.model import Function, Page, Target

    target = Target(path=str(lib),
                    functions=[Function("f0", 0, offset=text_off, size=100),
                               Function("f1", 1, offset=text_off + 200, size=5000)],
                    pages=[Page(data_page, i, kind) for i, (data_page, kind) in enumerate(
                        [(data_page, "r"), (data_page, "w"), (ro_page, "r"), (rela_page, "r"), (fn_page, "x"),
                         (bss_page, "w")])])
    lim = bench_pipeline.physical_limit(target, lib)
    rel = (types == 8) & (offs % 8 == 0)
    assert rel.sum() >= 1000
    reloc = (len(types) - rel.sum()) * 24 + relr_size(np.sort(offs[rel])) + plt_size
    # 1000 consecutive pointers: one address word + ceil(999 / 63) bitmap words at most.
    assert relr_size(np.sort(offs[rel])) <= 8 * (1 + 16 + 2 * (rel.sum() - 1000 + 1))
    expected_bytes = 5100 + 4096 * 2 + 4096 + reloc  # code + (.data, .rodata) + ELF header page + relocations
    assert lim["data_pages"] == 2
    assert lim["header_pages"] == 1
    assert lim["code_bytes"] == 5100
    assert lim["bytes"] == expected_bytes
    assert lim["pages"] == math.ceil(expected_bytes / 4096)


def test_physical_limit_header_page_counted_once(tmp_path):
    need_tool("gcc")
    src = tmp_path / "u.c"
    src.write_text("int g(int x) { return x + 1; }\n")
    lib = tmp_path / "libu.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", lib, src], check=True)
    from elflayout.profile.model import Page, Target

    base = bench_pipeline.physical_limit(Target(path=str(lib)), lib)
    touched = bench_pipeline.physical_limit(Target(path=str(lib), pages=[Page(0, 0, "r")]), lib)
    assert base["header_pages"] == 1 and touched["header_pages"] == 0
    assert base["pages"] == touched["pages"]


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
