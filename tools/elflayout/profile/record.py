"""Record profiles: run workloads under a backend and attribute their events.

``record`` runs one workload and returns its profile document; ``record_set`` runs a
set of workloads (several commands, each under several conditions: where stdout goes,
environment variants) and merges them into one profile that keeps every workload's
own first-access ranks (``profile.merge``). The CLI only parses and prints.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import threading
from dataclasses import dataclass, field

from elftools.elf.constants import SH_FLAGS

from elflayout import emulator as emulation
from elflayout import linkmap as lmmod
from elflayout import procs
from elflayout import symbols
from elflayout.controls import KEEP_ENV, ControlSet, MeasurementLock, ReadAhead
from elflayout.elfcore import ElfImage
from elflayout.errors import ElflayoutError
from elflayout.profile import attribute, merge, model
from elflayout.profile import qemu as qemu_backend
from elflayout.profile import trace as trace_backend
from elflayout.profile import valgrind as valgrind_backend
from elflayout.profile.model import read_ahead_kb

# Where a workload's stdout goes. Programs behave differently on each (isatty, buffering,
# a character device's ioctl): code only one of them runs is missing from a profile
# recorded with another.
STDOUT_MODES = ("inherit", "tty", "pipe", "file", "null")


@dataclass
class Setup:
    """What every run of a profile shares."""
    targets: list[str]
    maps: list[str] = field(default_factory=list)
    backend: str | None = "valgrind"  # None: valgrind, or qemu for targets of another machine
    data: bool = False
    evict: bool = False
    children: bool = False
    env: dict = field(default_factory=dict)  # --env settings, on top of os.environ
    clean_env: bool = False  # start from measure's kept variables only, not all of os.environ
    keep_log: str | None = None
    read_ahead_kb: int | None = None  # trace: set for the run (None: leave it, record it)
    debug_files: list = field(default_factory=list)  # separate debug files of stripped targets
    imgs: list = field(default_factory=list)
    linkmaps: list = field(default_factory=list)
    emulator: str | None = None  # --emulator text; the detected or given Emulator after prepare
    machine: str = ""  # the targets' ELF machine
    timeout: float | None = None  # kill a workload (and its children) still running after this long
    strings: bool = False  # valgrind: record the strings the first target's read-only data loads read


@dataclass
class Workload:
    name: str
    argv: list[str]
    stdout: str = "inherit"
    env: dict = field(default_factory=dict)  # this workload's environment variant

    def describe(self) -> dict:
        return {"name": self.name, "argv": list(self.argv), "stdout": self.stdout,
                "env": [f"{k}={v}" for k, v in self.env.items()]}


def check_map(path, img: ElfImage, lm) -> None:
    """Refuse a link map of another link: output sections must sit where the ELF has them."""
    secs = {s.name: s for s in img.sections if s.flags & SH_FLAGS.SHF_ALLOC and s.size}
    bad = [o["name"] for o in lm.output_sections
           if o["name"] in secs and o.get("size") and (o["vaddr"], o["size"]) != (secs[o["name"]].addr, secs[o["name"]].size)]
    if ".text" in bad or len(bad) > 2:
        raise ElflayoutError(f"{path}: link map does not describe {img.path} (output sections {', '.join(bad[:4])} "
                             f"differ in address or size)")


def _machine(setup: Setup) -> None:
    """The targets' machine picks the backend and the emulator: valgrind sees x86-64
    programs only, so it refuses a target of another machine (it would watch the
    emulator and record nothing)."""
    machines = {t: emulation.elf_machine(t) for t in setup.targets}
    kinds = {m[0] for m in machines.values() if m}
    if len(kinds) > 1:
        raise ElflayoutError(f"--target: targets of different machines ({', '.join(sorted(kinds))})")
    setup.machine = kinds.pop() if kinds else emulation.host_machine()
    foreign = setup.machine != emulation.host_machine()
    if setup.backend is None:
        setup.backend = "qemu" if foreign or setup.emulator else "valgrind"
    if setup.backend == "valgrind" and foreign:
        raise ElflayoutError(f"{setup.targets[0]}: an {setup.machine} target: the valgrind backend runs "
                             f"{emulation.host_machine()} programs only (use --backend qemu)")
    if setup.backend == "qemu":
        setup.emulator = emulation.for_program(setup.targets[0], setup.emulator) or \
            (emulation.parse(setup.emulator) if setup.emulator else None)
        if setup.emulator is None:
            raise ElflayoutError(f"--backend qemu: {setup.targets[0]} is a {setup.machine} file: give the "
                                 f"emulator with --emulator (e.g. 'qemu-x86_64')")
    elif setup.emulator and setup.backend == "trace":
        setup.emulator = emulation.parse(setup.emulator)
    elif foreign:
        setup.emulator = emulation.detect(setup.machine)


def prepare(setup: Setup) -> Setup:
    """Open the targets and parse the link maps before any (long) run, so bad input
    fails in the first second."""
    setup.targets = [os.path.realpath(t) for t in setup.targets]
    for t in setup.targets:
        emulation.elf_machine(t)  # big-endian, ILP32, machines we cannot run: refused by name
    setup.imgs = [ElfImage(t) for t in setup.targets]
    _machine(setup)
    if len(setup.maps) > len(setup.targets):
        raise ElflayoutError(f"{len(setup.maps)} --map for {len(setup.targets)} --target (give at most one map per target)")
    for m in setup.maps:
        if not os.path.isfile(m):
            raise ElflayoutError(f"{m}: no such link map")
    if setup.evict and setup.backend != "trace":
        raise ElflayoutError("--evict is for --backend trace (valgrind does not see the page cache)")
    if setup.strings and setup.backend != "valgrind":
        raise ElflayoutError("--strings needs --backend valgrind (it records loads byte by byte)")
    if setup.data and setup.backend == "trace":
        raise ElflayoutError("--data needs --backend valgrind or qemu (the trace backend sees pages, not accesses)")
    if setup.children and setup.backend == "qemu":
        raise ElflayoutError("--children: not with --backend qemu (qemu-user runs one program)")
    if setup.read_ahead_kb is not None and (setup.backend != "trace" or setup.read_ahead_kb <= 0):
        raise ElflayoutError("--read-ahead-kb: a positive size in KiB, for --backend trace")
    for d in setup.debug_files:
        with ElfImage(d) as dimg:
            if not any(dimg.build_id and dimg.build_id == img.build_id for img in setup.imgs):
                raise ElflayoutError(f"{d}: --debug-file of no --target (its build-id {dimg.build_id} is none of "
                                     f"the targets')")
    why = backend(setup.backend).tool_status() if setup.backend == "valgrind" else backend(setup.backend).status()
    if why:
        raise ElflayoutError(why)
    lms = [lmmod.parse(m, img) for m, img in zip(setup.maps, setup.imgs)]
    for m, img, lm in zip(setup.maps, setup.imgs, lms):
        check_map(m, img, lm)
    setup.linkmaps = lms + [None] * (len(setup.targets) - len(lms))
    return setup


def backend(name: str):
    return {"valgrind": valgrind_backend, "qemu": qemu_backend}.get(name, trace_backend)


def check_workload(setup: Setup, wl: Workload) -> None:
    """The workload's program must be of the targets' machine: valgrind would run an
    arm64 program's emulator, qemu cannot run an x86-64 program as arm64."""
    m = emulation.elf_machine(model.workload_path(wl.argv[0]))
    if m and setup.backend != "trace" and m[0] != setup.machine:
        raise ElflayoutError(f"{wl.argv[0]}: an {m[0]} program, the targets are {setup.machine}: the "
                             f"{setup.backend} backend runs the program itself (give the {setup.machine} program)")


