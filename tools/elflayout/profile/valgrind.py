"""valgrind backend: run the workload under our tool ``firsttouch`` and read its log.

The tool (C, ``tools/firsttouch/``, built by ``make bootstrap`` into ``build/valgrind``)
records the first execution of each code block of every target mapping and, with
``--data``, the first read and first write of each page, from ld.so's first
instruction. Its raw log (docs/formats/profile.md, "raw log") is converted here to
file offsets using the mapping records in the same log.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import capstone
import numpy as np
from elftools.common.exceptions import ELFError

from elflayout.elfcore import ElfImage
from elflayout.errors import ElflayoutError
from elflayout import initializers
from elflayout.profile.model import EVENT_DTYPE, workload_path

ROOT = Path(__file__).resolve().parents[3]
TOOL_NAME = "firsttouch"

REC_DTYPE = np.dtype([("seq", "<u8"), ("t_ns", "<u8"), ("addr", "<u8"), ("len", "<u4"), ("kind", "u1"),
                      ("target", "u1"), ("flags", "<u2")])
K = {c: ord(c) for c in "xrwmuEMDZB"}
# 'D' records (flags): what the tool's fixed tables or a failed write made it lose
DROPS = {"outside": "accesses outside any recorded target mapping (dropped)", 1: "target mappings past the tool's table (their accesses are lost)",
         2: "instruction runs past the per-group cap (not logged)",
         3: "superblock exits past the per-block cap (later code logged at the last group's first execution)",
         4: "runs of a second target inside one group (not logged)",
         5: "records lost to failed writes of the log"}


def tool_dir() -> Path:
    return Path(os.environ.get("ELFLAYOUT_VALGRIND_LIB", ROOT / "build" / "valgrind"))


def tool_status() -> str | None:
    """None when the tool can run, else what to do."""
    if shutil.which("valgrind") is None:
        return "valgrind is not installed (run: make bootstrap, or apt-get install valgrind)"
    d = tool_dir()
    if not (d / f"{TOOL_NAME}-amd64-linux").is_file():
        return f"the valgrind tool {TOOL_NAME} is not built in {d} (run: make bootstrap)"
    if not (d / "vgpreload_core-amd64-linux.so").exists():
        return f"{d} lacks valgrind's own run-time files (run: make bootstrap)"
    return None


@dataclass
class RawLog:
    header: dict
    targets: list[str]
    recs: np.ndarray
    complete: bool
    exit_code: int | None
    notes: list[str] = field(default_factory=list)
    dropped: dict = field(default_factory=dict)  # DROPS key -> count

    def byte_runs(self) -> np.ndarray:
        """``--ft-bytes``: runs of the watched file bytes that loads read, (offset, length) rows."""
        b = self.recs[self.recs["kind"] == K["B"]]
        return np.stack([b["addr"].astype(np.int64), b["len"].astype(np.int64)], axis=1) if b.size \
            else np.zeros((0, 2), np.int64)

    def warnings(self) -> list[str]:
        """One sentence per kind of loss, for the profile's metadata.warnings."""
        return [f"firsttouch: {n:,} {DROPS.get(k, f'losses of kind {k}')}" for k, n in self.dropped.items()]


def read_log(path) -> RawLog:
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as e:
        raise ElflayoutError(f"{p}: cannot read the firsttouch log: {e.strerror}") from None
    end = raw.find(b"\n--\n")
    if not raw.startswith(b"FIRSTTOUCH 1\n") or end < 0:
        raise ElflayoutError(f"{p}: not a firsttouch log (bad header)")
    header, targets = {}, []
    for line in raw[:end].decode(errors="replace").splitlines()[1:]:
        line = line.strip()
        if not line:
            continue
        k, _, v = line.partition(" ")
        if k == "target":
            i, dev, ino, path_ = v.split(" ", 3)
            targets.append(path_)
        else:
            header[k] = v
    if int(header.get("recsize", 0)) != REC_DTYPE.itemsize:
        raise ElflayoutError(f"{p}: firsttouch record size {header.get('recsize')} != {REC_DTYPE.itemsize}")
    body = raw[end + 4:]
    n = len(body) // REC_DTYPE.itemsize
    recs = np.frombuffer(body, dtype=REC_DTYPE, count=n)
    notes = []
    if len(body) % REC_DTYPE.itemsize:
        notes.append("log ends with a partial record (truncated)")
    complete = bool(n and recs["kind"][-1] == K["Z"])
    exit_code = int(recs["addr"][-1].astype(np.int64)) if complete else None
    dropped = {}
    for d in recs[recs["kind"] == K["D"]]:
        dropped[int(d["flags"])] = dropped.get(int(d["flags"]), 0) + int(d["addr"])
    return RawLog(header, targets, recs, complete, exit_code, notes, dropped)


