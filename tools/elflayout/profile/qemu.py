"""qemu backend: profile programs of another machine (AArch64) under qemu-user.

The TCG plugin ``qemutouch`` (C, ``tools/qemutouch/``, built into ``build/qemu``) records
the first translation of each code block (in user mode: its first execution) and, with
``--data``, the first read and first write of each page of the targets, and writes the
valgrind tool's raw log format; the events, the loader/init/main marks and the mapping
records are read with the valgrind backend's code, so both give the same profile.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import capstone
import numpy as np
from elftools.common.exceptions import ELFError

from elflayout import emulator as emulation
from elflayout.arch import AARCH64
from elflayout.elfcore import ElfImage
from elflayout.errors import ElflayoutError
from elflayout.profile.model import workload_path
from elflayout.profile.valgrind import Run, combine, exe_initializer_marks, main_offset, read_log

ROOT = Path(__file__).resolve().parents[3]
PLUGIN_SRC = ROOT / "tools" / "qemutouch"
NOTE = ("qemu backend: 'first' orders first translations of code blocks (in qemu-user, their first executions; "
        "and with --data first reads/writes of pages) of all targets in one sequence; 't' is seconds since qemu "
        "started, dilated by the emulator")


def plugin_path() -> Path:
    return Path(os.environ.get("ELFLAYOUT_QEMU_PLUGIN", ROOT / "build" / "qemu" / "qemutouch.so"))


def status(build: bool = True) -> str | None:
    """None when the plugin can run (built now if its source and header are here), else
    what to do."""
    p = plugin_path()
    if p.is_file() and (not (PLUGIN_SRC / "qemutouch.c").is_file()
                        or p.stat().st_mtime >= (PLUGIN_SRC / "qemutouch.c").stat().st_mtime):
        return None
    if build and shutil.which("make") and (PLUGIN_SRC / "Makefile").is_file():
        r = subprocess.run(["make", "-s", "-C", str(PLUGIN_SRC)], capture_output=True, text=True)
        if r.returncode == 0 and p.is_file():
            return None
        last = (r.stdout + r.stderr).strip().splitlines()[-1:] or ["make failed"]
        return f"the qemu plugin qemutouch cannot be built: {last[0]}"
    return f"the qemu plugin {p} is not built (run: make bootstrap)"


def _got_value(img: ElfImage, slot: int) -> int | None:
    """The link-time value a GOT slot holds after relocation (RELATIVE: its addend)."""
    for rel in img.reloc_tables().values():
        if "r_addend" not in rel.dtype.names:
            continue
        hit = np.flatnonzero(rel["r_offset"] == slot)
        if hit.size and int(img.reloc_types(rel[hit[:1]])[0]) == AARCH64.relative:
            return int(rel["r_addend"][hit[0]])
    return None


def _offset(img: ElfImage, md, vaddr: int | None) -> int | None:
    """File offset of the code at ``vaddr``, through glibc's ``__wrap_main`` (``nop; b main``,
    what a non-PIE _start hands over since glibc 2.34)."""
    if vaddr is None or img.vaddr_to_offset(vaddr) < 0:
        return None
    off = int(img.vaddr_to_offset(vaddr))
    ins = list(md.disasm(bytes(img.mm[off:off + 8]), vaddr))
    if len(ins) == 2 and ins[0].mnemonic == "nop" and ins[1].mnemonic == "b":
        o = img.vaddr_to_offset(ins[1].operands[0].imm)
        return int(o) if o >= 0 else None
    return off


def aarch64_main(exe: str) -> int | None:
    """File offset of ``main`` in a stripped AArch64 executable, from its ``_start``
    (glibc start.S hands main to __libc_start_main in x0: ``adrp x0, :got:main; ldr x0,
    [x0, :got_lo12:main]`` in a PIE, ``adrp x0, main; add x0, x0, :lo12:main`` otherwise)."""
    try:
        with ElfImage(exe) as img:
            if img.machine != "EM_AARCH64":
                return None
            entry = int(img.elf.header["e_entry"])
            off = img.vaddr_to_offset(entry)
            if off < 0:
                return None
            md = capstone.Cs(capstone.CS_ARCH_ARM64, capstone.CS_MODE_ARM)
            md.detail = True
            page = None
            for ins in md.disasm(bytes(img.mm[off:off + 96]), entry):
                ops = ins.operands
                if ins.mnemonic == "bl" or not ops or ops[0].type != capstone.arm64.ARM64_OP_REG \
                        or ins.reg_name(ops[0].reg) != "x0":
                    if ins.mnemonic == "bl":
                        return None
                    continue
                if ins.mnemonic == "adrp":
                    page = ops[1].imm
                elif page is not None and ins.mnemonic == "ldr" and ops[1].type == capstone.arm64.ARM64_OP_MEM:
                    return _offset(img, md, _got_value(img, page + ops[1].mem.disp))
                elif page is not None and ins.mnemonic == "add" and ops[-1].type == capstone.arm64.ARM64_OP_IMM:
                    return _offset(img, md, page + ops[-1].imm)
    except (ElflayoutError, ELFError, capstone.CsError):  # damaged: main() stays unknown
        return None
    return None


def _arg(v: str) -> str:
    return v.replace(",", ",,")  # qemu's option syntax: a comma inside a value is doubled


def plugin_option(out: str, targets: list[str], exe: str, data: bool, marks=()) -> str:
    opts = [f"file={_arg(str(plugin_path()))}", f"out={_arg(out)}", f"exe={_arg(exe)}",
            f"data={'on' if data else 'off'}"]
    opts += [f"target={_arg(os.path.realpath(t))}" for t in targets]
    opts += [f"mark={m:x}" for m in marks]
    return ",".join(opts)


def run(targets: list[str], argv: list[str], *, emulator: emulation.Emulator, data: bool = False,
        env: dict | None = None, stdout=None, stderr=None, log_path: str | None = None) -> Run:
    """Run ``argv`` under ``emulator`` with the plugin; the parsed log and the status."""
    why = status()
    if why:
        raise ElflayoutError(why)
    exe = os.path.realpath(workload_path(argv[0]))
    with tempfile.TemporaryDirectory(prefix="elflayout-qt-") as td:
        out = os.path.join(td, "qemutouch.log")
        mo = main_offset(exe)
        if mo is None:
            mo = aarch64_main(exe)
        init_marks = exe_initializer_marks(exe, targets) if mo is not None else []
        marks = [mo, *init_marks] if mo is not None else []
        cmd = [*emulator.argv, "-plugin", plugin_option(out, targets, exe, data, marks), exe, *argv[1:]]
        t0 = time.monotonic()
        try:
            r = subprocess.run(cmd, env=dict(os.environ if env is None else env), stdout=stdout, stderr=stderr)
        except OSError as err:
            raise ElflayoutError(f"cannot run {emulator.argv[0]}: {err.strerror}") from None
        dt = time.monotonic() - t0
        if not os.path.exists(out) or os.path.getsize(out) == 0:
            raise ElflayoutError(f"{emulator.argv[0]} exited with status {r.returncode} without writing the plugin's "
                                 f"log (does this qemu load plugins? qemu-user does, qemu-user-static does not)")
        log = read_log(out)
        if log_path:
            shutil.copyfile(out, log_path)
    ev, marks_ = combine([log])
    ms = marks_.pop("mark_seqs")
    marks_["main_seq"] = ms[0][0] if mo is not None and 0 in ms else None
    marks_["initializer_marks"] = {off: ms.get(i + 1) for i, off in enumerate(init_marks)}
    marks_["marked_exe"] = exe
    return Run(log, ev, marks_, r.returncode, dt, cmd)
