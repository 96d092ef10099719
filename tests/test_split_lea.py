"""elflayout split: a ``lea`` whose target ends one data object and starts the next.

The objects may be put in different sections only when the address is provably read
at or above itself (``split/upward.py``); anything else keeps them together with the
reason. Real gcc output and hand-written assembly, split by the real code."""

import subprocess

import pytest

from conftest import need_tool, run_cli

from elflayout.split.api import split_object

AMBIGUOUS = "points at the end of a or the start of b"
# gcc lays static objects out in reverse order of definition: ``a`` first, then ``b``.
ARRAYS = r"""
static const unsigned short b[9000] = {4, 5, 6};
static const unsigned short a[40000] = {1, 2, 3};
unsigned f(unsigned c) { return b[c >> 7]; }
"""
POSITIVE_C = ARRAYS + "unsigned g(unsigned i) { return a[i % 40000]; }\n"
NEGATIVE_C = {
    # the end of ``a`` read downward
    "loop": ARRAYS + "unsigned hash(void) { unsigned s = 0; for (const unsigned short *p = a + 40000; p != a; ) "
                     "s = s * 31 + *--p; return s; }\n",
    # the end of ``a`` passed on: nothing is known about its uses
    "call": ARRAYS + "extern unsigned use(const unsigned short *);\n"
                     "unsigned h(void) { return use(a + 40000); }\n",
}


def _cc(tmp_path, name, src):
    need_tool("gcc")
    c = tmp_path / f"{name}.c"
    c.write_text(src)
    o = tmp_path / f"{name}.o"
    subprocess.run(["gcc", "-O2", "-fPIC", "-c", "-o", o, c], check=True)
    syms = subprocess.run(["readelf", "-sW", o], capture_output=True, text=True, check=True).stdout
    addr = {ln.split()[-1]: (int(ln.split()[1], 16), int(ln.split()[2])) for ln in syms.splitlines()
            if ln.split()[-1:] in (["a"], ["b"])}
    assert addr["a"][0] + addr["a"][1] == addr["b"][0], syms     # b follows a
    return o


def _reasons(o):
    _, rep = split_object(o.read_bytes(), o.name)
    return [g.reason for s in rep.sections for g in s.glued], {s.name: s for s in rep.sections}


def _sections(path):
    r = subprocess.run(["readelf", "-sW", path], capture_output=True, text=True, check=True).stdout
    return {ln.split()[-1]: ln.split()[6] for ln in r.splitlines() if ln.split()[-1:] in (["a"], ["b"])}


def test_lea_read_upward_splits_neighbours_and_checks(tmp_path):
    """``b[c >> 7]``: the address of ``b`` is also the end of ``a``, but it is only read
    upward (zero-extended index): a and b get sections of their own."""
    o = _cc(tmp_path, "pos", POSITIVE_C)
    reasons, secs = _reasons(o)
    assert not any(AMBIGUOUS in x for x in reasons), reasons
    assert secs[".rodata"].sections == 2, secs[".rodata"]
    out = tmp_path / "out"
    r = run_cli("split", o, "-o", out, "--check", "--linker", "lld", check=0)
    assert "original-order links identical" in r.stdout, r.stdout
    got = _sections(out / "pos.o")
    assert got["a"] != got["b"], got


@pytest.mark.parametrize("kind", sorted(NEGATIVE_C))
def test_lea_of_end_used_otherwise_stays_glued(tmp_path, kind):
    o = _cc(tmp_path, kind, NEGATIVE_C[kind])
    reasons, secs = _reasons(o)
    assert any(AMBIGUOUS in x for x in reasons), reasons
    assert secs[".rodata"].sections == 1
    r = run_cli("split", o, "-o", tmp_path / "out", "-v", check=0)
    assert AMBIGUOUS in r.stdout, r.stdout


