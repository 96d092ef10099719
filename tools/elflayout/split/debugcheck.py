"""Debug information of a split link against the original link: every address of
every function maps to the same file:line (relative to the function's start, so any
order compares), every location list entry describes the same bytes of the same
function, and ``llvm-dwarfdump --verify`` finds no error the original link does not
have.

Line mapping is read with ``addr2line`` (binutils, what gdb's users see), every byte
of every uniquely named function; the verifier runs with a time limit because some
versions loop on gcc's output of some units (the original link is then unverifiable
and nothing is claimed).
"""

from __future__ import annotations

import bisect
import functools
import re
import shutil
import subprocess
from collections import Counter
from pathlib import Path

from elftools.elf.elffile import ELFFile

VERIFIERS = ("llvm-dwarfdump-16", "llvm-dwarfdump-22", "llvm-dwarfdump")
VERIFY_SECONDS = 20
SHOWN = 5


def has_lines(path: Path) -> bool:
    with open(path, "rb") as fh:
        return ELFFile(fh).get_section_by_name(".debug_line") is not None


def _functions(path: Path) -> dict[str, tuple[int, int]]:
    """Uniquely named functions with code: name -> (address, size)."""
    with open(path, "rb") as fh:
        tab = ELFFile(fh).get_section_by_name(".symtab")
        found = [(s.name, s["st_value"], s["st_size"]) for s in (tab.iter_symbols() if tab else ())
                 if s["st_info"]["type"] == "STT_FUNC" and s["st_size"] and s.name and s["st_shndx"] != "SHN_UNDEF"]
    n = Counter(name for name, _, _ in found)
    return {name: (a, z) for name, a, z in found if n[name] == 1}


DW_UT_SKELETON = 4     # DWARF 5 §7.5.1.1
SYMBOLIZERS = ("llvm-symbolizer-22", "llvm-symbolizer")
DWO_DUMPERS = ("llvm-dwarfdump-22", "llvm-dwarfdump")


def split_dwarf(path: Path) -> bool:
    """Whether the first unit of ``path``'s ``.debug_info`` is a ``-gsplit-dwarf`` skeleton."""
    with open(path, "rb") as fh:
        sec = ELFFile(fh).get_section_by_name(".debug_info")
        head = sec.data()[:7] if sec is not None else b""
    return len(head) == 7 and head[4:6] == (5).to_bytes(2, "little") and head[6] == DW_UT_SKELETON


def _lines(path: Path, funcs: dict[str, tuple[int, int]], names: list[str]) -> dict[str, list[str]]:
    addrs = [f"{funcs[n][0] + k:#x}" for n in names for k in range(funcs[n][1])]
    text = "\n".join(addrs) + "\n"
    if split_dwarf(path):
        # (addr2line does not read indexed range lists of skeletons; llvm-symbolizer reads
        # the .dwo too: each address's inlined frames, joined into one row)
        tool = next((t for t in SYMBOLIZERS if shutil.which(t)), "llvm-symbolizer")
        r = subprocess.run([tool, f"--obj={path}", "--inlines"], input=text, capture_output=True, text=True,
                           check=True)
        rows = [" < ".join(block.split("\n")) for block in r.stdout.strip("\n").split("\n\n")]
    else:
        r = subprocess.run(["addr2line", "-e", str(path)], input=text, capture_output=True, text=True, check=True)
        rows = r.stdout.splitlines()
    out, k = {}, 0
    for n in names:
        out[n] = rows[k:k + funcs[n][1]]
        k += funcs[n][1]
    return out


def compare_lines(original: Path, other: Path) -> tuple[int, list[str]]:
    """(addresses compared, differences) of the line tables of two links."""
    fa, fb = _functions(original), _functions(other)
    names = sorted(n for n in fa if n in fb and fa[n][1] == fb[n][1])
    diffs = [f"function {n}: {fa[n][1]} bytes in the original link, {fb[n][1]} in the split one"
             for n in sorted(set(fa) & set(fb)) if fa[n][1] != fb[n][1]]
    la, lb = _lines(original, fa, names), _lines(other, fb, names)
    count = 0
    for n in names:
        count += len(la[n])
        for k, (x, y) in enumerate(zip(la[n], lb[n])):
            if x != y:
                diffs.append(f"line table: {n}+{k:#x} is {y} in the split link, {x} in the original")
                break
    return count, diffs


def _locations(path: Path) -> Counter:
    """Location list entries as (variable, function, start and end offset in it,
    expression with addresses blanked), counted (the original link's read once)."""
    st = path.stat()
    return _locations_of(str(path), st.st_size, st.st_mtime_ns)


ENTRY = re.compile(r"\[(0x[0-9a-f]+), (0x[0-9a-f]+)\): (.*)")
# a location list by offset (DW_FORM_sec_offset) or by index (clang's DW_FORM_loclistx)
LIST_START = re.compile(r"DW_AT_location\s+\((?:indexed \(0x[0-9a-f]+\) loclist = )?0x[0-9a-f]+:")


