"""Running programs of another machine: the emulator prefix for every place that runs a
target (measure, profile, the real loads of pack-relocs --check).

An arm64 program runs here as ``qemu-aarch64 -L ROOT PROG`` (qemu-user maps the guest's
files with the host kernel's mmap, so page-cache figures count real reads; wall time is
the emulator's). ROOT is an arm64 system root: ``$ELFLAYOUT_ARM64_ROOT`` or the one
scripts/arm64-root.sh makes in ``${ELFLAYOUT_CACHE:-~/.cache/elflayout}/arm64-root``.
"""

from __future__ import annotations

import os
import platform
import shlex
import shutil
import struct
from dataclasses import dataclass
from pathlib import Path

from elflayout.errors import ElflayoutError

ELFCLASS32, ELFCLASS64 = 1, 2
ELFDATA2LSB, ELFDATA2MSB = 1, 2
EM_386, EM_ARM, EM_X86_64, EM_AARCH64, EM_RISCV = 3, 40, 62, 183, 243
MACHINE_NAMES = {EM_386: "EM_386", EM_ARM: "EM_ARM", EM_X86_64: "EM_X86_64", EM_AARCH64: "EM_AARCH64",
                 EM_RISCV: "EM_RISCV"}
HOST_MACHINES = {"x86_64": "EM_X86_64", "aarch64": "EM_AARCH64"}
# What the host kernel runs itself (measure of a 32-bit x86 program needs no emulator).
NATIVE = {"EM_X86_64": {("EM_X86_64", 64, True), ("EM_X86_64", 32, True), ("EM_386", 32, True)},
          "EM_AARCH64": {("EM_AARCH64", 64, True)}}

# Machines we run through qemu-user: (qemu binary, sysroot cache name, what makes the root).
QEMU = {"EM_AARCH64": ("qemu-aarch64", "arm64-root", "scripts/arm64-root.sh")}
TRIPLETS = {"EM_X86_64": "x86_64-linux-gnu", "EM_AARCH64": "aarch64-linux-gnu"}  # Debian multiarch
QEMU_PACKAGE = "qemu-user"


@dataclass(frozen=True)
class Emulator:
    """The prefix a target's programs run under (argv[0] is the emulator)."""
    argv: tuple[str, ...]
    machine: str

    def wrap(self, argv: list[str]) -> list[str]:
        return [*self.argv, *argv]

    @property
    def root(self) -> str | None:
        a = list(self.argv)
        return a[a.index("-L") + 1] if "-L" in a[:-1] else None

    def describe(self) -> dict:
        """For results and profiles: what ran the target; wall time is the emulator's."""
        return {"argv": list(self.argv), "machine": self.machine, "time_comparable": False}


def host_machine() -> str:
    return HOST_MACHINES.get(platform.machine(), platform.machine())


def header(path) -> tuple[str, int, bool] | None:
    """(e_machine name, 32/64, little-endian) of an ELF file; None if not ELF."""
    try:
        with open(path, "rb") as f:
            h = f.read(20)
    except OSError:
        return None
    if len(h) < 20 or h[:4] != b"\x7fELF":
        return None
    cls, data = h[4], h[5]
    (m,) = struct.unpack("<H" if data == ELFDATA2LSB else ">H", h[18:20])
    return MACHINE_NAMES.get(m, f"e_machine {m}"), 64 if cls == ELFCLASS64 else 32, data == ELFDATA2LSB


def elf_machine(path) -> tuple[str, int] | None:
    """(e_machine name, 32/64) of an ELF file elflayout handles (x86-64, AArch64 ELF64
    little-endian); None for a file that is not ELF (a script runs natively). Bad input
    (big-endian, ILP32 arm64, other machines): one line naming the file."""
    hdr = header(path)
    if hdr is None:
        return None
    name, bits, little = hdr
    if not little:
        raise ElflayoutError(f"{path}: big-endian {name} is not supported (little-endian x86-64 and AArch64 only)")
    if name == "EM_AARCH64" and bits == 32:
        raise ElflayoutError(f"{path}: ILP32 AArch64 (ELF32) is not supported (LP64 AArch64 only)")
    if (name, bits) not in (("EM_X86_64", 64), ("EM_AARCH64", 64)):
        raise ElflayoutError(f"{path}: {name} ELF{bits} is not supported (x86-64 and AArch64 ELF64 only)")
    return name, bits


def sysroot(machine: str) -> Path:
    _, cache_name, _ = QEMU[machine]
    env = os.environ.get("ELFLAYOUT_ARM64_ROOT") if machine == "EM_AARCH64" else None
    if env:
        return Path(env)
    return Path(os.environ.get("ELFLAYOUT_CACHE") or Path.home() / ".cache" / "elflayout") / cache_name


def parse(text: str) -> Emulator:
    """``--emulator 'qemu-aarch64 -L ROOT'``: checked now, so a typo fails before any run."""
    try:
        argv = shlex.split(text)
    except ValueError as e:
        raise ElflayoutError(f"--emulator {text!r}: {e}") from None
    if not argv:
        raise ElflayoutError("--emulator: give a command, e.g. 'qemu-aarch64 -L ROOT'")
    if shutil.which(argv[0]) is None:
        raise ElflayoutError(f"--emulator: {argv[0]} not found (install {QEMU_PACKAGE}: apt-get install {QEMU_PACKAGE})")
    machine = next((m for m, (q, _, _) in QEMU.items() if os.path.basename(argv[0]).startswith(q)), "?")
    return Emulator(tuple(argv), machine)


def detect(machine: str) -> Emulator:
    """The default emulator of a foreign machine; one line saying what to install."""
    if machine not in QEMU:
        raise ElflayoutError(f"{machine} programs cannot be run here (x86-64 natively, AArch64 under qemu-user)")
    qemu, _, maker = QEMU[machine]
    exe = shutil.which(qemu)
    if exe is None:
        raise ElflayoutError(f"{machine} programs run under {qemu}, which is not installed "
                             f"(apt-get install {QEMU_PACKAGE})")
    root = sysroot(machine)
    if not (root / "lib" / "ld-linux-aarch64.so.1").exists():
        raise ElflayoutError(f"{machine} programs need a system root at {root}, which has no ld-linux-aarch64.so.1 "
                             f"(make it with {maker}, or set ELFLAYOUT_ARM64_ROOT)")
    return Emulator((qemu, "-L", str(root)), machine)


def for_program(path, given: str | Emulator | None = None) -> Emulator | None:
    """The emulator a program runs under: ``given`` (``--emulator``), else detected from
    its ELF machine; None when it runs natively."""
    if isinstance(given, Emulator):
        return given
    if given:
        return parse(given)
    hdr = header(path)
    if hdr is None or hdr in NATIVE.get(host_machine(), ()):
        return None
    return detect(elf_machine(path)[0])  # a machine we cannot run: refused by name


def for_library(path, root=None) -> Emulator | None:
    """The emulator real loads of a library run under (None: natively). ``root`` (a
    system root given by the user) replaces the default arm64 root."""
    em = elf_machine(path)
    if em is None or em[0] == host_machine():
        return None
    if root is None:
        return detect(em[0])
    qemu = QEMU[em[0]][0]
    if shutil.which(qemu) is None:
        detect(em[0])  # says what to install
    return Emulator((qemu, "-L", str(Path(root).resolve())), em[0])
