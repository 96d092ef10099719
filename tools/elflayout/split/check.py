"""``split --check``: prove a split changed nothing a link can see.

Link the original inputs and the split outputs the same way — every object, archive
members in order (``--whole-archive``), no start files, no build-id — so the linker
places the new sections in their original order. Then compare the two outputs:
every allocated section (name, address, size, bytes; sizes only for NOBITS), and the
address, size and section of every named symbol of ``.symtab``. The split objects
give each new section the alignment its bytes had at their original offset, so an
original-order link must reproduce the original bytes exactly; any difference is
reported with the first differing address and the symbol that holds it.

The link is ``-shared`` (what PIC archives are for); objects that cannot be linked
into a shared library (non-PIC code) are linked as a static executable with
unresolved symbols ignored, for both sides alike. A linker that cannot link the
original objects proves nothing either way: the result says so, with the linker's
first error line (``could_not_check``).
"""

from __future__ import annotations

import io
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from elftools.common.exceptions import ELFError
from elftools.elf.constants import SH_FLAGS
from elftools.elf.elffile import ELFFile

from elflayout import toolchain
from elflayout.split import debugcheck
from elflayout.split.archive import is_archive

STYLES = {
    "shared": ["-shared", "-nostdlib", "-Wl,--build-id=none"],
    "static": ["-nostdlib", "-static", "-no-pie", "-Wl,--build-id=none", "-Wl,--unresolved-symbols=ignore-all",
               "-Wl,-e,0"],
}


@dataclass
class CheckResult:
    linker: str
    style: str | None
    identical: bool
    sections_compared: int
    bytes_compared: int
    symbols_compared: int
    first_difference: str | None = None
    differences: list[str] = field(default_factory=list)
    explained: list[str] = field(default_factory=list)   # differences that change no meaning, and why
    could_not_check: str | None = None   # the linker refused the original objects: its first error line
    stand_in: str | None = None          # a symbol the start files define, linked in on both sides
    line_addresses_compared: int = 0     # code addresses whose file:line both links' DWARF agree on
    debug_verify: str | None = None      # llvm-dwarfdump --verify: verified, fails, or why not verified


def _inputs(paths: list[Path]) -> list[str]:
    out = []
    for p in paths:
        with open(p, "rb") as f:
            head = f.read(8)
        if is_archive(head):
            out += ["-Wl,--whole-archive", str(p), "-Wl,--no-whole-archive"]
        else:
            out.append(str(p))
    return out


def inputs_machine(paths: list[Path]) -> str:
    """The ELF machine of the first object among ``paths`` (archive members included);
    this machine's when none is ELF. The links of ``--check`` are for it."""
    from elflayout import emulator
    from elflayout.split.archive import read_archive

    for p in paths:
        raw = Path(p).read_bytes()
        for body in ([b for _, b in read_archive(raw, str(p))] if is_archive(raw[:8]) else [raw]):
            if body[:4] == b"\x7fELF" and len(body) >= 20:
                m = int.from_bytes(body[18:20], "little" if body[5] == 1 else "big")
                return emulator.MACHINE_NAMES.get(m, f"e_machine {m}")
    return emulator.host_machine()


# Rewrites an AArch64 linker makes of its own accord, decided by things the split
# changes, so the links compared make none, both sides alike: lld turns adrp+add into
# nop+adr when the relocations name a section symbol with addend 0 and the target is
# near; GNU ld and gold work around Cortex-A53 erratum 843419 (the gcc driver's
# default) with stubs placed between input sections, whose number the split changes.
SAME_LAYOUT = {"EM_AARCH64": ["-Wl,--no-relax", "-mno-fix-cortex-a53-843419"]}


def _link(paths: list[Path], linker: str, style: str, out: Path, machine: str | None = None) -> toolchain.LinkResult:
    return toolchain.link(linker, [*STYLES[style], *SAME_LAYOUT.get(machine, []), "-o", out, *_inputs(paths)],
                          machine=machine)


# crtbeginS.o's hidden __dso_handle, which -nostdlib leaves out: C++ objects with static
# destructors refer to it, and gold and GNU ld refuse it undefined. Weak, so inputs that
# define it (libc.a) keep their own; linked first on both sides alike.
DSO_HANDLE = "__dso_handle"
DSO_HANDLE_STUB = f"""
    .section .data.rel.ro,"aw"
    .weak {DSO_HANDLE}
    .hidden {DSO_HANDLE}
    .align 8
    .type {DSO_HANDLE},@object
{DSO_HANDLE}: .quad {DSO_HANDLE}
    .size {DSO_HANDLE}, 8
    .section .note.GNU-stack,"",@progbits
"""