# Hand-written uses of ``lea b(%rip), %rdx``: (instructions before it, after it, proved).
ASM_CASES = {
    "index_before": ("mov %edi,%eax", "movzwl (%rdx,%rax,2),%eax\nmov %edi,%edx", True),
    "index_32bit": ("mov %edi,%eax", "shr $7,%eax\nmovzwl (%rdx,%rax,2),%eax\nmov %edi,%edx", True),
    "index_movzx64": ("movzbq (%rsi),%rax", "movzwl 4(%rdx,%rax,2),%eax\nxor %edx,%edx", True),
    "no_index_use_and_kill": ("", "movzwl 6(%rdx),%eax\nmovzwl (%rdx),%edx", True),
    "never_used": ("", "mov %rdi,%rdx", True),
    "negative_disp": ("", "movzwl -2(%rdx),%eax\nmov %edi,%edx", False),
    "index_cltq": ("mov %edi,%eax", "cltq\nmovzwl (%rdx,%rax,2),%eax\nmov %edi,%edx", False),
    "index_movslq": ("movslq %edi,%rax", "movzwl (%rdx,%rax,2),%eax\nmov %edi,%edx", False),
    "index_64bit_add": ("mov %edi,%eax", "add %rsi,%rax\nmovzwl (%rdx,%rax,2),%eax\nmov %edi,%edx", False),
    "index_16bit_write": ("mov %edi,%eax", "mov %si,%ax\nmovzwl (%rdx,%rax,2),%eax\nmov %edi,%edx", False),
    "index_unknown": ("", "movzwl (%rdx,%rax,2),%eax\nmov %edi,%edx", False),
    "vector_index": ("", "vpgatherdd %xmm2,(%rdx,%xmm1,4),%xmm0\nmov %edi,%edx", False),
    "as_index": ("", "movzwl (%rsi,%rdx,2),%eax\nmov %edi,%edx", False),
    "copied": ("", "mov %rdx,%rcx\nmovzwl -2(%rcx),%eax\nmov %edi,%edx", False),
    "derived": ("", "lea 2(%rdx),%rcx\nmov %edi,%edx", False),
    "arithmetic": ("", "sub $2,%rdx\nmovzwl (%rdx),%eax\nmov %edi,%edx", False),
    "partial_write": ("", "mov %dil,%dl\nmovzwl (%rdx),%eax\nmov %edi,%edx", False),
    "cmov": ("", "test %edi,%edi\ncmove %rdi,%rdx\nmovzwl -2(%rdx),%eax\nmov %edi,%edx", False),
    "stored": ("", "mov %rdx,(%rsi)\nmov %edi,%edx", False),
    "branch": ("", "test %edi,%edi\nje 1f\nmovzwl (%rdx),%eax\n1: mov %edi,%edx", False),
    "call": ("", "call ext@PLT\nmov %edi,%edx", False),
    "live_to_ret": ("", "movzwl (%rdx),%eax", False),
    "label_after": ("test %esi,%esi\njne 2f", "2: movzwl (%rdx),%eax\nmov %edi,%edx", False),
    "index_before_label": ("mov %edi,%eax\ntest %esi,%esi\njne 2f\nxor %edi,%edi\n2:",
                           "shr $7,%eax\nmovzwl (%rdx,%rax,2),%eax\nmov %edi,%edx", True),
    "index_across_label": ("mov %edi,%eax\ntest %esi,%esi\njne 2f\nmov $-1,%rax\n2:",
                           "movzwl (%rdx,%rax,2),%eax\nmov %edi,%edx", False),
}
ASM = """\t.text
\t.type\tfn, @function
fn:
{pre}
\tlea\tb(%rip), %rdx
{post}
\tret
\t.size\tfn, .-fn
\t.section\t.rodata
\t.type\ta, @object
\t.size\ta, 16
a:\t.zero\t16
\t.type\tb, @object
\t.size\tb, 16
b:\t.zero\t16
{extra}\t.ident\t"GCC: (test) 12"
\t.section\t.note.GNU-stack,"",@progbits
"""


def _asm(tmp_path, name, pre, post, extra=""):
    need_tool("gcc")
    s = tmp_path / f"{name}.s"
    s.write_text(ASM.format(pre=pre, post=post, extra=extra))
    o = tmp_path / f"{name}.o"
    subprocess.run(["gcc", "-c", "-o", o, s], check=True)
    return o


@pytest.mark.parametrize("name", sorted(ASM_CASES))
def test_lea_uses_proved_or_refused(tmp_path, name):
    pre, post, proved = ASM_CASES[name]
    reasons, secs = _reasons(_asm(tmp_path, name, pre, post))
    assert any(AMBIGUOUS in x for x in reasons) != proved, reasons
    assert secs[".rodata"].sections == (2 if proved else 1)


def test_landing_pads_hide_what_runs_before_the_lea(tmp_path):
    """With an exception table, a landing pad (reached through label differences no
    relocation shows) may sit before the lea: an index written there proves nothing."""
    pre, post, _ = ASM_CASES["index_before"]
    extra = '\t.section\t.gcc_except_table,"a",@progbits\n\t.byte\t0xff\n'
    reasons, _ = _reasons(_asm(tmp_path, "eh", pre, post, extra))
    assert any(AMBIGUOUS in x for x in reasons), reasons
    pre, post, _ = ASM_CASES["index_32bit"]     # written after the lea
    reasons, _ = _reasons(_asm(tmp_path, "eh2", pre, post, extra))
    assert not any(AMBIGUOUS in x for x in reasons), reasons
