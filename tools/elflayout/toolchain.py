"""The linkers elflayout drives: their names, how the gcc driver selects each, how a bare
linker option passes through the driver, and which line of a failed link says why.

One place for this knowledge: ``split --check`` links with it, the targets relink
libraries with it. GNU ld is called ``bfd`` (its ``-fuse-ld=`` name).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from elflayout.errors import ElflayoutError

LINKERS = ("bfd", "gold", "lld", "mold")
# A linker command's program name -> the linker it runs.
COMMAND_LINKER = {"ld": "bfd", "ld.bfd": "bfd", "ld.gold": "gold", "gold": "gold", "ld.lld": "lld", "lld": "lld",
                  "ld.mold": "mold", "mold": "mold"}
# The same names with a version (ld.lld-22, lld-19, as Debian's llvm-N packages install them)
# and a cross toolchain's target prefix (x86_64-linux-gnu-ld.bfd).
_LINKER_PROGRAM = re.compile(r"^(?:[A-Za-z0-9_]+(?:-[A-Za-z0-9_]+)*-)?(ld(?:\.(?:bfd|gold|lld|mold))?|lld|gold|mold)"
                             r"(?:-\d+(?:\.\d+)*)?$")
# Driver options choosing the linker: gcc and clang -fuse-ld=NAME, clang also
# -fuse-ld=/path and --ld-path=/path (which wins over -fuse-ld).
FUSE_LD, LD_PATH = "-fuse-ld=", "--ld-path="

# Lines of a failed link that carry no reason of their own: the driver's summary
# (gcc's collect2, clang's), warnings, notes, and context lines that only say where
# the next line's error is (GNU ld "in function", lld ">>> referenced by").
_NOT_A_REASON = re.compile(
    r"collect2: error: \S+ returned \d+ exit status"
    r"|error: linker command failed with exit code"
    r"|(^|: )warning: |(^|: )note: "
    r"|^\s*>>> "
    r"|: in function [`'].*'?:$"
    r"|: (first defined here|more undefined references to .* follow)$")


def linker_flag(linker: str) -> str:
    """The gcc driver flag selecting ``linker``."""
    if linker not in LINKERS:
        raise ElflayoutError(f"{linker}: unknown linker (choose from {', '.join(LINKERS)})")
    if linker != "bfd" and shutil.which(f"ld.{linker}") is None and shutil.which(linker) is None:
        raise ElflayoutError(f"ld.{linker}: not installed (run: make bootstrap)")
    return f"-fuse-ld={linker}"


def newest_lld_dir() -> Path:
    """The bin directory of the newest ``/usr/lib/llvm-N`` with ld.lld (lld >= 15 packs
    RELR), else that of ``ld.lld`` on PATH."""
    found = sorted((int(p.parts[3].split("-")[1]), p.parent) for p in Path("/usr/lib").glob("llvm-*/bin/ld.lld")
                   if p.parts[3].split("-")[1].isdigit())
    if found:
        return found[-1][1]
    exe = shutil.which("ld.lld")
    if exe is None:
        raise ElflayoutError("ld.lld: not installed (run: make bootstrap)")
    return Path(exe).parent


def cross_linker_flags(linker: str) -> list[str]:
    """The cross gcc driver's flags selecting ``linker``: gcc 12 has no --ld-path and
    looks for ``<triplet>-ld.lld``, so lld is found through -B."""
    flag = linker_flag(linker)
    return [flag, f"-B{newest_lld_dir()}/"] if linker == "lld" else [flag]


def driver_args(args) -> list[str]:
    """Extra link arguments for the gcc/g++ driver: bare linker options
    (``--symbol-ordering-file=F``, ``--section-ordering-file=F``) get ``-Wl,``."""
    out = []
    for a in args:
        a = str(a)
        out.append(f"-Wl,{a}" if a.startswith("--") else a)
    return out


def command_linker(program: str) -> str | None:
    """The linker a command named ``program`` runs (``ld.gold`` -> gold, ``ld.lld-22`` ->
    lld), None for anything else (a compiler driver)."""
    m = _LINKER_PROGRAM.match(Path(program).name)
    return COMMAND_LINKER[m[1]] if m else None


def fuse_ld_linker(value: str) -> str | None:
    """The linker ``-fuse-ld=VALUE`` or ``--ld-path=VALUE`` selects: a name (``lld``,
    ``lld-22``, ``bfd``: clang runs ``ld.VALUE``) or a path naming its program; None
    when it is none of the linkers elflayout knows."""
    name = Path(value).name
    return command_linker(name) or command_linker("ld." + name)


def linker_name(value: str) -> str:
    """The linker a ``--linker`` value names: bfd, gold, lld or mold, or a program or
    driver name of one (``ld.lld-22``, ``lld-19``, ``ld.gold``)."""
    fam = value if value in LINKERS else fuse_ld_linker(value)
    if fam is None:
        raise ElflayoutError(f"--linker {value}: unknown linker (choose from {', '.join(LINKERS)}, "
                             "or a program name such as ld.lld-22)")
    return fam


def default_linker() -> str:
    """The linker a compiler driver runs when its command chooses none: ``ld`` on PATH
    (GNU ld unless the system links it to another)."""
    ld = shutil.which("ld")
    return (command_linker(Path(ld).resolve().name) if ld else None) or "bfd"


def chosen_linker(cmd: list[str]) -> tuple[str | None, str | None, bool]:
    """How a link command chooses its linker: (linker, the argument choosing it, driver).

    A direct linker call chooses by its program name (argument None). A driver chooses
    by its last ``--ld-path=`` (clang: it wins over ``-fuse-ld``), else its last
    ``-fuse-ld=``, else the ``ld`` in a ``-B`` directory (a link to ld.lld: how a cross
    gcc 12, which has no ``--ld-path``, runs lld); (None, None, True) when it chooses nothing. A choice naming no linker
    elflayout knows is refused."""
    direct = command_linker(cmd[0])
    if direct is not None:
        return direct, None, False
    for opt in (LD_PATH, FUSE_LD):
        given = [a for a in cmd[1:] if a.startswith(opt)]
        if given:
            used = fuse_ld_linker(given[-1][len(opt):])
            if used is None:
                raise ElflayoutError(f"{given[-1]}: unknown linker (elflayout knows {', '.join(LINKERS)}: "
                                     "ld.bfd, ld.gold, ld.lld[-N], mold)")
            return used, given[-1], True
    for d in _b_dirs(cmd):  # gcc runs the ld of the first -B directory that has one
        ld = Path(d) / "ld"
        if ld.exists():
            used = command_linker(ld.resolve().name)
            if used is not None:
                return used, f"-B{d}", True
    return None, None, True


def _b_dirs(cmd: list[str]) -> list[str]:
    """The driver's -B directories, in command order (gcc searches the first first)."""
    out = []
    for i, a in enumerate(cmd[1:], 1):
        if a == "-B" and i + 1 < len(cmd):
            out.append(cmd[i + 1])
        elif a.startswith("-B") and len(a) > 2:
            out.append(a[2:])
    return out


