"""``elflayout demo``: the whole pipeline on the bundled real example.

libpython3.11 relinked from Debian's PIC archive (and, with ``--big``, libLLVM-16
relinked from LLVM 16's static archives): profile the startup workload, relink with
``elflayout link``'s default path (objects split, function order by the algorithm the
readahead model picks, data and ``.dynstr`` order, relocations packed, order checked)
with lld and GNU ld, measure baseline / packed / default path (selective, cold and hot),
then write ``report.html`` and print a before/after table. The step-by-step variants
are in the benchmarks (bench/bench_split.py).

Every stage runs through the public CLI (measurements in-process through
``measure.session``, the library the CLI calls), and each command is printed as it
runs, so a user can copy the steps onto their own library. Downloads and builds are cached
(``ELFLAYOUT_CACHE``), so a second run only re-profiles and re-measures.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

from elflayout.errors import ElflayoutError
from elflayout.order import pipeline

SUMMARY = "run the whole pipeline on the bundled example (libpython3.11; libLLVM-16 with --big)"
EPILOG = """examples:
  elflayout demo                      # libpython3.11, about 3-6 minutes on 2 cores
  elflayout demo --big                # also libLLVM-16 (llc-16 --version)
  elflayout demo --runs 10 --out /tmp/demo --storage emmc