def to_events(log: RawLog, t0: int | None = None) -> tuple[np.ndarray, dict]:
    """Events (EVENT_DTYPE, file offsets) of all targets of one log, plus pseudo-events
    ``E`` (executable entry), ``M`` (main) and ``L`` (first mapping of a target) that
    ``combine`` turns into marks; ``t`` counts from ``t0`` (ns, CLOCK_MONOTONIC)."""
    r = log.recs
    if t0 is None:
        t0 = log_t0(log)
    kinds = r["kind"]
    maps = {}
    acc = np.isin(kinds, (K["x"], K["r"], K["w"]))
    a = r[acc]
    off = np.full(a.size, -1, dtype=np.int64)
    # Mapping history: for each access, the latest map record (by seq) that covers it.
    mrec = r[np.isin(kinds, (K["m"], K["u"]))]
    first_map = {}
    for m in mrec:  # tens of records; vectorised over the accesses
        lo, hi = int(m["addr"]), int(m["addr"]) + int(m["len"])
        cover = (a["addr"] >= lo) & (a["addr"] < hi) & (a["seq"] > m["seq"])
        if m["kind"] == K["u"]:
            off[cover] = -1
            continue
        cover &= a["target"] == m["target"]
        off[cover] = (a["addr"][cover] - np.uint64(lo)).astype(np.int64) + int(m["t_ns"])
        tgt = int(m["target"])
        first_map.setdefault(tgt, m)
        maps.setdefault(tgt, []).append({"start": lo, "size": int(m["len"]), "offset": int(m["t_ns"]),
                                         "prot": "".join(c if int(m["flags"]) & b else "-"
                                                         for c, b in (("r", 1), ("w", 2), ("x", 4))),
                                         "pid": int(log.header.get("pid", 0))})
    keep = off >= 0
    lost = int((~keep).sum())
    if lost:
        log.dropped["outside"] = log.dropped.get("outside", 0) + lost
    a, off = a[keep], off[keep]
    ev = np.zeros(a.size, dtype=EVENT_DTYPE)
    ev["seq"] = a["seq"].astype(np.int64)
    # map-record "t_ns" holds the file offset, so mapping times come from the seq neighbours
    ev["t"] = (a["t_ns"].astype(np.int64) - t0) / 1e9
    ev["kind"] = np.where(a["kind"] == K["x"], b"x", np.where(a["kind"] == K["r"], b"r", b"w")).astype("S1")
    ev["target"] = a["target"].astype(np.int16)
    ev["offset"] = off
    ev["length"] = a["len"].astype(np.int64)
    pseudo = []
    # an M record's flags hold the index of its --ft-mark (0: main); kept in ``length``
    for kind, rec in [(b"E", x) for x in r[kinds == K["E"]][:1]] + [(b"M", x) for x in r[kinds == K["M"]]]:
        pseudo.append((int(rec["seq"]), (int(rec["t_ns"]) - t0) / 1e9, kind, -1, 0, int(rec["flags"])))
    for tgt, m in first_map.items():
        # a map record's time is that of the access just before it (its t_ns field is the offset)
        prev = r[(r["seq"] < m["seq"]) & (r["t_ns"] > 0) & (kinds != K["m"])]
        t = (int(prev["t_ns"][-1]) - t0) / 1e9 if prev.size else 0.0
        pseudo.append((int(m["seq"]), t, b"L", tgt, 0, 0))
    if pseudo:
        ev = np.concatenate([ev, np.array(pseudo, dtype=EVENT_DTYPE)])
    return ev, {"maps": maps}


def log_t0(log: RawLog) -> int:
    r = log.recs
    t = int(log.header.get("t0", 0))
    if not t and r.size:
        x = r["t_ns"][np.isin(r["kind"], (K["x"], K["r"], K["w"]))]
        t = int(x.min()) if x.size else 0
    return t


