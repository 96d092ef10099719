"""``elflayout profile``: record the first-access order of target libraries during a workload."""

from __future__ import annotations

import argparse
import shlex
import sys

from elflayout.errors import ElflayoutError
from elflayout.procs import signal_words

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

  # a set of workloads, each with stdout on a pipe and on /dev/null, merged into one
  # profile that keeps each workload's own order (order, check-order --workload use it)
  elflayout profile --target /usr/lib/x86_64-linux-gnu/libLLVM-16.so.1 -o set.json \\
      --workload 'llc=llc-16 --version' --workload 'opt=opt-16 --version' \\
      --stdout pipe --stdout null --combine shared

The workload's output goes to the terminal (--stdout changes that). A workload that
exits non-zero or crashes still gets its profile written, with a warning and exit
status 1 (0 with --allow-failure).
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    from elflayout.profile.merge import RULES
    from elflayout.profile.record import STDOUT_MODES

    p.add_argument("--target", action="append", required=True, metavar="LIB",
                   help="shared library (or executable) to profile; repeatable")
    p.add_argument("--backend", choices=("valgrind", "trace", "qemu"), default=None,
                   help="valgrind: code blocks (+ data pages with --data) via our valgrind tool; "
                        "trace: page faults and reads via kernel tracepoints, native speed; "
                        "qemu: code blocks (+ data pages) of another machine's program (AArch64) via our "
                        "qemu-user plugin (default valgrind, qemu for AArch64 targets)")
    p.add_argument("--emulator", metavar="CMD",
                   help="run the workload under CMD (e.g. 'qemu-aarch64 -L ROOT'); default for AArch64 targets: "
                        "qemu-aarch64 with the arm64 root of scripts/arm64-root.sh")
    p.add_argument("--map", action="append", metavar="LINK.map",
                   help="link map of the target (GNU ld, gold, lld, mold) for input sections and objects; "
                        "give one per --target, in the same order")
    p.add_argument("--data", action="store_true",
                   help="valgrind, qemu: also record first read/write of each data page")
    p.add_argument("--strings", action="store_true",
                   help="valgrind: also record which bytes of the first target's read-only data (.rodata*) loads "
                        "read, and the strings they are in ('rodata_read', 'strings': the order then places only the "
                        "read-only data read as hot, and link --hot-strings moves those strings)")
    p.add_argument("--evict", action="store_true",
                   help="trace: drop the targets from the page cache first, so their reads are recorded")
    p.add_argument("--children", action="store_true",
                   help="also profile programs the workload starts (e.g. through a shell script)")
    p.add_argument("--allow-failure", action="store_true",
                   help="exit 0 even when the workload exits non-zero or crashes")
    p.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                   help="set an environment variable for the workload only; repeatable")
    p.add_argument("--clean-env", action="store_true",
                   help="start the workload's environment from PATH, HOME, TERM, TMPDIR and USER only (what measure "
                        "keeps), plus --env: the profiled runs then see what measured runs see, not the caller's "
                        "shell (PYTHONUNBUFFERED, LANG ... change the code a program runs)")
    p.add_argument("--workload", action="append", default=[], metavar="NAME=COMMAND",
                   help="a workload of a set (shell-quoted command line); repeatable; with -- CMD too, that is "
                        "one more")
    p.add_argument("--stdout", action="append", default=[], choices=STDOUT_MODES, metavar="MODE",
                   help="run every workload with stdout on MODE: " + ", ".join(STDOUT_MODES) +
                        " (default inherit); repeatable: one run per mode")
    p.add_argument("--env-variant", action="append", default=[], metavar="NAME=VALUE[,NAME=VALUE]",
                   help="also run every workload with these variables set; repeatable: one run per variant")
    p.add_argument("--repeat", type=int, default=1, metavar="N",
                   help="run every workload (under every condition) N times and merge the runs: for programs whose "
                        "code path varies from run to run, e.g. with hash randomisation (default 1)")
    p.add_argument("--combine", choices=RULES, default="shared",
                   help="several runs: how their first-access ranks make the merged order (default shared: what "
                        "every workload touches first, then what fewer do, each by earliest position; phased: shared within "
                        "phases of workloads grouped by footprint, the short ones' code first; earliest: "
                        "earliest position in any workload; see docs/formats/profile.md)")
    p.add_argument("--read-ahead-kb", type=int, default=None, metavar="KB",
                   help="trace: set read_ahead_kb of the targets' device for the run (restored afterwards); "
                        "default: leave it, and record the value in force")
    p.add_argument("--debug-file", action="append", default=[], metavar="FILE",
                   help="separate debug file of a stripped target (matched by build-id; repeatable); by default "
                        "/usr/lib/debug/.build-id/ab/cdef....debug is used when installed")
    p.add_argument("--timeout", type=float, default=0, metavar="SECONDS",
                   help="kill a workload still running after this long, with its children, and fail (default 0: "
                        "no limit)")
    p.add_argument("--keep-log", metavar="FILE", help="valgrind: also keep the tool's raw log here (FILE.N per run)")
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

    def update(self, *a):
        pass


def _kv(text: str, what: str) -> tuple[str, str]:
    k, sep, v = text.partition("=")
    if not sep or not k:
        raise ElflayoutError(f"{what} {text!r}: expected NAME=VALUE")
    return k, v