@functools.lru_cache(maxsize=4)
def _locations_of(name: str, _size: int, _mtime: int) -> Counter:
    """(Read from ``llvm-dwarfdump --debug-info``: it resolves every list form.)"""
    split = split_dwarf(Path(name))     # (the .dwo's DIEs with addresses resolved: --dwo, LLVM 17 on)
    tool = next((t for t in (DWO_DUMPERS if split else VERIFIERS) if shutil.which(t)), None)
    out: Counter = Counter()
    if tool is None:
        return out
    funcs = sorted((a, z, n) for n, (a, z) in _functions(Path(name)).items())
    starts = [a for a, _, _ in funcs]
    text = subprocess.run([tool, "--debug-info", *(["--dwo"] if split else []), name], capture_output=True,
                          text=True, check=True).stdout
    var, in_list = "?", False
    for line in text.splitlines():
        t = line.strip()
        if in_list and (m := ENTRY.match(t)):
            lo, hi, expr = int(m[1], 16), int(m[2], 16), m[3]
            if expr.count(")") > expr.count("("):
                expr = expr[:-1]
            k = bisect.bisect_right(starts, lo) - 1
            if k >= 0 and lo < funcs[k][0] + max(funcs[k][1], 1):
                out[(var, funcs[k][2], lo - funcs[k][0], hi - funcs[k][0], expression_key(expr))] += 1
            continue
        in_list = False
        if "DW_TAG_" in t:
            var = "?"
        elif t.startswith(("DW_AT_name", "DW_AT_abstract_origin")):
            var = t.split('"')[1] if t.count('"') >= 2 else var
        elif t.startswith("DW_AT_location") and LIST_START.match(t):
            in_list = True
    return out


def expression_key(expr: str) -> str:
    """A location expression without its addresses (data moves with the order). Past
    an operation the dumper cannot decode (gcc's DW_OP_GNU_convert in DWARF 4) it
    prints raw bytes, addresses among them: only their count is kept."""
    expr = re.sub(r"DW_OP_addr 0x\w+", "DW_OP_addr", expr)
    return re.sub(r"<decoding error>(( [0-9a-f]{2})+)", lambda m: f"<{len(m[1].split())} undecoded bytes>", expr)


def compare_locations(original: Path, other: Path) -> tuple[int, list[str]]:
    """(location list entries compared, differences) of two links."""
    a, b = _locations(original), _locations(other)
    diffs = [f"location list: {k[0]} in {k[1]}+{k[2]:#x}..{k[3]:#x} "
             f"{'only in the original' if a[k] > b[k] else 'only in the split link'}"
             for k in sorted(set(a) | set(b), key=str) if a[k] != b[k]]
    return sum(a.values()), diffs


def verify(path: Path) -> str | None:
    """None when the verifier finds no error; else its first error line, or why it could not run."""
    tool = next((t for t in VERIFIERS if shutil.which(t)), None)
    if tool is None:
        return "llvm-dwarfdump not found"
    try:
        r = subprocess.run([tool, "--verify", str(path)], capture_output=True, text=True, timeout=VERIFY_SECONDS)
    except subprocess.TimeoutExpired:
        return f"{tool} --verify did not finish in {VERIFY_SECONDS} s"
    if r.returncode == 0:
        return None
    err = [x for x in r.stdout.splitlines() + r.stderr.splitlines() if "error" in x.lower()]
    return (err or [f"{tool} --verify exited with status {r.returncode}"])[0].strip()


def compare(original: Path, other: Path) -> tuple[int, list[str], str | None]:
    """Both checks, when the original link has a line table: (addresses compared,
    differences, what the verifier said: None without debug information)."""
    if not has_lines(original):
        return 0, [], None
    count, diffs = compare_lines(original, other)
    diffs += compare_locations(original, other)[1]
    if (why := verify(original)) is not None:
        return count, diffs[:SHOWN], f"not verified: the original link does not verify ({why})"
    if (why := verify(other)) is not None:
        diffs.append(f"debug information of the split link fails verification: {why}")
        return count, diffs[:SHOWN], "fails"
    return count, diffs[:SHOWN], "verified"


def gdb_stop(argv: list[str], location: str, env: dict | None = None, timeout: float = 120) -> str | None:
    """Run ``argv`` under gdb with a breakpoint at ``location`` (``file.c:LINE``; pending
    until the library holding it loads): the ``Breakpoint 1, FUNCTION (...) at FILE:LINE``
    line gdb prints when the program stops there, or None when it does not stop."""
    r = subprocess.run(["gdb", "-nx", "-batch", "-ex", "set breakpoint pending on", "-ex", f"break {location}",
                        "-ex", "run", "--args", *argv], capture_output=True, text=True, timeout=timeout, env=env)
    return next((ln for ln in r.stdout.splitlines() if ln.startswith("Breakpoint 1, ")), None)