def combine(logs: list[RawLog]) -> tuple[np.ndarray, dict]:
    """One event sequence from the logs of a process tree, ordered by CLOCK_MONOTONIC time
    (shared by all processes), and the marks (seq numbers in that sequence).

    marks: entry_seq / main_seq (of the process that mapped the first target first),
    first_map_seq {target: seq}, maps {target: [...]}.
    """
    base = min(log_t0(lg) for lg in logs)
    parts, maps = [], {}
    for i, lg in enumerate(logs):
        ev, m = to_events(lg, base)
        parts.append((ev, np.full(ev.size, i, dtype=np.int64)))
        for tgt, v in m["maps"].items():
            maps.setdefault(tgt, []).extend(v)
    ev = np.concatenate([p[0] for p in parts])
    li = np.concatenate([p[1] for p in parts])
    order = np.lexsort((ev["seq"], li, ev["t"])) if len(logs) > 1 else np.argsort(ev["seq"], kind="stable")
    ev, li = ev[order], li[order]
    ev["seq"] = np.arange(ev.size)
    marks = {"first_map_seq": {}, "maps": maps, "entry_seq": None, "main_seq": None, "processes": len(logs)}
    lk = ev["kind"] == b"L"
    owner = None
    for j in np.flatnonzero(lk):
        tgt = int(ev["target"][j])
        if tgt not in marks["first_map_seq"]:
            marks["first_map_seq"][tgt] = int(ev["seq"][j])
            if owner is None:
                owner = int(li[j])
    mine = li == (owner if owner is not None else 0)
    j = np.flatnonzero((ev["kind"] == b"E") & mine)
    if j.size:
        marks["entry_seq"] = int(ev["seq"][j[0]])
    # first execution of each --ft-mark offset: {mark index: (seq, t)}
    marks["mark_seqs"] = {}
    for j in np.flatnonzero((ev["kind"] == b"M") & mine):
        marks["mark_seqs"].setdefault(int(ev["length"][j]), (int(ev["seq"][j]), float(ev["t"][j])))
    real = np.isin(ev["kind"], (b"x", b"r", b"w"))
    return ev[real], marks


@dataclass
class Run:
    log: RawLog
    events: np.ndarray
    marks: dict
    returncode: int
    duration_s: float
    command: list[str]
    byte_runs: np.ndarray = field(default_factory=lambda: np.zeros((0, 2), np.int64))


MAX_MARKS = 8  # firsttouch's --ft-mark limit (MAX_MARKS in firsttouch.c); one is main()


def exe_initializer_marks(exe: str, targets: list[str]) -> list[int]:
    """File offsets of the executable's initializers when it is one of the targets (at most
    MAX_MARKS - 1; the rest are found by their function extents only)."""
    real = os.path.realpath(exe)
    if real not in {os.path.realpath(t) for t in targets}:
        return []
    try:
        with ElfImage(real) as img:
            return [int(o) for o in initializers.offsets(img)[:MAX_MARKS - 1]]
    except ElflayoutError:
        return []


def main_offset(exe: str) -> int | None:
    """File offset of the executable's ``main`` (symbol, or the address _start hands to
    __libc_start_main), so the profile can tell constructors from main. None if unknown."""
    try:
        img = ElfImage(exe)
    except ElflayoutError:
        return None
    try:
        for tab in (".symtab", ".dynsym"):
            s = img.elf.get_section_by_name(tab)
            if s is not None:
                for sym in s.iter_symbols():
                    if sym.name == "main" and sym["st_value"] and sym["st_info"]["type"] == "STT_FUNC":
                        return int(img.vaddr_to_offset(sym["st_value"]))
        if not img.is_x86_64:
            return None
        entry = img.elf.header["e_entry"]
        off = img.vaddr_to_offset(entry)
        if off < 0:
            return None
        md = capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)
        md.detail = True
        for ins in md.disasm(bytes(img.mm[off:off + 96]), entry):
            if ins.mnemonic == "call":
                break
            ops = ins.operands
            if ins.mnemonic == "lea" and len(ops) == 2 and ins.reg_name(ops[0].reg) == "rdi" \
                    and ops[1].type == capstone.x86.X86_OP_MEM and ins.reg_name(ops[1].mem.base) == "rip":
                o = img.vaddr_to_offset(ins.address + ins.size + ops[1].mem.disp)
                return int(o) if o >= 0 else None
            if ins.mnemonic == "mov" and len(ops) == 2 and ins.reg_name(ops[0].reg) in ("rdi", "edi") \
                    and ops[1].type == capstone.x86.X86_OP_IMM:
                o = img.vaddr_to_offset(ops[1].imm)
                return int(o) if o >= 0 else None
    except (ELFError, capstone.CsError):  # a damaged symbol table or code: main() stays unknown
        return None
    finally:
        img.close()
    return None


