"""A callgrind profile → lld's ``--call-graph-ordering-file`` (a peer's input, for comparison).

lld orders sections with its C3 heuristic (``CallGraphSort.cpp``: Ottoni and Maher,
"Optimizing Function Placement for Large-Scale Data-Center Applications", CGO 2017) from
a weighted call graph: lines ``caller callee weight``. Callgrind records exactly that
(call counts per caller/callee pair). No library reads callgrind's format, so the few
lines that matter are parsed here: ``ob=``/``cob=`` (object), ``fn=``/``cfn=`` (function),
``calls=COUNT ...`` (the call count of the preceding ``cfn``). The profile must be
written with ``--compress-strings=no`` (names spelled out on every line) and names left
mangled (``--demangle=no``), as lld needs link names.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

from elflayout.errors import ElflayoutError


def callgrind_command(out: str | os.PathLike) -> list[str]:
    """The valgrind command prefix that writes a profile this module reads."""
    return ["valgrind", "-q", "--tool=callgrind", f"--callgrind-out-file={out}", "--compress-strings=no",
            "--compress-pos=no", "--demangle=no"]


def edges(path: str | os.PathLike, obj: str) -> tuple[Counter, dict]:
    """Call counts {(caller, callee): n} between functions of the object whose path
    ends with ``obj`` (both in it), and counts of what was skipped."""
    cur_ob = cur_fn = None
    c_ob = c_fn = None
    out: Counter = Counter()
    skipped = Counter()
    want = os.path.basename(str(obj))
    try:
        f = open(path, errors="replace")
    except OSError as e:
        raise ElflayoutError(f"{path}: cannot read the callgrind profile: {e.strerror}") from None
    with f:
        head = f.readline()
        if not head.startswith(("# callgrind format", "version:")):
            raise ElflayoutError(f"{path}: not a callgrind profile")
        for line in f:
            if line.startswith("ob="):
                cur_ob = line[3:].strip()
            elif line.startswith("fn="):
                cur_fn = line[3:].strip()
                c_ob, c_fn = None, None
            elif line.startswith("cob="):
                c_ob = line[4:].strip()
            elif line.startswith("cfn="):
                c_fn = line[4:].strip()
            elif line.startswith("calls="):
                try:
                    n = int(line[6:].split()[0])
                except (IndexError, ValueError):
                    raise ElflayoutError(f"{path}: malformed line {line.strip()!r}") from None
                callee_ob = c_ob or cur_ob
                if cur_fn and c_fn and os.path.basename(cur_ob or "") == want and \
                        os.path.basename(callee_ob or "") == want:
                    out[(cur_fn, c_fn)] += n
                else:
                    skipped["calls outside the object"] += 1
                c_ob = None
            elif line.startswith("(") and "compress" not in line:
                raise ElflayoutError(f"{path}: compressed names: record with --compress-strings=no")
    return out, dict(skipped)


def write_lld(counts: Counter) -> str:
    """lld's call-graph ordering file: ``caller callee weight`` per line, heaviest first
    (self-calls and callgrind's ``0x…`` names of code without a symbol left out)."""
    return "".join(f"{a} {b} {n}\n" for (a, b), n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
                   if a != b and " " not in a + b and not (a.startswith("0x") or b.startswith("0x")))


def from_callgrind(path: str | os.PathLike, lib: str | os.PathLike, out: str | os.PathLike) -> dict:
    """Write ``out`` from a callgrind profile for ``lib``; returns counts."""
    from elflayout.fileio import atomic_write_text

    counts, skipped = edges(path, Path(lib).name)
    if not counts:
        raise ElflayoutError(f"{path}: no call between two functions of {Path(lib).name}")
    atomic_write_text(out, write_lld(counts))
    return {"edges": len(counts), "calls": int(sum(counts.values())), "skipped": skipped}