Outputs (in --out, default out/demo): profile, ordering files, relinked and packed
libraries, results JSON, report.html. The commands run are printed; re-running reuses
the cached downloads and builds.
"""

IMPORTS = "import json, decimal, asyncio, re"
# What every measured run sees (measure: controls.FixedEnv, stdout to /dev/null), three
# runs merged: the profile the default path is measured with (docs/benchmarks.md).
MEASURED_CONDITIONS = ["--clean-env", "--env", "LC_ALL=C", "--stdout", "null", "--repeat", "3"]
# Rounds per variant and state: at least stats.MIN_TIME_RUNS, so its time rows get a
# verdict (fewer, or runs lost to interference, print "too few runs" instead).
DEFAULT_RUNS = 5


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", default="out/demo", help="output directory (default out/demo)")
    p.add_argument("--runs", type=int, default=DEFAULT_RUNS,
                   help=f"measurement rounds (default {DEFAULT_RUNS}; with fewer than a time comparison needs, "
                        "time rows say \"too few runs\")")
    p.add_argument("--big", action="store_true", help="also run libLLVM-16 (llc-16 --version)")
    p.add_argument("--storage", default="hdd",
                   help="also measure baseline vs the default path through an emulated slow disk: hdd (default), "
                        "emmc, sata-ssd, cloud, or off")
    p.add_argument("--states", default="selective,cold,hot", help="comma-separated states (default selective,cold,hot)")


class Demo:
    def __init__(self, out: Path):
        from rich.console import Console

        self.out = out
        self.console = Console(stderr=True, highlight=False)
        self.step = 0
        self.t0 = time.monotonic()

    def head(self, text: str) -> None:
        self.step += 1
        self.console.rule(f"[bold]{self.step}. {text}[/]  [dim]({time.monotonic() - self.t0:.0f} s)[/]")

    def el(self, *args, check=True, capture=False, ok=(0,)) -> subprocess.CompletedProcess:
        """Run an elflayout verb through the CLI, showing the command."""
        cmd = [sys.executable, "-m", "elflayout", *map(str, args)]
        self.console.print("[cyan]$ elflayout " + " ".join(shlex.quote(str(a)) for a in args) + "[/]")
        r = subprocess.run(cmd, text=True, capture_output=capture)
        if check and r.returncode not in ok:
            msg = (r.stderr or "").strip().splitlines()[-1:] if capture else []
            raise ElflayoutError(f"demo step failed (exit {r.returncode}): elflayout {args[0]} {' '.join(msg)}")
        return r


    def order(self, req, output, data_script=None, dynstr_out=None) -> None:
        """Order in-process (``order.pipeline``, the function ``elflayout order`` runs),
        showing the command it equals and what it wrote."""
        self.console.print("[cyan]$ elflayout " + shlex.join(req.argv(output, data_script, dynstr_out)) + "[/]")
        o = pipeline.order_files(req, output, data_script=data_script, dynstr_out=dynstr_out)
        for line in pipeline.summary_lines(o, output, data_script, dynstr_out):
            self.console.print(line, markup=False, highlight=False)


def _lib_variant(d: Demo, name: str, lib: Path) -> Path:
    dest = d.out / "libs" / name
    dest.mkdir(parents=True, exist_ok=True)
    target = dest / lib.name
    if not target.exists() or target.stat().st_mtime < lib.stat().st_mtime:
        shutil.copy2(lib, target)
    return target


def _relink_python(d: Demo, base: dict, profile: Path, linker: str) -> Path:
    """Relink libpython with `elflayout link`'s default path: the command as the build
    runs it, the profile and the linker, nothing else (order/defaults.py)."""
    outdir = d.out / "libs" / f"default-{linker}"
    outdir.mkdir(parents=True, exist_ok=True)
    lib = outdir / base["lib"].name
    cmd = list(base["link_cmd"])
    cmd[cmd.index("-o") + 1] = str(lib)
    cmd = [c.replace(str(base["map"]), str(outdir / (lib.name + ".map"))) for c in cmd]
    d.el("link", "--profile", profile, "--linker", linker, "--", *cmd)
    return lib


def _pack(d: Demo, lib: Path, name: str) -> Path:
    dest = d.out / "libs" / name
    dest.mkdir(parents=True, exist_ok=True)
    out = dest / lib.name
    d.el("pack-relocs", lib, "-o", out, "--check", "--force")
    return out


def _variant_cmd(lib: Path, argv: list[str], env: dict) -> str:
    envs = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    return f"env LD_LIBRARY_PATH={shlex.quote(str(lib.parent))} {envs} " + " ".join(shlex.quote(a) for a in argv)


def _measure(d: Demo, commands: dict[str, str], files, states, runs, out: Path, storage: str | None = None) -> Path:
    """A measurement session of named commands, interleaved, with a fixed seed (in-process,
    ``measure.session``; the equivalent ``elflayout measure`` command is shown)."""
    from rich.markup import escape

    from elflayout import fileio
    from elflayout.measure import session

    plan = session.MeasurePlan(variants=list(commands.items()), states=list(states), runs=int(runs),
                               files=[str(f) for f in files], seed=1, storage=storage)
    args = [*sum((["--name", n, c] for n, c in commands.items()), []), *sum((["--state", s] for s in states), []),
            "--runs", runs, *(["--storage", storage] if storage else []), "--files", *files, "-o", out, "--force",
            "--seed", 1]
    d.console.print("[cyan]$ elflayout measure " + " ".join(shlex.quote(str(a)) for a in args) + "[/]")
    doc = session.measure(plan, lambda kind, info: kind in ("note", "warning") and d.console.print(
        f"  [yellow]{kind}:[/] {info['message']}", soft_wrap=True))
    fileio.dump_json(doc, out)
    empty = session.all_disturbed(doc)
    if empty:
        d.console.print(f"  [yellow]{escape(session.disturbed_message(doc, empty, True))}[/]")
    return out


def run_python(d: Demo, args) -> tuple[Path, Path]:
    from elflayout.targets import libpython

    d.head("libpython3.11: fetch Debian's PIC archive, relink with lld and GNU ld (cached)")
    base = {lk: libpython.prepare(lk) for lk in ("lld", "bfd")}
    for lk, b in base.items():
        d.console.print(f"  {lk}: {b['lib']}")
    lld = base["lld"]
    argv = [str(lld["launcher"]), "-c", IMPORTS]
    env = dict(lld["env"])

    d.head("inspect the baseline library")
    d.el("inspect", lld["lib"], "--map", lld["map"], capture=True)
    r = d.el("inspect", lld["lib"], "--json", capture=True)
    info = json.loads(r.stdout)
    d.console.print(f"  {info.get('size', 0):,} bytes; sections: {len(info.get('sections', []))}")

    d.head(f"profile the startup workload with valgrind: python3.11 -c {IMPORTS!r}")
    # Debian's objects have no function sections: link splits them. Profile a build of
    # the split objects (the same split), so data pages name the split data sections.
    split = libpython.prepare("lld", split=True)
    prof = d.out / "python.profile.json"
    # as the measured runs see it: their environment (LC_ALL=C), stdout to /dev/null, and
    # three runs merged (hash randomisation moves the garbage collector's passes)
    d.el("profile", "--target", split["lib"], "--map", split["map"], "--data",
         *sum((["--env", f"{k}={v}"] for k, v in env.items()), []), *MEASURED_CONDITIONS, "-o", prof, "--force",
         "--", str(split["launcher"]), *argv[1:])

    d.head("relink with the default path: elflayout link --profile P --linker L -- <the link command>")
    default = {lk: _relink_python(d, base[lk], prof, lk) for lk in ("lld", "bfd")}
    d.el("check-order", default["lld"], "--profile", prof, check=False)
    variants = {
        "baseline": _lib_variant(d, "baseline", lld["lib"]),
        "packed": _pack(d, lld["lib"], "packed"),
        "default path": default["lld"],
        "default path bfd": default["bfd"],
    }

    d.head("measure: interleaved rounds, pages read per library (tracefs), read_ahead_kb 128")
    states = [s for s in args.states.split(",") if s]
    res = _measure(d, {n: _variant_cmd(lib, argv, env) for n, lib in variants.items()}, variants.values(),
                   states, args.runs, d.out / "python.results.json")
    return prof, res


def run_llvm(d: Demo, args) -> tuple[Path, Path]:
    from elflayout.targets import libllvm

    d.head("libLLVM-16: relink from LLVM 16's static archives with lld (cached)")
    base = libllvm.relink("lld")
    llc = shutil.which("llc-16") or "llc-16"
    argv = [llc, "--version"]

    d.head("profile llc-16 --version with valgrind (functions, and data pages with --data)")
    prof = d.out / "llvm.profile.json"
    d.el("profile", "--target", base["lib"], "--map", base["map"], "--data",
         "--env", f"LD_LIBRARY_PATH={base['lib'].parent}", "-o", prof, "--force", "--", *argv)

    d.head("order functions, data sections, merged strings and .dynstr names; relink with lld")
    order, script, names = d.out / "llvm.order", d.out / "llvm.data.ld", d.out / "llvm.dynstr.rsp"
    d.order(pipeline.Request(prof, "lld", algorithm="hot-last", lib=base["lib"]), order, script, names)
    ordered = libllvm.relink("lld", extra_link_args=[f"--symbol-ordering-file={order}", "--no-warn-symbol-ordering",
                                                    f"-Wl,-T,{script}", f"-Wl,@{names}"])
    d.el("check-order", ordered["lib"], "--profile", prof, check=False)
    variants = {
        "debian": libllvm.system()["lib"],
        "baseline": _lib_variant(d, "llvm-baseline", base["lib"]),
        "ordered": _lib_variant(d, "llvm-ordered", ordered["lib"]),
        "packed": _pack(d, base["lib"], "llvm-packed"),
        "ordered+packed": _pack(d, ordered["lib"], "llvm-ordered-packed"),
    }
    d.head("measure libLLVM variants")
    # Debian's library is found without help; the others through LD_LIBRARY_PATH.
    cmds = {n: " ".join(shlex.quote(a) for a in argv) if n == "debian" else _variant_cmd(lib, argv, {})
            for n, lib in variants.items()}
    res = _measure(d, cmds, variants.values(), ["selective", "hot"], args.runs, d.out / "llvm.results.json")
    return prof, res


def _table(d: Demo, results: Path) -> None:
    from elflayout.fileio import load_json

    doc = load_json(results, "results")
    from rich.table import Table

    t = Table(title=f"{results.name}: medians per variant and state", title_justify="left")
    for c in ("variant", "state", "pages read", "MB read", "wall ms", "major faults"):
        t.add_column(c, justify="right" if c not in ("variant", "state") else "left")
    rows = {}
    for s in doc.get("summary", []):
        rows.setdefault((s["variant"], s["state"]), {})[s["metric"]] = s["median"]
    for (v, st), m in rows.items():
        pr = m.get("pages_read")
        br = m.get("bytes_read")
        t.add_row(v, st, f"{pr:,.0f}" if pr is not None else "-", f"{br / 1e6:.2f}" if br is not None else "-",
                  f"{m['wall_s'] * 1e3:.1f}" if "wall_s" in m else "-",
                  f"{m['major_faults']:.0f}" if "major_faults" in m else "-")
    d.console.print(t)


def run(args) -> int:
    if os.geteuid() != 0:
        raise ElflayoutError("the demo measures page-cache reads with tracefs and evicts files: run it as root")
    from elflayout.measure.stats import MIN_TIME_RUNS

    if args.runs < 1:
        raise ElflayoutError(f"--runs: must be at least 1 (got {args.runs})")
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    d = Demo(out)
    if args.runs < MIN_TIME_RUNS:
        d.console.print(f"[yellow]note:[/] --runs {args.runs} is below the {MIN_TIME_RUNS} rounds a time comparison "
                        f"needs: wall/user/sys rows will say \"too few runs\" (page counts still get verdicts)")
    inputs = []
    prof, res = run_python(d, args)
    inputs += [res, prof]
    if args.big:
        lprof, lres = run_llvm(d, args)
        inputs += [lres, lprof]
    if args.storage and args.storage != "off":
        d.head(f"measure libpython baseline vs the default path through an emulated {args.storage} disk")
        # Reuses the variant libraries written above.
        sres = out / f"python.{args.storage}.results.json"
        base, both = out / "libs" / "baseline", out / "libs" / "default-lld"
        from elflayout.targets import libpython

        lld = libpython.prepare("lld")
        argv = [str(lld["launcher"]), "-c", IMPORTS]
        lib = lld["lib"].name
        # One slow mount per directory: {mount0} serves the baseline, {mount1} the other.
        cmd_base = _variant_cmd(base / lib, argv, lld["env"]).replace(f"LD_LIBRARY_PATH={base}", "LD_LIBRARY_PATH={mount0}")
        cmd_both = _variant_cmd(both / lib, argv, lld["env"]).replace(f"LD_LIBRARY_PATH={both}", "LD_LIBRARY_PATH={mount1}")
        _measure(d, {"baseline": cmd_base, "default path": cmd_both}, [base / lib, both / lib],
                 ["selective", "hot"], args.runs, sres, storage=args.storage)
        inputs.insert(1, sres)

    d.head("report")
    report = out / "report.html"
    d.el("report", *inputs, "-o", report, "--force")
    for r in inputs:
        if r.name.endswith("results.json"):
            _table(d, r)
    d.console.print(f"\n[bold green]done[/] in {time.monotonic() - d.t0:.0f} s. Report: [bold]{report}[/]")
    print(report)
    return 0