# Target triplets' first component -> the ELF machine (pyelftools' name).
_TRIPLET_MACHINE = {"x86_64": "EM_X86_64", "amd64": "EM_X86_64", "aarch64": "EM_AARCH64", "arm64": "EM_AARCH64"}
# GNU ld emulations (-m) of the machines elflayout links for.
_LD_EMULATION_MACHINE = {"elf_x86_64": "EM_X86_64", "aarch64linux": "EM_AARCH64", "aarch64elf": "EM_AARCH64"}


def _triplet_machine(triplet: str) -> str | None:
    return _TRIPLET_MACHINE.get(triplet.split("-", 1)[0])


def target_machine(cmd: list[str]) -> str:
    """The ELF machine a link command links for: its cross driver's or linker's target
    prefix (``aarch64-linux-gnu-gcc``), clang's ``--target=``/``-target``, GNU ld's ``-m``
    emulation, else its first object file's machine, else this machine's."""
    from elflayout import emulator

    prog = Path(cmd[0]).name
    if "-" in prog and _triplet_machine(prog):
        return _triplet_machine(prog)
    for i, a in enumerate(cmd[1:], 1):
        nxt = cmd[i + 1] if i + 1 < len(cmd) else ""
        t = a[len("--target="):] if a.startswith("--target=") else nxt if a in ("-target", "--target") else None
        if t and _triplet_machine(t):
            return _triplet_machine(t)
        m = a[2:] if a.startswith("-m") and len(a) > 2 and command_linker(cmd[0]) else nxt if a == "-m" else None
        if m in _LD_EMULATION_MACHINE:
            return _LD_EMULATION_MACHINE[m]
    for a in cmd[1:]:
        if not a.startswith("-") and a.endswith((".o", ".lo", ".obj")):
            hdr = emulator.header(a)
            if hdr is not None:
                return hdr[0]
    return emulator.host_machine()


