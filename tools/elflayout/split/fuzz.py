"""Damaged objects and archives through ``split`` and ``split --check`` (seeded fuzzing).

Goal: every damaged input is split (exit 0), found different or uncheckable by
``--check`` or left whole (exit 1), or refused with one line naming it (exit 2); never exit 3, a
traceback, a hang or unbounded memory, and nothing written unless the exit is 0.

Definitions
  base       a small valid input compiled on the fly (C with PIC and without, C++, hand-
             written assembly) or an archive of them (with a symbol index, with a
             long-name table).
  variant    a base with one damage (``KINDS``): an ELF header, section header, symbol,
             relocation or string-table field replaced by a value that breaks
             assumptions; symbol names made non-UTF-8; bytes flipped; the file cut
             short; or, in an archive, a member header's size (negative, huge, not
             decimal), name, magic or long-name table damaged, the symbol index
             damaged, the archive made thin, or a member damaged as an object.
             Variant ``i`` of seed ``s`` depends on (s, i) only (``default_rng([s, i])``).
  run        one ``elflayout split`` command on a variant in a child process (forked
             from a parent that has imported elflayout) with ``ELFLAYOUT_DEBUG=1`` (an
             exception the CLI does not translate shows as a traceback), limited to
             ``MEMORY`` bytes of address space and ``TIMEOUT`` seconds of CPU (the
             child and each linker it starts; a machine shared with other work makes
             wall time no measure of a hang), with ``WALL_FACTOR`` times that of wall
             time for a run that waits forever.

Steps (``run_variant``)
  1. Write the variant; remember its SHA-256.
  2. ``split VARIANT -o DIR1``; then ``split VARIANT -o DIR2 --check --linker L`` (L
     drawn from lld, gold, GNU ld).
  3. Judge each run: exit 0 wrote the output; exit 1 (``--check``, or "nothing
     split": every section had to stay whole) and exit 2 wrote nothing and printed one
     ``elflayout:`` line (exit 2: naming the input);
     anything else -- exit 3, a traceback, a signal, a timeout, "out of memory" -- is
     a failure.
  4. The input's SHA-256 must be unchanged.

This is the damaged-input testing of Miller et al. ("An empirical study of the
reliability of UNIX utilities", CACM 1990), aimed at the tables ``split`` reads.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from elftools.elf.elffile import ELFFile

from elflayout import layouts as L

TIMEOUT = 30.0              # CPU seconds per run (and per linker it starts)
WALL_FACTOR = 10            # a run blocked this many times TIMEOUT of wall time hangs
MEMORY = 1 << 30            # bytes of address space per run
LINKERS = ("lld", "gold", "bfd")
OBJECT_KINDS = ("ehdr", "shdr", "symbol", "rela", "strtab", "non-utf8-names", "bytes", "truncate")
ARCHIVE_KINDS = ("member-size", "member-header", "member-name", "longnames", "symbol-index", "thin",
                 "archive-truncate", "member-object")
KINDS = OBJECT_KINDS + ARCHIVE_KINDS
# Values that break assumptions: zero, one, all ones, sign bits, huge.
_INTERESTING = (0, 1, 2, 7, 8, 0xFF, 0xFFFF, 0xFFF1, 0xFF00, 0x7FFFFFFF, 0xFFFFFFFF, 0x8000000000000000,
                0xFFFFFFFFFFFFFFFF, 1 << 40)
_SIZES = (b"-60", b"-61", b"-100", b"-1", b"-8", b"0", b"1", b"9999999999", b"4294967296", b"12a", b"+5", b"",
          b" 7", b"\xe1\xe1")

C_PIC = r"""
static int sq(int x) { return x * x; }
static int add3(int x) { return sq(x) + 3; }
__attribute__((noinline)) static int sw(int k) {
    switch (k) { case 0: return 11; case 1: return add3(k); case 2: return 7; case 3: return sq(k) + 1;
                 case 4: return 42; case 5: return 5; case 6: return 99; default: return -1; }
}
static int table[8] = {1, 2, 3, 4, 5, 6, 7, 8};
static int (*const ops[])(int) = {sq, add3, sw};
int hits[3];
static const char *msgs[] = {"a", "bb", "ccc"};
__attribute__((noinline)) int sum_table(void) { int s = 0; for (int i = 0; i < 8; i++) s += table[i]; return s; }
__attribute__((noinline)) int exit_handler(int x) { return x + msgs[x & 1][0]; }
int lib_run(void) {
    int s = 0;
    for (int k = 0; k < 8; k++) s += sw(k);
    for (int i = 0; i < 3; i++) s += ops[i](i + 2);
    return s + sum_table() + hits[1] + exit_handler(s);
}
"""
C_NOPIC = r"""
int arr[16];
static int counter;
__attribute__((noinline)) int get(int i) { return arr[i] + counter; }
__attribute__((noinline)) void put(int i, int v) { arr[i] = v; counter++; }
int sum(void) { int s = 0; for (int i = 0; i < 16; i++) s += get(i); return s; }
"""
CXX = r"""
struct Base { virtual ~Base() {} virtual int f(int x) { return x; } };
struct D : Base { int f(int x) override { return x * 2; } };
static D d;
int call(Base *b, int x) { return b->f(x); }
int run_cxx(int x) { Base *b = &d; return call(b, x) + call(new D, x); }
template <class T> T twice(T v) { return v + v; }
int use_template(int x) { return twice(x) + (int)twice(1.5); }
"""
ASM = r"""
    .text
    .globl f1, f2, f3, f4, dispatch
    .type f1,@function