def _stand_in(td: str, machine: str | None = None) -> Path:
    from elflayout import emulator

    src, obj = Path(td) / "dso_handle.s", Path(td) / "dso_handle.o"
    src.write_text(DSO_HANDLE_STUB)
    subprocess.run([*toolchain.assembler(machine or emulator.host_machine()), "-o", str(obj), str(src)], check=True,
                   capture_output=True)
    return obj


def stand_in_objects(result: CheckResult, td: str, machine: str | None = None) -> list[Path]:
    """The stand-in objects ``result``'s links needed (written into ``td``), to be linked
    first on both sides by any further link of the same inputs (for ``machine``)."""
    return [_stand_in(td, machine)] if result.stand_in == DSO_HANDLE else []


def _original_link(originals: list[Path], linker: str, out: Path, td: str,
                   machine: str | None = None) -> tuple[str | None, list[Path], list]:
    """The style (and stand-in objects) with which ``linker`` links the originals; None
    and each attempt's first error line when it cannot."""
    errs = []
    for st in STYLES:
        r = _link(originals, linker, st, out, machine)
        if r.ok:
            return st, [], errs
        errs.append(f"{st} link: {r.error}")
    if any(DSO_HANDLE in e for e in errs):
        extra = [_stand_in(td, machine)]
        for st in STYLES:
            if _link([*extra, *originals], linker, st, out, machine).ok:
                return st, extra, errs
    return None, [], errs


def _image(path: Path) -> tuple[dict, dict, dict]:
    elf = ELFFile(io.BytesIO(path.read_bytes()))
    secs = {}
    plt = {}     # PLT entry address -> symbol (x86-64 lazy PLT: 16-byte entries after PLT0)
    rp, pl = elf.get_section_by_name(".rela.plt"), elf.get_section_by_name(".plt")
    if rp is not None and pl is not None:
        dsym = elf.get_section(rp["sh_link"]) if rp["sh_link"] else None
        for i, r in enumerate(rp.iter_relocations()):
            plt[pl["sh_addr"] + PLT_ENTRY * (i + 1)] = _plt_target(dsym, r)
    for s in elf.iter_sections():
        if s["sh_flags"] & SH_FLAGS.SHF_ALLOC:
            nob = s["sh_type"] == "SHT_NOBITS"
            secs[s.name] = (s["sh_addr"], s["sh_size"], b"" if nob else s.data())
    syms = {}
    tab = elf.get_section_by_name(".symtab")
    for sym in (tab.iter_symbols() if tab is not None else ()):
        if sym.name and sym["st_info"]["type"] != "STT_SECTION" and sym["st_info"]["type"] != "STT_FILE":
            syms.setdefault(sym.name, []).append((sym["st_value"], sym["st_size"]))
    return secs, syms, plt


def _plt_target(dsym, r) -> str:
    """What a PLT slot calls: its symbol, or in a static link (``.rela.plt`` of
    IRELATIVE relocations, no symbol table linked) the ifunc resolver's address."""
    if dsym is not None and hasattr(dsym, "get_symbol") and r["r_info_sym"]:
        return dsym.get_symbol(r["r_info_sym"]).name
    return f"*resolver {r['r_addend']:#x}"


# x86-64 psABI lazy PLT entry size; call/jmp rel32 opcodes.
PLT_ENTRY = 16
CALL_REL32, JMP_REL32 = 0xE8, 0xE9
PLT_TABLES = (".plt", ".rela.plt", ".got.plt")


def _plt_permutation(name: str, a: tuple, b: tuple, pa: dict, pb: dict) -> str | None:
    """Explain a difference that is only another numbering of the same PLT slots (gold
    numbers them in its own order): same slots per symbol, calls reach the same
    symbol's slot. None if the difference is anything else."""
    (aa, _, ad), (_, _, bd) = a, b
    if sorted(pa.values()) != sorted(pb.values()):
        return None
    if name in PLT_TABLES:
        return f"{name}: same {len(pa)} PLT slots numbered in another order"
    k, n = 0, len(ad)
    while k < n:
        if ad[k] == bd[k]:
            k += 1
            continue
        ok = False
        for f in range(max(1, k - 3), k + 1):        # the rel32 field holding byte k
            if ad[f - 1] == bd[f - 1] and ad[f - 1] in (CALL_REL32, JMP_REL32) and f + 4 <= n:
                ta = aa + f + 4 + int.from_bytes(ad[f:f + 4], "little", signed=True)
                tb = aa + f + 4 + int.from_bytes(bd[f:f + 4], "little", signed=True)
                if ta in pa and tb in pb and pa[ta] == pb[tb] and ad[f + 4:f + 5] == bd[f + 4:f + 5]:
                    ok, k = True, f + 4
                    break
        if not ok:
            return None
    return f"{name}: calls reach the same symbols' PLT slots, numbered in another order"