def _commands(args) -> list[tuple[str, list[str]]]:
    import os

    cmd = list(args.command)
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    out = []
    if cmd:
        out.append((os.path.basename(cmd[0]), cmd))
    for w in args.workload:
        name, c = _kv(w, "--workload")
        try:
            argv = shlex.split(c)
        except ValueError as e:
            raise ElflayoutError(f"--workload {w!r}: {e}") from None
        if not argv:
            raise ElflayoutError(f"--workload {w!r}: no command")
        out.append((name, argv))
    if not out:
        raise ElflayoutError("no workload given (put it after --, e.g. -- llc-16 --version, or use --workload)")
    return out


# Programs that run the command they are given (their arguments): valgrind does not follow
# them into it unless told to (--children).
WRAPPERS = {"env", "nice", "ionice", "taskset", "chrt", "stdbuf", "timeout", "nohup", "setarch", "time", "sudo",
            "xargs", "exec", "sh", "bash", "dash", "numactl", "prlimit", "unshare", "chroot", "flock"}


def _wrapper_hint(msg: str, workloads, args) -> str:
    """A recording that failed because the workload is a wrapper the profiler did not
    follow: say so, and what to do, instead of guessing at the cause."""
    import os

    wrapped = [w for w in workloads if os.path.basename(w.argv[0]) in WRAPPERS]
    if args.children or not wrapped or not ("nothing was recorded" in msg or "never loaded" in msg):
        return msg
    w = wrapped[0]
    msg = msg.replace(" (killed with SIGKILL?)", "")
    how = (" (or give the variables with --env NAME=VALUE and run the program itself)"
           if os.path.basename(w.argv[0]) == "env" else "")
    return (f"{msg}; {os.path.basename(w.argv[0])} runs another program, which the profiler follows only with "
            f"--children{how}")


def _stripped_hint(t) -> str | None:
    """How to get names when most of a target's functions have none (a stripped file
    without its debug file): an ordering needs them."""
    import os

    s = t.stats or {}
    n, named = len(t.functions), s.get("functions_named", len(t.functions))
    if n == 0 or n - named <= n // 4 or not os.path.exists(t.path):
        return None
    from elflayout.elfcore import ElfImage

    with ElfImage(t.path) as img:
        if img.section(".symtab") is not None:
            return None
    return (f"{t.path} is stripped: {n - named} of {n} functions have no name, and an ordering needs names. "
            f"Give its debug file (--debug-file FILE: a copy with symbols, or the file under "
            f"/usr/lib/debug/.build-id/ that its package's -dbgsym or -dbg package installs), or profile a build "
            f"that is not stripped")


def run(args: argparse.Namespace) -> int:
    from elflayout import fileio
    from elflayout.profile import model, record

    commands = _commands(args)
    env_variants = [dict(_kv(x, "--env-variant") for x in v.split(",")) for v in args.env_variant]
    workloads = record.workload_set(commands, args.stdout, env_variants, args.repeat)
    setup = record.Setup(targets=list(args.target), maps=list(args.map or []), backend=args.backend, data=args.data,
                         evict=args.evict, children=args.children, env=dict(_kv(x, "--env") for x in args.env),
                         clean_env=args.clean_env,
                         keep_log=args.keep_log, read_ahead_kb=args.read_ahead_kb, debug_files=list(args.debug_file),
                         timeout=args.timeout or None, emulator=args.emulator, strings=args.strings)
    record.prepare(setup)  # fails early on missing / non-ELF targets and bad maps
    out = fileio.check_output(args.output, force=args.force, inputs=setup.targets + setup.maps)
    try:
        with _progress("recording ...") as st:
            doc, statuses = record.record_set(setup, workloads, args.combine, progress=st.update)
    except ElflayoutError as e:
        raise ElflayoutError(_wrapper_hint(str(e), workloads, args)) from None
    model.save(doc, out)
    prof = model.parse(doc)
    for t in prof.targets:
        s = t.stats
        line = f"{t.path}: {len(t.functions)} functions"
        if s:
            line += f" ({s['functions_named']} named)"
        pk = {k: sum(1 for p in t.pages if p.kind == k) for k in "xrwt"}
        line += f", {len(t.objects)} objects, pages x/r/w/t {pk['x']}/{pk['r']}/{pk['w']}/{pk['t']}"
        if setup.backend == "trace":
            line += f", {len(t.reads)} reads, {len(t.windows)} fault-around windows"
        print(line)
        hint = _stripped_hint(t)
        if hint:
            print(f"elflayout: hint: {hint}", file=sys.stderr)
    if len(workloads) > 1:
        print(f"{len(workloads)} workloads merged ({args.combine}): " + "; ".join(w.name for w in workloads))
    print(f"wrote {out}")
    for w in prof.metadata.get("warnings", []):
        print(f"elflayout: warning: {w} (recorded in the profile's metadata.warnings)", file=sys.stderr)
    failed = [(n, rc) for n, rc in statuses if rc]
    for n, rc in failed:
        print(f"elflayout: warning: the workload {n} {signal_words(rc)} (profile written"
              f"{'' if args.allow_failure else '; --allow-failure accepts this'})", file=sys.stderr)
    return 0 if not failed or args.allow_failure else 1