def assembler(machine: str) -> list[str]:
    """The GNU assembler command for ``machine``: this machine's ``as``, or the cross
    binutils' (``aarch64-linux-gnu-as``: package binutils-aarch64-linux-gnu)."""
    from elflayout import emulator

    if machine == emulator.host_machine():
        return ["as", "--64"] if machine == "EM_X86_64" else ["as"]
    triplet = emulator.TRIPLETS.get(machine)
    if triplet is None:
        raise ElflayoutError(f"{machine}: no assembler known for this machine")
    return [f"{triplet}-as"]


def first_error(output: str) -> str:
    """The first line of a failed link's output that gives a reason (the linker's own
    error, not the driver's "ld returned 1 exit status"); "" if there is none."""
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    for ln in lines:
        if not _NOT_A_REASON.search(ln):
            return ln
    return lines[0] if lines else ""


@dataclass
class LinkResult:
    returncode: int
    output: str          # stderr and stdout; bytes that are not UTF-8 kept as \\x escapes

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    @property
    def error(self) -> str:
        """The linker's first error line (or the exit status when it printed nothing)."""
        return first_error(self.output) or f"exit status {self.returncode}"


def cross_driver(machine: str) -> str:
    """The gcc driver linking for ``machine``: ``gcc`` here, the cross driver
    (``aarch64-linux-gnu-gcc``: package gcc-aarch64-linux-gnu) for another machine."""
    from elflayout import emulator

    if machine == emulator.host_machine():
        return "gcc"
    triplet = emulator.TRIPLETS.get(machine)
    if triplet is None:
        raise ElflayoutError(f"{machine}: no cross compiler known for this machine")
    return f"{triplet}-gcc"


def link(linker: str, args: list, *, driver: str = "gcc", timeout: float | None = None,
         machine: str | None = None) -> LinkResult:
    """Run ``driver -fuse-ld=LINKER ARGS`` (for ``machine``, when given and not this
    one: its cross driver, which finds lld through -B). Linker output may name symbols
    whose bytes are not UTF-8: it is decoded with backslash escapes rather than refused."""
    cross = machine is not None and cross_driver(machine) != "gcc"
    if cross:
        driver = cross_driver(machine)
    cmd = [driver, *(cross_linker_flags(linker) if cross else [linker_flag(linker)]), *map(str, args)]
    try:
        r = subprocess.run(cmd, capture_output=True, timeout=timeout)
    except FileNotFoundError as e:
        raise ElflayoutError(f"{driver}: not found ({e.strerror}); run: make bootstrap") from None
    except subprocess.TimeoutExpired:
        return LinkResult(-1, f"{driver} -fuse-ld={linker}: no result after {timeout:g} s")
    text = (r.stderr + b"\n" + r.stdout).decode("utf-8", "backslashreplace")
    return LinkResult(r.returncode, text)
