#!/usr/bin/env python3
"""Run the bench scripts and write ``docs/benchmarks.md``.

    python3 bench/run_all.py                 # every bench script (about 10-15 min on this 2-core machine)
    python3 bench/run_all.py pipeline pack   # a subset; the other sections of the page are kept
    python3 bench/run_all.py --list          # what would run, with the exact commands

Each script runs as a subprocess with its default figures-producing arguments; its
printed figures (stdout) go into its own section of the page together with the exact
command, exit status, duration, start time and load average at start. The page starts
with the machine facts (kernel, CPU model, cores, memory, read_ahead_kb found on the
device and the value the page-count experiments use, date, load average) and a summary
table. The page is written atomically; sections of scripts not run this time are kept
from the previous page (each says when it ran). A summary is printed at the end; exit
status 1 when a script failed or timed out.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import os
import platform
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "bench"
sys.path.insert(0, str(ROOT / "tools"))

DEFAULT_OUT = ROOT / "docs" / "benchmarks.md"


@dataclasses.dataclass(frozen=True)
class Bench:
    name: str
    script: str
    args: tuple[str, ...]
    what: str
    read_ahead_kb: str  # what the script's page counts use
    markdown: bool = False  # the script prints Markdown (tables) rather than plain text

    def argv(self) -> list[str]:
        return [sys.executable, str(BENCH / self.script), *self.args]

    def command(self) -> str:
        """The command as a user types it from the repository root."""
        return " ".join(["python3", f"bench/{self.script}", *map(shlex.quote, self.args)])


RA_SET = "128 (set on the device for the experiment, restored afterwards)"
BENCHES = [
    Bench("pipeline", "bench_pipeline.py", ("--runs", "3"),
          "Headline: pages/bytes read and seeks for libpython3.11 and libLLVM-16 in each variant, "
          "next to the physical-limit estimate", RA_SET, markdown=True),
    Bench("order", "bench_order.py", ("--runs", "3"),
          "Ordering: default vs profile-ordered relinks (pages by section), readahead model vs measurement, "
          "order speed", RA_SET),
    Bench("pack", "bench_pack.py", ("--runs", "3"),
          "Relocation packing: pack-relocs speed on libLLVM-16, pages read before/after packing", RA_SET),
    Bench("fuzz", "bench_fuzz.py", ("--count", "10000"),
          "Damaged-input fuzzing of inspect/relocs/pack-relocs --check: refusals, internal errors, accepted "
          "outputs compared after real loads (about 20 min)", "not relevant (warm page cache)"),
    Bench("pack_forms", "bench_pack_forms.py", ("--runs", "5"),
          "Packed forms for old and new glibc: pages read by Debian 11's llc-11 through libLLVM-11 packed relr vs "
          "self (vs original)", RA_SET),
    Bench("pack_linkself", "bench_pack_linkself.py", ("--runs", "5"),
          "The link-time self form (elflayout link --pack self): pages read by python3.11 through libpython3.11 "
          "linked with lld 16 plain, relr and self", RA_SET),
    Bench("pack_sweep", "bench_pack_sweep.py", (),
          "pack-relocs --check over every library in /usr/lib/x86_64-linux-gnu: packed, refused (reasons), "
          "check failures (about 1 min)", "not relevant (warm page cache)"),
    Bench("pack_sweep_self", "bench_pack_sweep.py", ("--format", "self"),
          "The same sweep in the self-applying form (glibc < 2.36): packed, refused (reasons), check failures "
          "(about 1 min)", "not relevant (warm page cache)"),
    Bench("chromium", "bench_chromium.py", ("--runs", "10"),
          "Case study, Debian's Chromium: census + selective on a shared machine, per-file pages and spread, an "
          "independent fincore check, pages read vs touched and the RELR estimate for the executable, trace "
          "profile, plot, report", RA_SET),
    Bench("firefox", "bench_chromium.py",
          ("--target", "firefox", "--runs", "10", "--census-under", "/usr/lib/firefox-esr"),
          "Case study, Debian's Firefox ESR measured like Chromium, its own files cold (system libraries, which "
          "other programs use, warm): census + selective, per-file pages and spread, libxul.so against "
          "independent fincore runs under the same conditions, trace profile, plot, report", RA_SET),
    Bench("firefox_isolated", "bench_chromium.py", ("--target", "firefox", "--runs", "10", "--isolate"),
          "Case study, Firefox ESR's whole start-up (every file the census finds, system libraries too) served "
          "from a private loop device (--isolate): runs usable on a shared machine, libxul.so against independent "
          "fincore runs under the same isolation", "128 on the private loop device (set by the session)"),
    Bench("chromium_rootless", "bench_chromium.py", ("--rootless", "--runs", "10"),
          "Chromium measured without root (user nobody: cachestat/mincore residency) next to the page-cache "
          "trace (root), alternating sessions on a copy nobody owns: per-file pages, rootless median against "
          "the traced runs' range", "the disk's own value for both (a user cannot set it; recorded)"),
    Bench("measure", "bench_measure.py", ("--quick",),
          "Measurement harness: determinism of page counts, A/A and A/B verdicts, tracing overhead", RA_SET),
    Bench("report", "bench_report.py", ("--runs", "5"),
          "The report's interactive access view in headless Chromium: file size, open time, zoom latency "
          "(libLLVM-16 recording)", "not relevant (reads a recorded results file)"),
    Bench("inspect", "bench_inspect.py", ("--runs", "5"),
          "Speed of `elflayout inspect` on libLLVM-16", "not relevant (warm page cache)"),
    Bench("profile", "bench_profile.py", ("-n", "5"),
          "Profiler overhead: valgrind backend vs valgrind --tool=none, trace backend vs native",
          "not relevant (warm page cache)"),
    Bench("simulate", "bench_simulate.py", ("--runs", "1", "--sections"),
          "Accuracy of `elflayout simulate`: predicted against measured pages for libLLVM-16, libpython3.11, "
          "libcrypto.so.3 and two held-out libraries (CPython built from source with clang-22, libzstd), "
          "unordered and ordered relinks (cached builds only), with pages by section", RA_SET, markdown=True),
    Bench("heldout", "bench_heldout.py", (),
          "Held-out startups: libLLVM-16 ordered by the other workloads vs by the workload itself "
          "(cross-validation, readahead-model predictions)", "128 (modelled)"),
    Bench("heldout_measured", "bench_heldout.py", ("--measure", "--runs", "3"),
          "Held-out startups measured: libLLVM-16 relinked with lld, ordered by the other workloads vs by the "
          "workload itself vs unordered (pages read; relinks cached, about 5 min)", RA_SET, markdown=True),
    Bench("heldout_real", "bench_heldout_real.py", ("--runs", "3"),
          "Held-out real compiles: libLLVM-16 ordered by llc-16 -O2 compiles of files of 12 projects (zlib, Lua, "
          "xxHash, libdeflate, Opus, stb, libpng, LZ4, cJSON, libyaml, KISS FFT, "
          "libsecp256k1) vs by the held-out compile itself "
          "(bzip2, PCRE2, Mbed TLS) vs unordered (pages read; 41 valgrind profiles, about an hour the first time)",
          RA_SET, markdown=True),
    Bench("peers", "bench_peers.py", ("--runs", "3"),
          "Peers side by side on libLLVM-16 (llc-16 --version): Debian's library, lld default, lld RELR, "
          "lld C3 from callgrind (with and without RELR), BOLT from an instrumented profile (with and without "
          "RELR), elflayout's best", RA_SET, markdown=True),
    Bench("peers_llvm22", "bench_peers_llvm22.py", ("--runs", "3"),
          "LLVM 22 peers on CPython 3.11.2 built from source (clang-22 -O2 -ffunction-sections -fdata-sections, "
          "lld-22; libpython3.11.so.1.0, `import json, decimal, asyncio, re`): lld default, RELR, temporal-profile "
          "order files (with and without -disable-preinline), balanced partitioning (startup, with and without "
          "compression), BOLT-22, elflayout link's default path and best recipe (three compiles on first run, "
          "cached)", RA_SET, markdown=True),
    Bench("split", "bench_split.py", ("--runs", "3", "--regrtest"),
          "elflayout split on libpython3.11-pic.a: split time, --check with three linkers, function order on "
          "the split objects with lld/gold/GNU ld (pages read), CPython's regression tests through it", RA_SET),
    Bench("default_path", "bench_split.py", ("--default-path", "--runs", "5"),
          "The default path: libpython3.11 relinked by `elflayout link --profile P --linker lld -- CMD` (no other "
          "flag; what `make demo` runs) against the best recipe (split + hot-last + data script + .dynstr + "
          "packed) and the split baseline, one session (pages read)", RA_SET),
    Bench("default_path_crypto", "bench_split_crypto.py", ("--default-path", "--runs", "3"),
          "The default path on libcrypto.so.3: `elflayout link --profile P --linker lld -- CMD` on libcrypto.a's "
          "objects as they are (stripped as Debian ships it) against the best recipe (split + hot-last + data "
          "script + .dynstr + packed) and the default relink, one session (pages read)", RA_SET, markdown=True),
    Bench("default_path_llvm", "bench_pipeline.py", ("llvm", "--default-path", "--runs", "3"),
          "The default path on libLLVM-16: `elflayout link --profile P --linker lld -- CMD` on LLVM 16's archives "
          "against the best recipe (hot-last + data script + .dynstr + packed) and the default relink, one "
          "session (pages read)", RA_SET, markdown=True),
    Bench("default_heldout", "bench_default_heldout.py", ("--runs", "3"),
          "The default path on a library it was not tuned on: libzstd from Debian's source, built by its own "
          "CMake with lld; unordered vs `elflayout link` (no flag) vs the best recipe, one session (pages read)",
          RA_SET, markdown=True),
    Bench("split_debug", "bench_split_debug.py", ("--runs", "3"),
          "A library built with -g through split: libzstd from Debian's source, its own Makefile with "
          "CFLAGS=\"-g -O2\" (gcc 12, DWARF 5), unordered vs split + profile + `elflayout link` with lld, one "
          "session (pages read), and a gdb breakpoint by line on the ordered library", RA_SET, markdown=True),
    Bench("split_debug_sqlite", "bench_split_debug.py", ("--library", "sqlite3", "--runs", "3"),
          "A larger library built with -g through split: libsqlite3 from Debian's source, its own autoconf build "
          "(configure's CFLAGS \"-g -O2\", gcc 12; the amalgamation, one object and one compile unit), unordered "
          "vs split + profile + `elflayout link` with lld, one session (pages read), the sqlite3 shell as "
          "workload, and a gdb breakpoint by line on the ordered library", RA_SET, markdown=True),
    Bench("split_debug_clang", "bench_split_debug.py", ("--compiler", "clang-22", "--runs", "3"),
          "A library built with clang-22 -g through split: libzstd from Debian's source, its own Makefile with "
          "CC=clang-22 CFLAGS=\"-g -O2\" (DWARF 5 with indexed forms: .debug_addr, rnglistx, loclistx), "
          "unordered vs split + profile + `elflayout link` with lld, one session (pages read), and a gdb "
          "breakpoint by line on the ordered library", RA_SET, markdown=True),
    Bench("realbuild_lto", "bench_realbuild_lto.py", ("--runs", "3"),
          "A real build with debug info and ThinLTO: libzstd from Debian's source, its own CMake at RelWithDebInfo, "
          "clang-22 -g -flto=thin + lld-22: unordered vs the tutorial's LTO route (profile --map of the LTO link, "
          "elflayout link with and without --move-symtab, and --move-symtab --algorithm hot-last) vs a profile of "
          "the build without LTO (link's exit status, share of the gain kept), gdb breakpoint by line on the "
          "ordered library (pages read; two "
          "CMake builds and five LTO links the first time, about 20 min)", RA_SET, markdown=True),
    Bench("realbuild_lto_gcc", "bench_realbuild_lto.py", ("--compiler", "gcc", "--runs", "3"),
          "The same CMake build by gcc 12 -g -flto linked by GNU ld: unordered vs the LTO build's own profile "
          "(the link given -ffunction-sections), elflayout link default, --move-symtab, --algorithm first-access, "
          "gdb breakpoint by line (pages read; four LTO links the first time)", RA_SET, markdown=True),
    Bench("realbuild_lto_gold", "bench_realbuild_lto.py", ("--compiler", "gcc", "--linker", "gold", "--runs", "3"),
          "The same with gcc 12 -g -flto -fuse-ld=gold", RA_SET, markdown=True),
    Bench("cxx", "bench_cxx.py", ("--runs", "3"),
          "libstdc++.so.6 relinked from Debian's libstdc++_pic.a with lld, gold and GNU ld: elflayout link's "
          "order check and check-order's reasons, pages read unordered vs ordered vs split+ordered per linker",
          RA_SET, markdown=True),
    Bench("cxx_nostdlib", "bench_cxx.py", ("--setup", "nostdlib-pic", "--runs", "3"),
          "libstdc++.so.6 linked as a new user links it (g++ -shared -nostdlib, crt files, version script, as "
          "libstdc++'s own build) and profiled without --map (regex/locale/sstream/map workload): pages read "
          "unordered vs `elflayout link` with lld, gold and GNU ld side by side", RA_SET, markdown=True),
    Bench("split_crypto", "bench_split_crypto.py", ("--runs", "3"),
          "A second archive through split, profile, order, link: OpenSSL's libcrypto.so.3 from libcrypto.a, "
          "`openssl dgst -sha256`: Debian's library, default relink, object order, split + function order "
          "(+ packed) with lld, gold and GNU ld (pages read)", RA_SET, markdown=True),
    Bench("exe", "bench_exe.py", ("--runs", "3"),
          "An executable as the target: Debian's python3.11 relinked from libpython3.11.a (split) with GNU ld and "
          "lld, profiled, ordered and relinked like a library: pages read from the executable unordered vs "
          "ordered, Debian's beside them; CPython's test_json test_re test_struct through each", RA_SET,
          markdown=True),
    Bench("split_fuzz", "bench_split_fuzz.py", ("--count", "10000"),
          "Damaged objects and archives through split and split --check (lld, gold, GNU ld), each run limited to "
          "30 s of CPU and 1 GB: exit 3, tracebacks, hangs, output written for a refused input (about 1.5 h)",
          "not relevant (warm page cache)"),
    Bench("split_sweep", "bench_split_sweep.py", (),
          "split --check with lld, gold and GNU ld over the static archives of Debian -dev packages (C, C++, "
          "assembly, glibc): identical, could not check (the linker's own error line), differs (about 10 min)",
          "not relevant (warm page cache)"),
    Bench("verdicts", "bench_verdicts.py",
          ("--rounds", "200", "--realtime", "--isolate", "--power-n", "5", "30", "50", "--aa-n", "30"),
          "Time verdicts: coverage of the 95% interval by n, A/A false alarms, detection of a 5% slowdown with the "
          "MDE printed (pool of 200 rounds under --realtime and --isolate with a CPU hog: about 45 min to collect "
          "once, cached in ~/.cache/elflayout/bench-verdicts; the studies about 10 min)", RA_SET),
    Bench("order_balance", "bench_order_balance.py", ("--trials", "2000"),
          "Run order: A/A sessions simulated under a position effect (first run of a round 5% slower), ordered "
          "by the balanced Latin square vs the per-round shuffle it replaced: bias of the paired ratio, false "
          "alarms (seconds)", "not relevant (simulation)"),
    Bench("trace_filters", "bench_trace_filters.py", (),
          "Many files under test: event filters split over several trace instances vs one device-only filter, "
          "events recorded and lost while another process churns temporary files on the same disk (1 min)",
          "not relevant (small files read whole)"),
    Bench("storage", "bench_storage.py", (),
          "Slow-storage emulation: configured vs measured latency and bandwidth",
          "the emulated device's own settings (see docs/storage.md)"),
    Bench("isolation", "bench_isolation.py", ("--runs", "5"),
          "Isolated and rootless measurement: libLLVM-16 and libpython pages read on the shared disk vs a private "
          "loop device (--isolate), and traced as root vs measured by user nobody without root",
          "128 on the disk and on the private loop device; the rootless pair at the disk's own value (recorded)"),
]
# Bench scripts added later still run (default arguments) until they are registered above.
BENCHES += [Bench(p.stem.removeprefix("bench_"), p.name, (), "(not yet described in run_all.py)", "see the script")
            for p in sorted(BENCH.glob("bench_*.py")) if p.name not in {b.script for b in BENCHES}]
BY_NAME = {b.name: b for b in BENCHES}


# -- machine facts ---------------------------------------------------------------------------

def _read(path: str | Path) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def read_ahead_knob(path: Path = ROOT) -> Path | None:
    """queue/read_ahead_kb of the block device holding PATH (the whole disk for a partition)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    dev = Path(f"/sys/dev/block/{os.major(st.st_dev)}:{os.minor(st.st_dev)}")
    if not dev.exists():
        return None
    dev = dev.resolve()
    for d in (dev, dev.parent):
        if (d / "queue" / "read_ahead_kb").exists():
            return d / "queue" / "read_ahead_kb"
    return None