f1: movl $1, %eax
    .size f1, .-f1
    .type f2,@function
f2: addl $1, %eax
    ret
    .size f2, .-f2
    .type f3,@function
f3: jmp f4
    .size f3, .-f3
    .type f4,@function
f4: movl $4, %eax
    ret
    .size f4, .-f4
    .type dispatch,@function
dispatch:
    .cfi_startproc
    leaq table(%rip), %rdx
    movslq (%rdx,%rdi,4), %rax
    addq %rdx, %rax
    jmp *%rax
    .cfi_endproc
    .size dispatch, .-dispatch
    .section .rodata
    .align 4
table: .long f1 - table, f3 - table
    .section .note.GNU-stack,"",@progbits
"""


# AArch64: resolved b/bl/b.cond/adr, a literal pool, adrp/:lo12: pairs of an anchor.
ASM_AARCH64 = r"""
    .text
    .globl f1, f2, f3, dispatch
    .type f1,%function
f1: mov w0, #1
    .size f1, .-f1
    .type f2,%function
f2: add w0, w0, #1
    cbz w0, f3
    ret
    .size f2, .-f2
    .type f3,%function
f3: bl f1
    b f2
    .size f3, .-f3
    .type dispatch,%function
dispatch:
    .cfi_startproc
    adrp x1, .LANCHOR0
    add x1, x1, :lo12:.LANCHOR0
    ldr w2, [x1, #8]
    ldr x3, .Lpool
    adr x4, f1
    b.eq f1
    ret
.Lpool: .quad 0x1234
    .cfi_endproc
    .size dispatch, .-dispatch
    .data
.LANCHOR0:
    .type d1,%object
d1: .quad 1
    .size d1, 8
    .type d2,%object
d2: .quad 2
    .size d2, 8
    .section .note.GNU-stack,"",@progbits
"""
# Compilers and assembler of each machine the corpus is built for.
TOOLS = {"x86-64": ("gcc", "g++", ASM), "aarch64": ("aarch64-linux-gnu-gcc", "aarch64-linux-gnu-g++", ASM_AARCH64)}


@dataclass
class Base:
    name: str
    data: bytes
    archive: bool


@dataclass
class Tally:
    """Counts of one fuzz run (``bench/`` prints them; tests assert on them)."""
    variants: int = 0
    runs: int = 0
    split: int = 0                 # exit 0
    check_refused: int = 0         # exit 1 (--check: differs, no linker could link the original; or nothing split)
    refused: int = 0               # exit 2 with one line
    internal_errors: int = 0       # exit 3
    tracebacks: int = 0            # an exception the CLI did not translate (ELFLAYOUT_DEBUG=1)
    hangs: int = 0                 # TIMEOUT of CPU, or WALL_FACTOR times that of wall time
    out_of_memory: int = 0         # MemoryError or killed at MEMORY
    crashes: int = 0               # killed by a signal
    bad_messages: int = 0          # not exactly one line, or a refusal not naming the input
    written_when_refused: int = 0
    inputs_modified: int = 0
    slowest_s: float = 0.0         # CPU seconds of the costliest run
    by_kind: dict = field(default_factory=dict)
    failures: list = field(default_factory=list)  # (seed, index, base, kind, what)

    FAILURES = ("internal_errors", "tracebacks", "hangs", "out_of_memory", "crashes", "bad_messages",
                "written_when_refused", "inputs_modified")

    @property
    def failed(self) -> int:
        return sum(getattr(self, k) for k in self.FAILURES)

    def add(self, other: "Tally") -> None:
        for k, v in vars(other).items():
            if isinstance(v, int):
                setattr(self, k, getattr(self, k) + v)
        self.slowest_s = max(self.slowest_s, other.slowest_s)
        for k, v in other.by_kind.items():
            self.by_kind[k] = self.by_kind.get(k, 0) + v
        self.failures += other.failures


def build_bases(workdir: Path, machine: str = "x86-64") -> list[Base]:
    """The valid inputs the variants are made from, compiled into ``workdir`` for
    ``machine`` (a key of ``TOOLS``)."""
    d = Path(workdir) / "bases"
    d.mkdir(parents=True, exist_ok=True)
    objs = {}
    cc, cxx, asm = TOOLS[machine]
    for name, src, lang, flags in (("c_pic", C_PIC, "c", ["-fPIC"]), ("c_nopic", C_NOPIC, "c", ["-fno-pic"]),
                                   ("cxx", CXX, "cc", ["-fPIC"]), ("asm", asm, "s", [])):
        s = d / f"{name}.{lang}"
        s.write_text(src)
        o = d / f"{name}.o"
        subprocess.run([cxx if lang == "cc" else cc, "-O2", "-c", *flags, "-o", o, s], check=True,
                       capture_output=True)
        objs[name] = o
    bases = [Base(n + ".o", o.read_bytes(), False) for n, o in objs.items()]
    long_named = d / "a_member_with_a_long_name.o"
    shutil.copy(objs["c_nopic"], long_named)
    for name, members, opts in (("libsmall.a", [objs["c_pic"], objs["asm"]], "rcs"),
                                ("liblong.a", [objs["cxx"], long_named, objs["c_pic"]], "rcS")):
        a = d / name
        a.unlink(missing_ok=True)
        subprocess.run(["ar", opts, a, *members], check=True, capture_output=True)
        bases.append(Base(name, a.read_bytes(), True))
    return bases


def _interesting(rng, width: int) -> int:
    if rng.random() < 0.6:
        return int(rng.choice(_INTERESTING)) % (1 << (8 * width))
    return int(rng.integers(0, 1 << min(8 * width, 62)))


def _set_field(b: bytearray, at: int, width: int, value: int) -> None:
    if at + width <= len(b):
        b[at:at + width] = value.to_bytes(width, "little")


def _sections(data: bytes):
    """(section headers offset, [(name, type, offset, size, entsize)])."""
    elf = ELFFile(io.BytesIO(data))
    return elf.header.e_shoff, [(s.name, s["sh_type"], s["sh_offset"], s["sh_size"], s["sh_entsize"])
                                for s in elf.iter_sections()]


def _table_field(b: bytearray, secs, rng, want: str, dtype) -> None:
    """Replace one field of one entry of a table section (``want``: SHT_SYMTAB, SHT_RELA)."""
    tabs = [s for s in secs if s[1] == want and s[3] >= dtype.itemsize]
    if not tabs:
        return
    _, _, off, size, _ = tabs[int(rng.integers(len(tabs)))]
    k = int(rng.integers(size // dtype.itemsize))
    fname = dtype.names[int(rng.integers(len(dtype.names)))]
    fd, foff = dtype.fields[fname][:2]
    at = off + k * dtype.itemsize + foff
    if fname == "r_info" and rng.random() < 0.7:        # the symbol index or the type alone
        half = int(rng.integers(2))
        _set_field(b, at + 4 * half, 4, _interesting(rng, 4))
        return
    _set_field(b, at, fd.itemsize, _interesting(rng, fd.itemsize))


def damage_object(data: bytes, kind: str, rng) -> bytes:
    """One damage of ``kind`` (an ``OBJECT_KINDS`` entry) to a copy of an object."""
    b = bytearray(data)
    if kind == "truncate":
        return bytes(b[:int(rng.integers(0, len(b)))])
    if kind == "bytes":
        for _ in range(int(rng.integers(1, 9))):
            k = int(rng.integers(len(b)))
            b[k] = int(rng.integers(256))
        return bytes(b)
    if kind == "ehdr":
        fname = L.EHDR64.names[int(rng.integers(len(L.EHDR64.names)))]
        fd, foff = L.EHDR64.fields[fname][:2]
        if fname == "e_ident":
            b[int(rng.integers(16))] = int(rng.integers(256))
        else:
            _set_field(b, foff, fd.itemsize, _interesting(rng, fd.itemsize))
        return bytes(b)
    shoff, secs = _sections(data)
    if kind == "shdr":
        k = int(rng.integers(len(secs)))
        fname = L.SHDR64.names[int(rng.integers(len(L.SHDR64.names)))]
        fd, foff = L.SHDR64.fields[fname][:2]
        _set_field(b, shoff + k * L.SHDR64.itemsize + foff, fd.itemsize, _interesting(rng, fd.itemsize))
    elif kind == "symbol":
        _table_field(b, secs, rng, "SHT_SYMTAB", L.SYM64)
    elif kind == "rela":
        _table_field(b, secs, rng, "SHT_RELA", L.RELA64)
    elif kind in ("strtab", "non-utf8-names"):
        tabs = [s for s in secs if s[0] == ".strtab" and s[3] > 1]
        if tabs:
            _, _, off, size, _ = tabs[0]
            for _ in range(int(rng.integers(1, 5))):
                k = off + 1 + int(rng.integers(size - 1))
                if kind == "strtab":
                    b[k] = int(rng.integers(256))
                elif b[k]:                      # keep the terminators: valid names, not UTF-8
                    b[k] = int(rng.integers(0x80, 0x100))
    return bytes(b)


def _members(data: bytes) -> list[tuple[int, int]]:
    """(header offset, size) of each member of a valid archive."""
    pos, out = 8, []
    while pos + 60 <= len(data):
        field = data[pos + 48:pos + 58].strip()
        if not field.isdigit():
            break                       # (a base is valid; this only guards re-damaging)
        size = int(field)
        out.append((pos, size))
        pos += 60 + size + (size & 1)
    return out


def damage_archive(data: bytes, kind: str, rng) -> bytes:
    """One damage of ``kind`` (an ``ARCHIVE_KINDS`` entry) to a copy of an archive."""
    b = bytearray(data)
    mem = _members(data)
    pos, size = mem[int(rng.integers(len(mem)))]
    if kind == "archive-truncate":
        return bytes(b[:int(rng.integers(0, len(b)))])
    if kind == "thin":
        return b"!<thin>\n" + bytes(b[8:])
    if kind == "member-size":
        v = _SIZES[int(rng.integers(len(_SIZES)))] if rng.random() < 0.7 else \
            str(size + int(rng.integers(-70, 70))).encode()
        b[pos + 48:pos + 58] = v[:10].ljust(10)
    elif kind == "member-header":
        k = pos + int(rng.integers(60))
        b[k] = int(rng.integers(256))
    elif kind == "member-name":
        names = (b"/", b"//", b"/9999", b"/-1", b"../x.o/", b"a/b.o/", b"\xe1\xe2.o/", b"", b"/SYM64/", b"x\0y/")
        b[pos:pos + 16] = names[int(rng.integers(len(names)))].ljust(16)
    elif kind in ("longnames", "symbol-index"):
        want = b"//" if kind == "longnames" else b"/ "
        tab = [(p, s) for p, s in mem if b[p:p + 16].startswith(want)]
        if tab:
            p, s = tab[0]
            for _ in range(int(rng.integers(1, 5))):
                k = p + 60 + int(rng.integers(max(s, 1)))
                if k < len(b):
                    b[k] = int(rng.integers(256))
    elif kind == "member-object":
        objs = [(p, s) for p, s in mem if b[p + 60:p + 64] == b"\x7fELF" and p + 60 + s <= len(b)]
        if objs:
            p, s = objs[int(rng.integers(len(objs)))]
            body = damage_object(bytes(b[p + 60:p + 60 + s]), OBJECT_KINDS[int(rng.integers(len(OBJECT_KINDS)))],
                                 rng)
            body = body[:s].ljust(s, b"\0") if len(body) != s and rng.random() < 0.5 else body
            if len(body) != s:
                b[p + 48:p + 58] = str(len(body)).encode().ljust(10)
            b[p + 60:p + 60 + s] = body
    return bytes(b)


@dataclass
class Run:
    rc: int | None              # None: killed (timeout or signal)
    stdout: str
    stderr: str
    seconds: float              # wall
    cpu_s: float = 0.0          # the child's and its reaped children's CPU
    timed_out: bool = False
    signal: int = 0


def run_cli_limited(argv: list[str], timeout: float = TIMEOUT, memory: int = MEMORY) -> Run:
    """``elflayout ARGV`` in a forked child with ``memory`` bytes of address space and
    ``timeout`` seconds of CPU (SIGXCPU), killed with its process group (linkers it
    started) after ``WALL_FACTOR * timeout`` seconds of wall time."""
    out, err = tempfile.TemporaryFile(), tempfile.TemporaryFile()
    sys.stdout.flush()
    sys.stderr.flush()
    t0 = time.monotonic()
    pid = os.fork()
    if pid == 0:                                            # the child
        rc = 98
        try:
            os.setpgid(0, 0)
            resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
            cpu = int(max(1, timeout))
            resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
            os.dup2(out.fileno(), 1)
            os.dup2(err.fileno(), 2)
            # As a fresh interpreter has them (a test runner may have replaced them).
            sys.stdout = open(1, "w", encoding="utf-8", closefd=False)
            sys.stderr = open(2, "w", encoding="utf-8", errors="backslashreplace", closefd=False)
            os.environ["ELFLAYOUT_DEBUG"] = "1"
            from elflayout.cli import main

            rc = main(argv)
        except BaseException:                               # noqa: BLE001 - reported as a traceback
            traceback.print_exc()
            rc = 99
        finally:
            for f in (sys.stdout, sys.stderr):
                with contextlib.suppress(Exception):
                    f.flush()
            os._exit(rc)
    status, timed_out, usage = None, False, None
    while status is None:
        done, st, ru = os.wait4(pid, os.WNOHANG)
        if done:
            status, usage = st, ru
        elif time.monotonic() - t0 > WALL_FACTOR * timeout:
            timed_out = True
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
            _, status, usage = os.wait4(pid, 0)
        else:
            time.sleep(0.01)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)                      # linkers left behind by a killed child
    secs = time.monotonic() - t0
    cpu_s = usage.ru_utime + usage.ru_stime
    out.seek(0)
    err.seek(0)
    text = (out.read().decode("utf-8", "backslashreplace"), err.read().decode("utf-8", "backslashreplace"))
    out.close()
    err.close()
    sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else 0
    timed_out = timed_out or sig == signal.SIGXCPU or cpu_s > timeout
    return Run(None if sig else os.WEXITSTATUS(status), *text, secs, cpu_s, timed_out, sig)


# split's exit 1 without --check: every section it would split had to stay whole.
NOTHING_SPLIT = "nothing split:"


def _judge(t: Tally, r: Run, src: Path, outdir: Path, check: bool, fail) -> None:
    t.runs += 1
    t.slowest_s = max(t.slowest_s, r.cpu_s)
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("elflayout")]
    written = outdir.exists() and any(outdir.iterdir())
    what = "split --check" if check else "split"
    if r.timed_out:
        t.hangs += 1
        return fail(f"{what}: no result after {r.cpu_s:.0f} s of CPU, {r.seconds:.0f} s of wall time")
    if r.rc is None:
        t.crashes += 1
        return fail(f"{what}: killed by signal {r.signal}")
    if "Traceback (most recent call last)" in r.stderr:
        t.tracebacks += 1
        return fail(f"{what}: traceback: {r.stderr.strip().splitlines()[-1]}")
    if "out of memory" in r.stderr:
        t.out_of_memory += 1
        return fail(f"{what}: out of memory")
    if r.rc == 0:
        t.split += 1
        if not (outdir / src.name).exists():
            t.bad_messages += 1
            fail(f"{what}: exit 0 but no output")
        return None
    if r.rc == 3:
        t.internal_errors += 1
        return fail(f"{what}: exit 3: {lines[-1] if lines else r.stderr.strip()[-200:]}")
    if r.rc not in (1, 2) or (r.rc == 1 and not check and NOTHING_SPLIT not in r.stderr):
        t.internal_errors += 1
        return fail(f"{what}: exit {r.rc}")
    t.refused += r.rc == 2
    t.check_refused += r.rc == 1
    if written:
        t.written_when_refused += 1
        fail(f"{what}: exit {r.rc} but {outdir} holds files")
    if len(lines) != 1 or (r.rc == 2 and src.name not in lines[0]):
        t.bad_messages += 1
        fail(f"{what}: exit {r.rc} message: {' | '.join(lines) or r.stderr.strip()[-200:]}")
    return None


def run_variant(bases: list[Base], seed: int, index: int, workdir: Path) -> Tally:
    """Steps 1-4 for variant ``index`` of ``seed``."""
    rng = np.random.default_rng([seed, index])
    base = bases[int(rng.integers(len(bases)))]
    kinds = ARCHIVE_KINDS if base.archive else OBJECT_KINDS
    kind = kinds[int(rng.integers(len(kinds)))]
    linker = LINKERS[int(rng.integers(len(LINKERS)))]
    data = (damage_archive if base.archive else damage_object)(base.data, kind, rng)
    t = Tally(variants=1, by_kind={kind: 1})
    d = Path(workdir) / f"v{index}"
    d.mkdir(parents=True, exist_ok=True)
    src = d / base.name
    src.write_bytes(data)
    before = hashlib.sha256(data).hexdigest()

    def fail(msg):
        t.failures.append((seed, index, base.name, kind, msg))

    for check in (False, True):
        out = d / ("checked" if check else "split")
        argv = ["split", str(src), "-o", str(out)] + (["--check", "--linker", linker] if check else [])
        _judge(t, run_cli_limited(argv), src, out, check, fail)
    if hashlib.sha256(src.read_bytes()).hexdigest() != before:
        t.inputs_modified += 1
        fail("input modified")
    if not t.failures:
        shutil.rmtree(d, ignore_errors=True)
    return t


def run(seed: int, count: int, workdir: Path, start: int = 0, bases: list[Base] | None = None) -> Tally:
    """Variants ``start .. start+count-1`` of ``seed``; their files stay in ``workdir``
    only when they failed (to replay one: the same seed, ``start=i, count=1``).
    ``bases``: from ``build_bases`` (built into ``workdir`` when not given)."""
    import elflayout.cli  # noqa: F401 - imported once here, not in every child
    import elflayout.split.check  # noqa: F401
    import elflayout.split.cli  # noqa: F401

    workdir = Path(workdir)
    bases = bases or build_bases(workdir)
    total = Tally()
    for i in range(start, start + count):
        total.add(run_variant(bases, seed, i, workdir))
    return total