@contextlib.contextmanager
def stdout_for(mode: str):
    """The file descriptor (or None: inherit) a workload's stdout goes to. ``tty`` is a
    pseudo-terminal, ``pipe`` a pipe; both are drained in a thread so the workload
    never blocks on a full buffer."""
    if mode not in STDOUT_MODES:
        raise ElflayoutError(f"--stdout {mode}: choose from {', '.join(STDOUT_MODES)}")
    if mode == "inherit":
        yield None
        return
    if mode == "null":
        fd = os.open(os.devnull, os.O_WRONLY)
        try:
            yield fd
        finally:
            os.close(fd)
        return
    if mode == "file":
        import tempfile

        with tempfile.TemporaryFile(prefix="elflayout-stdout-") as f:
            yield f.fileno()
        return
    if mode == "tty":
        import pty

        rd, wr = pty.openpty()
    else:
        rd, wr = os.pipe()

    def drain():
        try:
            while os.read(rd, 65536):
                pass
        except OSError:  # EIO: the pty's last writer closed
            pass

    th = threading.Thread(target=drain, daemon=True)
    th.start()
    try:
        yield wr
    finally:
        os.close(wr)
        th.join(timeout=10)
        os.close(rd)


def _metadata(setup: Setup, wl: Workload, r) -> dict:
    meta = model.base_metadata(wl.argv, setup.backend, "page" if setup.backend == "trace" else "block",
                               setup.targets[0])
    meta["duration_s"] = round(r.duration_s, 4)
    meta["exit_status"] = r.returncode
    meta["command"] = r.command
    meta["warnings"] = []
    env = [f"{k}={v}" for k, v in {**setup.env, **wl.env}.items()]
    if env:
        meta["env"] = env
    if setup.clean_env:
        meta["clean_env"] = True
    if wl.stdout != "inherit":
        meta["stdout"] = wl.stdout
    meta["children"] = bool(setup.children)
    if setup.emulator is not None:
        meta["emulator"] = setup.emulator.describe()
    if setup.backend != "trace":
        meta["data"] = bool(setup.data)
        meta["processes"] = r.marks.get("processes", 1)
        meta["notes"] += list(r.log.notes)
        meta["dropped"] = {str(k): n for k, n in r.log.dropped.items()}
        meta["warnings"] += r.log.warnings()
        if not r.log.complete:
            meta["notes"].append("the tool's log has no end record (workload killed?): events up to the end are kept")
        meta["notes"].append(qemu_backend.NOTE if setup.backend == "qemu" else
                             "valgrind backend: 'first' orders first executions of code blocks (and with --data "
                             "first reads/writes of pages) of all targets in one sequence; 't' is seconds since "
                             "valgrind started, dilated by valgrind")
    else:
        meta["notes"].append(backend("trace").HIDDEN_NOTE)
        meta["evicted"] = bool(setup.evict)
        meta["lost_events"] = r.lost
        if r.lost:
            meta["warnings"].append(f"the kernel dropped {r.lost:,} trace events")
        if r.other_pid_events:
            meta["notes"].append(f"{r.other_pid_events} events of other processes on the targets were ignored")
    return meta


