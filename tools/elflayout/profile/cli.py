"""``elflayout profile``: record the first-access order of target libraries during a workload."""

from __future__ import annotations

import argparse
import os
import sys

from elflayout.errors import ElflayoutError

SUMMARY = "record the first-access order of a target library during a workload"
EPILOG = """examples:
  # functions/objects/pages of libLLVM-16 in first-execution order while llc-16 starts
  elflayout profile --target /usr/lib/x86_64-linux-gnu/libLLVM-16.so.1 -o llc.profile.json -- llc-16 --version

  # with a link map (objects, input sections) and first data reads/writes per page
  elflayout profile --target build/libpython3.11.so --map build/libpython.map --data \\
      -o py.profile.json -- build/python3 -c "import json"

  # native speed, page granularity (root, tracefs): faults and page-cache reads
  elflayout profile --backend trace --evict --target /usr/lib/x86_64-linux-gnu/libLLVM-16.so.1 \\
      -o llc.trace.json -- llc-16 --version

The workload's output goes to the terminal. A workload that exits non-zero or crashes
still gets its profile written, with a warning and exit status 1 (0 with --allow-failure).
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--target", action="append", required=True, metavar="LIB",
                   help="shared library (or executable) to profile; repeatable")
    p.add_argument("--backend", choices=("valgrind", "trace"), default="valgrind",
                   help="valgrind: code blocks (+ data pages with --data) via our valgrind tool; "
                        "trace: page faults and reads via kernel tracepoints, native speed (default valgrind)")
    p.add_argument("--map", action="append", metavar="LINK.map",
                   help="link map of the target (GNU ld, gold, lld, mold) for input sections and objects; "
                        "give one per --target, in the same order")
    p.add_argument("--data", action="store_true", help="valgrind: also record first read/write of each data page")
    p.add_argument("--evict", action="store_true",
                   help="trace: drop the targets from the page cache first, so their reads are recorded")
    p.add_argument("--children", action="store_true",
                   help="also profile programs the workload starts (e.g. through a shell script)")
    p.add_argument("--allow-failure", action="store_true",
                   help="exit 0 even when the workload exits non-zero or crashes")
    p.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                   help="set an environment variable for the workload only; repeatable")
    p.add_argument("--keep-log", metavar="FILE", help="valgrind: also keep the tool's raw log here")
    p.add_argument("-o", "--output", required=True, help="profile to write (JSON; .gz compresses)")
    p.add_argument("--force", action="store_true", help="replace an existing output file")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD [ARG ...]: the workload")


def _progress(msg: str):
    from rich.console import Console

    con = Console(stderr=True)
    return con.status(msg, spinner="dots") if con.is_terminal else _Null()


class _Null:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


def _check_map(path, img, lm) -> None:
    """Refuse a link map of another link: output sections must sit where the ELF has them."""
    from elftools.elf.constants import SH_FLAGS

    secs = {s.name: s for s in img.sections if s.flags & SH_FLAGS.SHF_ALLOC and s.size}
    bad = [o["name"] for o in lm.output_sections
           if o["name"] in secs and o.get("size") and (o["vaddr"], o["size"]) != (secs[o["name"]].addr, secs[o["name"]].size)]
    if ".text" in bad or len(bad) > 2:
        raise ElflayoutError(f"{path}: link map does not describe {img.path} (output sections {', '.join(bad[:4])} "
                             f"differ in address or size)")


def run(args: argparse.Namespace) -> int:
    from elflayout import fileio
    from elflayout.elfcore import ElfImage
    from elflayout.profile import attribute, model

    cmd = list(args.command)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        raise ElflayoutError("no workload given (put it after --, e.g. -- llc-16 --version)")
    targets = [os.path.realpath(t) for t in args.target]
    imgs = [ElfImage(t) for t in targets]  # fails early on missing / non-ELF targets
    maps = args.map or []
    if len(maps) > len(targets):
        raise ElflayoutError(f"{len(maps)} --map for {len(targets)} --target (give at most one map per target)")
    for m in maps:
        if not os.path.isfile(m):
            raise ElflayoutError(f"{m}: no such link map")
    if args.evict and args.backend != "trace":
        raise ElflayoutError("--evict is for --backend trace (valgrind does not see the page cache)")
    if args.data and args.backend != "valgrind":
        raise ElflayoutError("--data needs --backend valgrind (the trace backend sees pages, not accesses)")
    env = dict(os.environ)
    for kv in args.env:
        k, sep, v = kv.partition("=")
        if not sep or not k:
            raise ElflayoutError(f"--env {kv!r}: expected NAME=VALUE")
        env[k] = v
    out = fileio.check_output(args.output, force=args.force, inputs=targets + maps)

    if args.backend == "valgrind":
        from elflayout.profile import valgrind as be

        why = be.tool_status()
    else:
        from elflayout.profile import trace as be

        why = be.status()
    if why:
        raise ElflayoutError(why)

    # link maps parsed before the (long) run so a bad map fails fast
    from elflayout import linkmap as lmmod

    lms = [lmmod.parse(m, img) for m, img in zip(maps, imgs)] + [None] * (len(targets) - len(maps))
    for m, img, lm in zip(maps, imgs, lms):
        _check_map(m, img, lm)

    meta = model.base_metadata(cmd, args.backend, "block" if args.backend == "valgrind" else "page", targets[0])
    with _progress(f"running the workload under {args.backend} ..."):
        if args.backend == "valgrind":
            r = be.run(targets, cmd, data=args.data, log_path=args.keep_log, env=env, children=args.children)
        else:
            r = be.run(targets, cmd, evict_first=args.evict, env=env, children=args.children)
    meta["duration_s"] = round(r.duration_s, 4)
    meta["exit_status"] = r.returncode
    meta["command"] = r.command
    if args.env:
        meta["env"] = list(args.env)

    if args.backend == "valgrind":
        meta["data"] = bool(args.data)
        meta["children"] = bool(args.children)
        meta["processes"] = r.marks.get("processes", 1)
        meta["notes"] += list(r.log.notes)
        if not r.log.complete:
            meta["notes"].append("the tool's log has no end record (workload killed?): events up to the end are kept")
        meta["notes"].append("valgrind backend: 'first' orders first executions of code blocks (and with --data "
                             "first reads/writes of pages) of all targets in one sequence; 't' is seconds since "
                             "valgrind started, dilated by valgrind")
    else:
        meta["notes"].append(be.HIDDEN_NOTE)
        meta["evicted"] = bool(args.evict)
        meta["children"] = bool(args.children)
        meta["lost_events"] = r.lost
        if r.other_pid_events:
            meta["notes"].append(f"{r.other_pid_events} events of other processes on the targets were ignored")

    with _progress("attributing addresses to functions, sections and objects ..."):
        tdocs, never = [], []
        for i, (img, lm) in enumerate(zip(imgs, lms)):
            ev = r.events[r.events["target"] == i]
            if args.backend == "valgrind":
                loaded = i in r.marks["first_map_seq"]
                start = r.marks["main_seq"] if r.marks["main_seq"] is not None else r.marks["entry_seq"]
                ph, bounds = attribute.phases(ev, attribute.init_entries(img), start,
                                              r.marks["first_map_seq"].get(i))
            else:
                loaded = ev.size > 0
                ph, bounds = None, None
            if not loaded:
                never.append(targets[i])
            tdoc, _ = attribute.build_target(img, ev, linkmap=lm, phase_idx=ph, map_path=maps[i] if i < len(maps) else None)
            if bounds is not None:
                bounds["main_is"] = "main()" if r.marks["main_seq"] is not None else "executable entry"
                tdoc["phases"] = bounds
            if args.backend == "valgrind":
                tdoc["mappings"] = r.marks["maps"].get(i, [])
            else:
                tdoc["fault_around_mapped_pages"] = r.mapped_pages.get(i, 0)
            tdocs.append(tdoc)
    if never and args.backend == "valgrind" and not r.log.complete and r.events.size == 0:
        raise ElflayoutError(f"the workload ended (status {r.returncode}) before firsttouch could write its log "
                             f"(killed with SIGKILL?): nothing was recorded")
    if never:
        hint = "" if args.children else "; if the program is started through a script or another program, add --children"
        raise ElflayoutError(f"{never[0]}: never loaded by the workload ({' '.join(cmd)}); "
                             f"check the path (is it the file the program really loads? see ldd){hint}")
    doc = model.new_profile(meta, tdocs)
    model.save(doc, out)
    for t in tdocs:
        s = t["stats"]
        print(f"{t['path']}: {s['functions']} functions ({s['functions_named']} named), "
              f"{len(t['objects'])} objects, pages x/r/w/t {s['pages']['x']}/{s['pages']['r']}/"
              f"{s['pages']['w']}/{s['pages']['t']}"
              + (f", {s['reads']} reads, {len(t.get('windows', []))} fault-around windows" if args.backend == "trace" else ""))
    print(f"wrote {out}")
    rc = r.returncode
    if rc != 0:
        how = f"was killed by signal {-rc}" if rc < 0 else f"exited with status {rc}"
        print(f"elflayout: warning: the workload {how} (profile written"
              f"{'' if args.allow_failure else '; --allow-failure accepts this'})", file=sys.stderr)
        return 0 if args.allow_failure else 1
    return 0