def _holder(syms: dict, addr: int) -> str:
    best = None
    for name, vals in syms.items():
        for v, sz in vals:
            if v <= addr < v + max(sz, 1) and (best is None or v > best[1]):
                best = (name, v)
    return f" (in {best[0]}+{addr - best[1]:#x})" if best else ""


def verdict(results: list[CheckResult]) -> str | None:
    """Why the split outputs must not be written, or None: some linker's link differs,
    or no linker could link the original objects (then nothing was proved)."""
    bad = [r for r in results if r.could_not_check is None and not r.identical]
    if not bad and any(r.could_not_check is None for r in results):
        return None
    parts = [f"differs with {r.linker}: {r.first_difference}" for r in bad]
    parts += [f"identical with {r.linker}" for r in results if r.identical]
    parts += [f"could not check with {r.linker}: {r.could_not_check}" for r in results if r.could_not_check]
    return ("check failed: " if bad else "nothing checked: ") + "; ".join(parts) + " (nothing written)"


def check(originals: list[Path], split: list[Path], linker: str = "lld") -> CheckResult:
    """Link both sides in original order with ``linker`` and compare (see module doc)."""
    from elflayout import emulator

    machine = inputs_machine(originals)
    machine = None if machine == emulator.host_machine() else machine
    with tempfile.TemporaryDirectory(prefix="elflayout-split-check-") as td:
        a, b = Path(td) / "original.so", Path(td) / "split.so"
        style, extra, errs = _original_link(originals, linker, a, td, machine)
        if style is None:
            return CheckResult(linker, None, False, 0, 0, 0, could_not_check="; ".join(errs))
        stand_in = DSO_HANDLE if extra else None
        r = _link([*extra, *split], linker, style, b, machine)
        if not r.ok:
            return CheckResult(linker, style, False, 0, 0, 0, f"the split objects do not link with {linker}: {r.error}",
                               stand_in=stand_in)
        try:
            sa, ya, pa = _image(a)
        except ELFError as e:  # a linker that accepted damaged objects may write a broken file
            return CheckResult(linker, style, False, 0, 0, 0, could_not_check=f"its link of the original "
                               f"objects is not a readable ELF file ({e})", stand_in=stand_in)
        try:
            sb, yb, pb = _image(b)
        except ELFError as e:
            return CheckResult(linker, style, False, 0, 0, 0, f"its link of the split objects is not a readable "
                               f"ELF file ({e})", stand_in=stand_in)
        lines, line_diffs, verified = debugcheck.compare(a, b)
    res = CheckResult(linker, style, True, 0, 0, 0, stand_in=stand_in, line_addresses_compared=lines,
                      debug_verify=verified)
    res.differences += line_diffs
    for name in sorted(set(sa) | set(sb), key=lambda n: (sa.get(n) or sb.get(n))[0]):
        if name not in sa or name not in sb:
            res.differences.append(f"section {name} only in the {'split' if name in sb else 'original'} link")
            continue
        (aa, az, ad), (ba, bz, bd) = sa[name], sb[name]
        res.sections_compared += 1
        if (aa, az) != (ba, bz):
            res.differences.append(f"section {name}: at {aa:#x} size {az:#x} in the original link, "
                                   f"at {ba:#x} size {bz:#x} in the split one")
            continue
        res.bytes_compared += len(ad)
        if ad != bd and (why := _plt_permutation(name, sa[name], sb[name], pa, pb)):
            res.explained.append(why)
        elif ad != bd:
            k = next(i for i in range(len(ad)) if ad[i] != bd[i])
            res.differences.append(f"section {name}: first different byte at {aa + k:#x}{_holder(ya, aa + k)}")
    for name in sorted(set(ya) | set(yb)):
        res.symbols_compared += 1
        if sorted(ya.get(name, [])) != sorted(yb.get(name, [])):
            res.differences.append(f"symbol {name}: {sorted(ya.get(name, []))} in the original link, "
                                   f"{sorted(yb.get(name, []))} in the split one")
    if res.differences:
        res.identical = False
        res.first_difference = res.differences[0]
    return res