def _targets(setup: Setup, r, warnings: list, notes: list) -> tuple[list[dict], list[str]]:
    """Target documents of one run, and the targets it never loaded."""
    tdocs, never = [], []
    valgrind = setup.backend != "trace"  # valgrind and qemu: blocks, marks and mappings
    for i, (img, lm) in enumerate(zip(setup.imgs, setup.linkmaps)):
        ev = r.events[r.events["target"] == i]
        if valgrind:
            loaded = i in r.marks["first_map_seq"]
            start = r.marks["main_seq"] if r.marks["main_seq"] is not None else r.marks["entry_seq"]
            ph, bounds = attribute.phases(ev, attribute.init_entries(img), start, r.marks["first_map_seq"].get(i))
        else:
            loaded = ev.size > 0
            ph, bounds = None, None
        if not loaded:
            never.append(setup.targets[i])
        ft = symbols.functions(img, debug_files=setup.debug_files)
        tdoc, stats = attribute.build_target(img, ev, functions=ft, linkmap=lm, phase_idx=ph,
                                             map_path=setup.maps[i] if i < len(setup.maps) else None)
        warnings += [f"{img.path}: {w}" for w in stats.get("warnings", [])]
        if ft.symbol_counts.get("debug_file"):
            notes.append(f"{img.path}: function names from its debug file {ft.symbol_counts['debug_file']}")
        if bounds is not None:
            bounds["main_is"] = "main()" if r.marks["main_seq"] is not None else "executable entry"
            if r.marks.get("initializer_marks") and os.path.realpath(img.path) == r.marks["marked_exe"]:
                bounds["initializers"] = [{"offset": o, "first": None if v is None else v[0],
                                           "t": None if v is None else round(v[1], 6)}
                                          for o, v in r.marks["initializer_marks"].items()]
            tdoc["phases"] = bounds
        if valgrind:
            tdoc["mappings"] = r.marks["maps"].get(i, [])
        else:
            tdoc["fault_around_mapped_pages"] = r.mapped_pages.get(i, 0)
        if i == 0 and setup.strings:
            tdoc["strings"] = strings_read(img, r.byte_runs)
            tdoc["stats"]["strings"] = len(tdoc["strings"])
            tdoc[model.RODATA_READ] = model.byte_runs(r.byte_runs)
            tdoc["stats"]["rodata_bytes_read"] = sum(n for _o, n in tdoc[model.RODATA_READ])
        tdocs.append(tdoc)
    return tdocs, never