def giveup_message(log_dir) -> str | None:
    """The one-line error when valgrind gave up reading an object's symbols or debug info
    (the tool leaves ``<log>.giveup``: the file, then valgrind's last message), else None.
    valgrind then exits 1 whatever the workload does: the workload is not at fault."""
    for f in sorted(Path(log_dir).glob("*.giveup")):
        lines = f.read_text(errors="replace").splitlines()
        if not lines:
            continue
        why = lines[1].strip().removeprefix("Valgrind: ").rstrip(".") if len(lines) > 1 else ""
        return (f"{lines[0]}: valgrind could not read this file's symbols or debug info and stopped the run "
                f"({why or 'no message'}); nothing was recorded and the workload was not at fault (is the file damaged? "
                f"try a copy without debug info: objcopy --strip-debug)")
    return None


def valgrind_command(targets: list[str], out: str, data: bool, marks=(), children: bool = False,
                     byte_range: tuple[int, int] | None = None) -> list[str]:
    cmd = ["valgrind", "-q", f"--tool={TOOL_NAME}", f"--ft-out={out}", f"--ft-data={'yes' if data else 'no'}"]
    if byte_range:
        cmd.append(f"--ft-bytes={byte_range[0]:x}:{byte_range[1]:x}")
    if children:
        cmd.append("--trace-children=yes")
    cmd += [f"--ft-mark={m:x}" for m in marks]
    cmd += [f"--ft-target={os.path.realpath(t)}" for t in targets]
    return cmd


def run(targets: list[str], argv: list[str], *, data: bool = False, env: dict | None = None,
        stdout=None, stderr=None, log_path: str | None = None, children: bool = False,
        byte_range: tuple[int, int] | None = None) -> Run:
    """Run ``argv`` under firsttouch; return the parsed log(s) and the workload's status.
    ``byte_range``: file offsets [lo, hi) of the first target whose loaded bytes are
    recorded (``Run.byte_runs``).

    ``children``: also follow programs the workload execs (one log per process, merged by
    time); main() is then not marked (the mark offset belongs to one executable only).
    """
    why = tool_status()
    if why:
        raise ElflayoutError(why)
    exe = workload_path(argv[0])
    e = dict(os.environ if env is None else env)
    e["VALGRIND_LIB"] = str(tool_dir().resolve())
    with tempfile.TemporaryDirectory(prefix="elflayout-ft-") as td:
        out = os.path.join(td, "ft.%p.log") if children else os.path.join(td, "firsttouch.log")
        mo = None if children else main_offset(os.path.realpath(exe))
        # a target that is the executable itself: its initializers without a function
        # extent (no symbol, no FDE) are found by marking their entry offsets too
        init_marks = exe_initializer_marks(exe, targets) if mo is not None else []
        cmd = valgrind_command(targets, out, data, [mo, *init_marks] if mo is not None else [], children, byte_range)
        cmd += [os.path.realpath(exe), *argv[1:]]
        t0 = time.monotonic()
        try:
            r = subprocess.run(cmd, env=e, stdout=stdout, stderr=stderr)
        except OSError as err:
            raise ElflayoutError(f"cannot run valgrind: {err.strerror}") from None
        dt = time.monotonic() - t0
        gave_up = giveup_message(td)
        if gave_up:
            raise ElflayoutError(gave_up)
        files = sorted(Path(td).glob("*.log"))
        if not files:
            raise ElflayoutError(f"valgrind exited with status {r.returncode} without writing a log "
                                 f"(is build/valgrind up to date? run: make bootstrap)")
        logs = [read_log(f) for f in files]
        if log_path:
            for f in files:
                shutil.copyfile(f, log_path if len(files) == 1 else f"{log_path}.{f.name.split('.')[1]}")
    ev, marks = combine(logs)
    ms = marks.pop("mark_seqs")
    marks["main_seq"] = ms[0][0] if mo is not None and 0 in ms else None
    marks["initializer_marks"] = {off: ms.get(i + 1) for i, off in enumerate(init_marks)}
    marks["marked_exe"] = os.path.realpath(exe)
    log = logs[0]
    for lg in logs[1:]:
        log.notes.extend(lg.notes)
        log.complete = log.complete and lg.complete
        for k, n in lg.dropped.items():
            log.dropped[k] = log.dropped.get(k, 0) + n
    run_ = Run(log, ev, marks, r.returncode, dt, cmd)
    run_.byte_runs = np.concatenate([lg.byte_runs() for lg in logs])
    return run_
