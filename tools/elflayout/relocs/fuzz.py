"""Damaged real libraries and executables through inspect, relocs and pack-relocs --check (seeded fuzzing).

Goal: every damaged input is either refused with one line (``ElflayoutError``: exit 2;
``Finding``: exit 1) or packed into an output that, after a real load, holds the same
writable bytes as its input; never an internal error, never a modified input.

Definitions
  variant    a copy of a real library with one damage: bytes flipped in the ELF header,
             program headers, section headers, dynamic array, .rela.dyn or the GNU
             version tables; a dynamic value replaced; two entries of .rela.dyn or the
             dynamic array swapped; or the file truncated. Variant ``i`` of seed ``s``
             depends on (s, i) only (numpy's ``default_rng([s, i])``): reproducible one
             by one.
  internal   any exception other than ElflayoutError/Finding/AlreadyPacked: a bug.
  accepted   pack-relocs packed the variant and its check (simulated loader at two
             bases, tables field by field) passed.

Steps (``run_variant``)
  1. Write the variant; remember its SHA-256.
  2. ``inspect`` and ``relocs`` documents and their text renderings.
  3. ``pack`` with the simulated check (``simload.check(real_load=False)``).
  4. Accepted: dlopen input and output with ASLR off and compare their writable bytes
     (``simload.real_load_compare``), as the real-load half of ``--check`` does; an
     input that does not load is what ``--check`` refuses ("the input itself does not
     load"), counted apart.
  5. The input's SHA-256 must be unchanged.

This is the damaged-input testing of Miller et al. ("An empirical study of the
reliability of UNIX utilities", CACM 1990), aimed at the ELF tables the packer reads.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from elflayout import elfcore
from elflayout import layouts as L
from elflayout.errors import ElflayoutError, Finding
from elflayout.inspect.core import inspect
from elflayout.inspect.text import render_text
from elflayout.relocs import simload
from elflayout.relocs.analyze import analyze
from elflayout.relocs.pack import AlreadyPacked, pack
from elflayout.relocs.text import render

KINDS = ("ehdr", "phdr", "shdr", "dynamic", "rela", "version", "dynamic-value", "swap-rela", "swap-dynamic",
         "truncate")
# Values that break assumptions: zero, all ones, sign bits, off by a word, huge.
_INTERESTING = (0, 1, 7, 8, 0xFFFFFFFF, 0x7FFFFFFF, 0x8000000000000000, 0xFFFFFFFFFFFFFFFF, 1 << 40)


@dataclass
class Tally:
    """Counts of one fuzz run (``bench/`` prints them; tests assert on them)."""
    variants: int = 0
    refused: int = 0               # ElflayoutError (exit 2) from one of the verbs
    check_failed: int = 0          # Finding (exit 1)
    nothing_to_do: int = 0         # AlreadyPacked (exit 0)
    accepted: int = 0
    accepted_equal: int = 0        # ... and equal after real loads
    accepted_input_does_not_load: int = 0  # ... refused by --check's real load
    accepted_differs: int = 0      # the figure that must stay 0
    internal_errors: int = 0
    multi_line_messages: int = 0
    inputs_modified: int = 0
    by_kind: dict = field(default_factory=dict)
    failures: list = field(default_factory=list)  # (seed, index, library, kind, what)

    def add(self, other: "Tally") -> None:
        for k, v in vars(other).items():
            if isinstance(v, int):
                setattr(self, k, getattr(self, k) + v)
        for k, v in other.by_kind.items():
            self.by_kind[k] = self.by_kind.get(k, 0) + v
        self.failures += other.failures


def _section(img, *names):
    for n in names:
        s = img.section(n)
        if s is not None and s.occupies_file:
            return s.offset, s.size
    return None


def damage(data: bytes, kind: str, rng: np.random.Generator) -> bytes:
    """One damage of ``kind`` applied to a copy of ``data`` (a valid ELF64 library)."""
    b = bytearray(data)
    ehdr = np.frombuffer(data, L.EHDR64, 1)[0]
    phoff, phn = int(ehdr["e_phoff"]), int(ehdr["e_phnum"]) * L.PHDR64.itemsize
    shoff, shn = int(ehdr["e_shoff"]), int(ehdr["e_shnum"]) * L.SHDR64.itemsize
    if kind == "truncate":
        return bytes(b[:int(rng.integers(0, len(b)))])
    tmp = None
    regions = {"ehdr": (0, L.EHDR64.itemsize), "phdr": (phoff, phn), "shdr": (shoff, shn)}
    if kind not in regions:
        import tempfile

        with tempfile.NamedTemporaryFile(suffix=".so") as f:
            f.write(data)
            f.flush()
            with elfcore.ElfImage(f.name) as img:
                tmp = dict(dynamic=_section(img, ".dynamic"), rela=_section(img, ".rela.dyn"),
                           version=[r for r in (_section(img, ".gnu.version_r"), _section(img, ".gnu.version_d"),
                                                _section(img, ".gnu.version")) if r])
    if kind in regions:
        region = regions[kind]
    elif kind in ("dynamic", "dynamic-value", "swap-dynamic"):
        region = tmp["dynamic"]
    elif kind in ("rela", "swap-rela"):
        region = tmp["rela"]
    else:
        region = tmp["version"][int(rng.integers(len(tmp["version"])))] if tmp["version"] else None
    if not region or region[1] <= 0:
        region = (0, L.EHDR64.itemsize)
    off, size = region
    if kind in ("swap-rela", "swap-dynamic"):
        ent = L.RELA64.itemsize if kind == "swap-rela" else L.DYN64.itemsize
        n = size // ent
        if n >= 2:
            i, j = (int(x) for x in rng.choice(n, 2, replace=False))
            a, c = off + i * ent, off + j * ent
            b[a:a + ent], b[c:c + ent] = bytes(b[c:c + ent]), bytes(b[a:a + ent])
        return bytes(b)
    if kind == "dynamic-value":
        n = size // L.DYN64.itemsize
        k = off + int(rng.integers(max(n, 1))) * L.DYN64.itemsize
        if rng.random() < 0.3:  # drop a tag: it becomes DT_NULL (ends the array there)
            b[k:k + 8] = bytes(8)
        else:
            v = int(rng.choice(_INTERESTING)) if rng.random() < 0.5 else \
                int.from_bytes(b[k + 8:k + 16], "little") + int(rng.integers(-64, 64)) * 8
            b[k + 8:k + 16] = (v % (1 << 64)).to_bytes(8, "little")
        return bytes(b)
    for _ in range(int(rng.integers(1, 4))):  # flip 1-3 bytes
        k = off + int(rng.integers(size))
        if k < len(b):
            b[k] = int(rng.integers(256)) if rng.random() < 0.5 else b[k] ^ (1 << int(rng.integers(8)))
    return bytes(b)


def _one_line(e: BaseException) -> bool:
    return "\n" not in str(e).strip()


def run_variant(lib: Path, data: bytes, seed: int, index: int, workdir: Path, real_load: bool = True,
                form: str = "relr") -> Tally:
    """Steps 1-5 for variant ``index`` of ``seed`` made from ``data`` (library ``lib``),
    packed in ``form`` ("relr" or "self")."""
    rng = np.random.default_rng([seed, index])
    kind = KINDS[int(rng.integers(len(KINDS)))]
    t = Tally(variants=1, by_kind={kind: 1})
    d = workdir / f"v{index}"
    d.mkdir(parents=True, exist_ok=True)
    src = d / lib.name
    src.write_bytes(damage(data, kind, rng))
    before = hashlib.sha256(src.read_bytes()).hexdigest()
    what = None

    def fail(msg):
        t.failures.append((seed, index, lib.name, kind, msg))

    try:
        render_text(inspect(src))
        with elfcore.ElfImage(src) as img:
            render(analyze(img))
        pack(src, d / "out.so", verify=lambda a, b: simload.check(a, b, real_load=False), form=form)
        what = "accepted"
    except AlreadyPacked:
        what = "nothing_to_do"
    except Finding as e:
        what = "check_failed"
        t.multi_line_messages += not _one_line(e)
    except ElflayoutError as e:
        what = "refused"
        t.multi_line_messages += not _one_line(e)
        if not _one_line(e):
            fail(f"multi-line message: {e!r}")
    except Exception as e:  # noqa: BLE001 - the point: anything else is a bug of ours
        what = "internal_errors"
        fail(f"{type(e).__name__}: {e}")
    setattr(t, what, 1)
    if what == "accepted" and real_load:  # an executable is started up to its entry point instead
        compare = simload.real_start_compare if simload.is_executable(src) else simload.real_load_compare
        r = compare(src, d / "out.so")
        if "error" in r:
            t.accepted_input_does_not_load = 1
        elif r["equal"]:
            t.accepted_equal = 1
        else:
            t.accepted_differs = 1
            fail(f"accepted output differs after a real load: {r}")
    if hashlib.sha256(src.read_bytes()).hexdigest() != before:
        t.inputs_modified = 1
        fail("input modified")
    if not t.failures:
        shutil.rmtree(d, ignore_errors=True)
    return t


def run(libs: list[Path], seed: int, count: int, workdir: Path, *, start: int = 0, real_load: bool = True,
        progress=None, form: str = "relr") -> Tally:
    """Variants ``start .. start+count-1`` of ``seed``, round-robin over ``libs``, packed in ``form``."""
    datas = [Path(x).read_bytes() for x in libs]
    total = Tally()
    os.makedirs(workdir, exist_ok=True)
    for i in range(start, start + count):
        k = i % len(libs)
        total.add(run_variant(Path(libs[k]), datas[k], seed, i, Path(workdir), real_load, form))
        if progress:
            progress(i - start + 1, total)
    return total