def string_range(img) -> tuple[int, int] | None:
    """File offsets [lo, hi) spanning the read-only data sections (``.rodata*``), where
    string literals are: the bytes ``--strings`` watches."""
    secs = [s for s in img.sections if s.name.startswith(".rodata") and s.size and s.type != "SHT_NOBITS"]
    if not secs:
        return None
    return min(s.offset for s in secs), max(s.offset + s.size for s in secs)


def strings_read(img, runs) -> list[str]:
    """The strings (C-escaped, sorted) holding bytes that loads read (``runs``: file
    offset, length), delimited by NULs; binary data that reads as no text is left out."""
    from elflayout.stringsets import format_strings, strings_in

    with open(img.path, "rb") as f:
        data = f.read()
    return format_strings(strings_in(data, runs)).splitlines()


def base_env(clean: bool) -> dict:
    """The environment a workload starts from: the caller's, or (``clean``) only the
    variables ``measure`` keeps (PATH, HOME, TERM, TMPDIR, USER), so the profiled runs
    and the measured runs see the same one: a caller's PYTHONUNBUFFERED or locale
    changes which code a program runs."""
    if not clean:
        return dict(os.environ)
    return {k: os.environ[k] for k in KEEP_ENV if k in os.environ}


def _run_backend(be, setup: Setup, wl: Workload, env: dict, out):
    """One run of the workload under the backend: (run, read-ahead record or None)."""
    if setup.backend == "valgrind":
        rng = string_range(setup.imgs[0]) if setup.strings else None
        return be.run(setup.targets, wl.argv, data=setup.data, log_path=setup.keep_log, env=env,
                      children=setup.children, stdout=out, byte_range=rng), None
    if setup.backend == "qemu":
        return be.run(setup.targets, wl.argv, emulator=setup.emulator, data=setup.data, log_path=setup.keep_log,
                      env=env, stdout=out), None
    # a trace profile's pages depend on read-ahead, which is system-wide: take
    # turns with measurement sessions, set it if asked, record what it was
    with MeasurementLock() as lock, ControlSet([ReadAhead(setup.targets[0], setup.read_ahead_kb)]):
        ra0 = read_ahead_kb(setup.targets[0])
        argv = wl.argv if setup.emulator is None else \
            setup.emulator.wrap([model.workload_path(wl.argv[0]), *wl.argv[1:]])
        r = be.run(setup.targets, argv, evict_first=setup.evict, env=env, children=setup.children, stdout=out)
        ra1 = read_ahead_kb(setup.targets[0])
    return r, {"read_ahead_kb": ra0 if ra0 == ra1 else None, "read_ahead_kb_before": ra0,
               "read_ahead_kb_after": ra1, "lock_waited_s": lock.record()["waited_s"]}