def machine_facts() -> dict:
    cpu = None
    for line in (_read("/proc/cpuinfo") or "").splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    mem = None
    for line in (_read("/proc/meminfo") or "").splitlines():
        if line.startswith("MemTotal:"):
            mem = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
    u = platform.uname()
    knob = read_ahead_knob()
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip() or None
    return {
        "date": dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
        "kernel": f"{u.system} {u.release} {u.version}",
        "machine": u.machine,
        "cpu_model": cpu or u.processor or "unknown",
        "cores": os.cpu_count(),
        "memory": mem,
        "load_average": " ".join(f"{x:.2f}" for x in os.getloadavg()),
        "read_ahead_kb_device": f"{_read(knob)} ({knob.parent.parent.name})" if knob else "unknown",
        "python": platform.python_version(),
        "commit": commit,
    }


# -- running ---------------------------------------------------------------------------------

@dataclasses.dataclass
class Outcome:
    name: str
    command: str
    started: str
    load_start: str
    duration_s: float
    status: int | None  # None: timed out
    stdout: str
    stderr_tail: str
    read_ahead_kb: str
    note: str = ""


def run_one(b: Bench, timeout: float, echo: bool) -> Outcome:
    knob = read_ahead_knob()
    ra_before = _read(knob) if knob else None
    started = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    env = dict(os.environ, PYTHONPATH=str(ROOT / "tools") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    t0 = time.monotonic()
    out_lines: list[str] = []
    with tempfile.TemporaryFile("w+") as err:
        p = subprocess.Popen(b.argv(), cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=err, text=True,
                             start_new_session=True)

        def pump():
            for line in p.stdout:
                out_lines.append(line)
                if echo:
                    print(f"[{b.name}] {line}", end="", file=sys.stderr, flush=True)

        th = threading.Thread(target=pump, daemon=True)
        th.start()
        status: int | None
        note = ""
        try:
            status = p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            # Our own child's process group: SIGTERM lets the scripts restore read_ahead_kb.
            os.killpg(p.pid, signal.SIGTERM)
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
            status = None
            note = f"timed out after {timeout:.0f} s; "
        th.join(timeout=10)
        err.seek(0)
        tail = "\n".join(err.read().strip().splitlines()[-15:])
    ra_after = _read(knob) if knob else None
    if ra_before is not None and ra_after != ra_before:
        note += (f"read_ahead_kb of the device changed during the script ({ra_before} -> {ra_after}; other "
                 f"measurement sessions on this machine set it too); ")
        if status is None:  # the killed script could not restore it
            try:
                knob.write_text(ra_before)
                note += "restored; "
            except OSError as e:
                note += f"could not restore ({e.strerror}); "
    return Outcome(b.name, b.command(), started, load, time.monotonic() - t0, status, "".join(out_lines), tail,
                   b.read_ahead_kb, note.rstrip("; "))


# -- the page --------------------------------------------------------------------------------

MARK = re.compile(r"^<!-- bench:(?P<name>[\w-]+) (?P<meta>\{.*\}) -->$(?P<body>.*?)^<!-- /bench:(?P=name) -->$",
                  re.M | re.S)


def previous_sections(path: Path) -> dict[str, tuple[dict, str]]:
    """Sections of an earlier page: name -> (metadata, whole block text)."""
    try:
        text = path.read_text()
    except OSError:
        return {}
    out = {}
    for m in MARK.finditer(text):
        try:
            out[m["name"]] = (json.loads(m["meta"]), m.group(0))
        except ValueError:
            continue
    return out


def as_markdown(text: str) -> str:
    """A Markdown-printing script's output: indented lines (commands, notes) fenced, headings demoted."""
    out, block = [], []

    def flush():
        if block:
            out.extend(["```text", *block, "```"])
            block.clear()

    for line in text.rstrip("\n").splitlines():
        if line.startswith("  "):
            block.append(line[2:])
            continue
        flush()
        if line.startswith("#"):
            line = "##" + line  # below this section's own "## name" heading
        out.append(line)
    flush()
    return "\n".join(out)


def section(o: Outcome, b: Bench) -> str:
    status = "timed out" if o.status is None else f"exit {o.status}"
    meta = {"command": o.command, "started": o.started, "load": o.load_start, "duration_s": round(o.duration_s, 1),
            "status": status}
    lines = [f"<!-- bench:{o.name} {json.dumps(meta)} -->", f"## {o.name}: {b.what}", "",
             f"- command: `{o.command}`",
             f"- run: {o.started}, load average at start {o.load_start}, {o.duration_s:.0f} s, {status}",
             f"- read_ahead_kb: {o.read_ahead_kb}"]
    if o.note:
        lines.append(f"- note: {o.note}")
    lines.append("")
    body = o.stdout.rstrip("\n")
    if b.markdown and o.status == 0:
        lines.append(as_markdown(body))
    else:
        lines += ["```text", body or "(no output)", "```"]
    if o.status != 0 and o.stderr_tail:
        lines += ["", "stderr (last lines):", "", "```text", o.stderr_tail, "```"]
    lines += ["", f"<!-- /bench:{o.name} -->"]
    return "\n".join(lines)


PREAMBLE = """\
# Benchmarks

Generated by `{cmd}` (`bench/run_all.py`); do not edit by hand. Each section below
says which command produced its figures, when it ran and the load average at its start;
re-run a command from the repository root (as root: tracefs, eviction) to reproduce it.
The bench scripts find the package themselves; for the `python3 -m elflayout ...` lines they
print, use `.venv/bin/python -m elflayout` or set `PYTHONPATH=tools`. Paths under
`~/.cache/elflayout` are the cached builds of `elflayout.targets` (directory names derive
from the linker, its arguments and inputs) and the benches' work files.

## Machine

| fact | value |
|---|---|
{facts}

## How to read these figures

- **Pages read** are the pages the kernel inserted into the page cache for the library
  under test (`filemap:mm_filemap_add_to_page_cache`, traced by `elflayout measure` or the
  bench script), after evicting only that library (fsync + `posix_fadvise(DONTNEED)`,
  checked with mincore), with `read_ahead_kb` of its device set to 128 and restored
  afterwards. They are deterministic under these controls: runs of one variant give the
  same count (a bench says so when they do not). Bytes read = pages × 4096. A *seek* is a
  read starting more than 32 pages from the end of the previous one (time order).
- **Wall times** are medians; this VM's disk is cached by the host, so wall times hide
  most of the I/O cost and move with the machine's load (its 2 cores are shared with
  other jobs). Compare them only inside one section, never across sections.
- **Physical limit** (`elflayout.order.limit.physical_limit`): the bytes a startup
  touches, packed densely — from a valgrind `elflayout profile --data` profile: bytes of the
  executed functions + 4096 × distinct file pages touched as data (read or written, e.g.
  `.dynsym`/`.dynstr`/`.gnu.hash` looked up by ld.so, `.data.rel.ro` written by
  relocation; relocation tables and executable sections excluded) + executable pages run
  outside known functions (PLT) + the ELF header page + the relocation tables' size after
  packing (non-RELATIVE RELA + optimal RELR + `.rela.plt`), divided by 4096 and rounded up.
  It is a floor for a perfect layout with no read-around waste, not a forecast — except that
  data is counted in pages of the *profiled* layout, so a layout that packs the touched data
  or `.dynstr` names more densely than that (`order --data-script`, `--dynstr-out`) can read
  fewer pages than the estimate in those sections.

## Summary

| bench | command | status | duration | load at start | run at |
|---|---|---|---|---|---|
{summary}

"""


def render(facts: dict, blocks: dict[str, str], metas: dict[str, dict], argv_cmd: str) -> str:
    labels = {"date": "date (page generated)", "kernel": "kernel", "machine": "architecture",
              "cpu_model": "CPU model", "cores": "cores", "memory": "memory",
              "load_average": "load average (1/5/15 min) when the page was generated",
              "read_ahead_kb_device": "read_ahead_kb of the device when the page was generated (a "
                                      "measurement session sets it to 128 while it runs)",
              "python": "Python", "commit": "git commit (HEAD)"}
    facts_md = "\n".join(f"| {labels.get(k, k)} | {v} |" for k, v in facts.items())
    facts_md += "\n| read_ahead_kb used for page counts | 128 (set by the harness/scripts, then restored) |"
    rows = []
    for b in BENCHES:
        m = metas.get(b.name)
        if m is None:
            rows.append(f"| {b.name} | `{b.command()}` | not run yet | | | |")
        else:
            rows.append(f"| [{b.name}](#{b.name}) | `{m['command']}` | {m['status']} | {m['duration_s']:.0f} s | "
                        f"{m['load']} | {m['started']} |")
    body = PREAMBLE.format(cmd=argv_cmd, facts=facts_md, summary="\n".join(rows))
    body += "\n\n".join(f'<a id="{b.name}"></a>\n\n{blocks[b.name]}' for b in BENCHES if b.name in blocks) + "\n"
    return body


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("names", nargs="*", help=f"benches to run (default all): {', '.join(BY_NAME)}")
    ap.add_argument("--list", action="store_true", help="list the benches and their commands, run nothing")
    ap.add_argument("-o", "--output", default=str(DEFAULT_OUT), help="page to write (default docs/benchmarks.md)")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per script before it is stopped (1800)")
    ap.add_argument("--quiet", action="store_true", help="do not echo the scripts' output while they run")
    ap.add_argument("--force", action="store_true", help="replace an OUTPUT that is not a page written by run_all.py")
    a = ap.parse_args(argv)
    unknown = [n for n in a.names if n not in BY_NAME]
    if unknown:
        print(f"run_all: error: unknown bench {unknown[0]!r} (choose from {', '.join(BY_NAME)})", file=sys.stderr)
        return 2
    chosen = [BY_NAME[n] for n in a.names] if a.names else list(BENCHES)
    if a.list:
        for b in chosen:
            print(f"{b.name:<10} {b.command():<45} {b.what}")
        return 0
    out = Path(a.output)
    from elflayout.errors import ElflayoutError
    from elflayout.fileio import atomic_write_text, check_output

    # Fail before running anything: a bad path, or a file that is not a page of ours.
    try:
        check_output(out, force=True)
        if out.exists() and not a.force and not previous_sections(out) and "Generated by `python3 bench/run_all.py" \
                not in out.read_text(errors="replace"):
            raise ElflayoutError(f"{out}: exists and is not a page written by run_all.py (use --force to replace it)")
    except ElflayoutError as e:
        print(f"run_all: error: {e}", file=sys.stderr)
        return 2

    facts = machine_facts()
    print(f"run_all: {len(chosen)} bench(es): {', '.join(b.name for b in chosen)}; load average "
          f"{facts['load_average']}; writing {out}", file=sys.stderr, flush=True)
    prev = previous_sections(out)
    blocks = {n: text for n, (_m, text) in prev.items() if n in BY_NAME}
    metas = {n: m for n, (m, _t) in prev.items() if n in BY_NAME}
    outcomes = []
    argv_cmd = " ".join(["python3 bench/run_all.py", *a.names])
    for b in chosen:
        print(f"run_all: $ {b.command()}", file=sys.stderr, flush=True)
        o = run_one(b, a.timeout, echo=not a.quiet)
        outcomes.append(o)
        blocks[b.name] = section(o, b)
        metas[b.name] = previous_sections_meta(blocks[b.name])
        # Written after every script, so an interrupted session keeps what it measured.
        atomic_write_text(out, render(facts, blocks, metas, argv_cmd))
    print(f"{'bench':<10} {'status':<10} {'time':>7}  load at start   figures (output lines)")
    for o in outcomes:
        st = "timeout" if o.status is None else f"exit {o.status}"
        print(f"{o.name:<10} {st:<10} {o.duration_s:>6.0f}s  {o.load_start:<15} {len(o.stdout.splitlines())}"
              + (f"   ({o.note})" if o.note else ""))
    print(f"wrote {out}")
    return 0 if all(o.status == 0 for o in outcomes) else 1


def previous_sections_meta(block: str) -> dict:
    m = MARK.search(block)
    return json.loads(m["meta"]) if m else {}


if __name__ == "__main__":
    sys.exit(main())