def record(setup: Setup, wl: Workload, progress=None) -> dict:
    """Run one workload; its profile document (validated)."""
    be = backend(setup.backend)
    check_workload(setup, wl)
    env = base_env(setup.clean_env)
    env.update(setup.env)
    env.update(wl.env)
    with stdout_for(wl.stdout) as out, procs.Deadline(setup.timeout) as deadline:
        if progress:
            progress(f"running {wl.name} under {setup.backend} ...")
        try:
            r, ra = _run_backend(be, setup, wl, env, out)
        except ElflayoutError:
            if not deadline.expired.is_set():
                raise
    if deadline.expired.is_set():
        raise ElflayoutError(f"the workload {wl.name} was still running after {setup.timeout:g} s: killed with its "
                             f"children (--timeout; command: {shlex.join(wl.argv)})")
    meta = _metadata(setup, wl, r)
    if progress:
        progress(f"attributing {wl.name}'s addresses to functions, sections and objects ...")
    if ra is not None:
        meta.update(ra)
        if ra["read_ahead_kb"] is None:
            meta["notes"].append(f"read_ahead_kb changed during the run ({ra['read_ahead_kb_before']} -> "
                                 f"{ra['read_ahead_kb_after']}, by another program): the pages read reflect neither "
                                 f"value alone")
    tdocs, never = _targets(setup, r, meta["warnings"], meta["notes"])
    if never and setup.backend != "trace" and not r.log.complete and r.events.size == 0:
        raise ElflayoutError(f"the workload ended (status {r.returncode}) before {setup.backend} could write its log "
                             f"(killed with SIGKILL?): nothing was recorded")
    if never:
        hint = "" if setup.children else "; if the program is started through a script or another program, add --children"
        raise ElflayoutError(f"{never[0]}: never loaded by the workload ({shlex.join(wl.argv)}); "
                             f"check the path (is it the file the program really loads? see ldd){hint}")
    return model.validate(model.new_profile(meta, tdocs))


def workload_set(commands: list[tuple[str, list[str]]], stdout_modes: list[str], env_variants: list[dict],
                 repeat: int = 1) -> list[Workload]:
    """Every command under every condition: stdout modes × environment variants (the
    empty variant included), named ``NAME``, ``NAME >pipe``, ``NAME K=V`` …; with
    ``repeat`` > 1 each of them ``repeat`` times (``NAME #1``, ``NAME #2`` …): a program
    whose code path varies from run to run (hash randomisation, garbage-collector timing)
    has every variant's code recorded."""
    if repeat < 1:
        raise ElflayoutError(f"--repeat {repeat}: give a count of 1 or more")
    modes = stdout_modes or ["inherit"]
    variants = [{}] + [v for v in env_variants if v]
    out = []
    for name, argv in commands:
        for m in modes:
            for v in variants:
                label = name + ("" if m == "inherit" else f" >{m}") + "".join(f" {k}={x}" for k, x in v.items())
                for k in range(repeat):
                    out.append(Workload(label + (f" #{k + 1}" if repeat > 1 else ""), list(argv), m, dict(v)))
    names = [w.name for w in out]
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup:
        raise ElflayoutError(f"workload {dup!r} given twice: name workloads with NAME=COMMAND")
    return out


def record_set(setup: Setup, workloads: list[Workload], rule: str = "shared", progress=None) -> tuple[dict, list]:
    """Run every workload; one merged profile (per-workload ranks kept) and the
    workloads' exit statuses. One workload: its own profile, unmerged."""
    docs, statuses = [], []
    keep = setup.keep_log
    for i, wl in enumerate(workloads):
        if progress:
            progress(f"workload {i + 1}/{len(workloads)}: {wl.name}")
        if keep and len(workloads) > 1:
            setup.keep_log = f"{keep}.{i}"
        d = record(setup, wl, progress)
        docs.append(d)
        statuses.append((wl.name, d["metadata"]["exit_status"]))
    if len(docs) == 1:
        return docs[0], statuses
    merged = merge.merge([model.parse(d) for d in docs], [w.name for w in workloads], rule=rule,
                         workloads=[w.describe() for w in workloads])
    return merged, statuses
