#!/usr/bin/env python3
"""Benchmark of AArch64 under qemu-user: Debian's arm64 libLLVM-16 and ``llc-16 --version``.

1. Profile: the qemu backend's profile of the arm64 ``llc-16 --version`` against the
   valgrind backend's of the x86-64 build of the same Debian release: functions and
   code pages first executed, and time. Target: function counts within a few %.
2. Pack: Debian's gold-linked arm64 libLLVM-16 packed post-link (``pack-relocs --check
   --format relr``: relocated images at two bases, a real load under qemu). Target:
   RELR <= 144,720 bytes.
3. Pages: ``llc-16 --version`` under qemu with the original library vs the packed one
   (LD_LIBRARY_PATH), selective eviction of the two libraries, read_ahead_kb 128.
   Target: >= 2,200 fewer pages. (Needs root and tracefs; skipped otherwise.)
4. Relink: libLLVM-16 linked from ``llvm-16-dev:arm64``'s archives with the cross driver and
   lld (``targets.libllvm.relink(platform=ARM64)``: llc's output checked identical under
   qemu), profiled by the qemu backend, relinked by ``elflayout link`` with its defaults
   and with the fullest lld recipe (``LINK_VARIANTS``); pages read by ``llc-16 --version``
   as in 3. Target: Debian's 14,691 -> <= 3,900.

5. libpython: Debian's arm64 ``libpython3.11-pic.a`` (libpython3.11-dev:arm64) linked by the
   cross driver and lld unordered (the archive as it is, and split in original order),
   the split build profiled by the qemu backend (``python -c "import json, decimal,
   asyncio, re"``, ``--clean-env --env LC_ALL=C --stdout null --repeat 3``), then
   ``elflayout link --profile P`` on the unsplit archive's link
   command (the default path: split, order, data script, ``.dynstr``; ``--pack relr``); pages read
   under qemu as in 3. Compare: on x86-64, split original order 1,573 -> 955
   (docs/splitting.md).

The arm64 root is scripts/arm64-root.sh's (downloaded once into the cache).
Run:  python3 bench/bench_aarch64.py [--runs 5] [--steps profile,pack,relink,libpython]
"""

from __future__ import annotations

import argparse
import json
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

from _common import cache_dir, cli, measure, plan_from_args  # noqa: E402
from elflayout.order.defaults import MEASURED_OPTIONS  # noqa: E402
from elflayout.tracefs import tracefs_status  # noqa: E402

X86_LIB = Path("/usr/lib/x86_64-linux-gnu/libLLVM-16.so.1")


def _profile(out: Path, target: Path, argv: list) -> dict:
    cli("profile", "--target", target, "-o", out, "--force", "--", *argv)
    doc = json.loads(out.read_text())
    t = doc["targets"][0]
    return {"functions": len(t["functions"]), "x_pages": sum(1 for p in t["pages"] if p["kind"] == "x"),
            "workload_s": doc["metadata"]["duration_s"], "backend": doc["metadata"]["backend"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5, help="measurement rounds (default 5)")
    ap.add_argument("--steps", default="profile,pack,relink,libpython", help="which parts to run (default: all)")
    args = ap.parse_args()
    steps = set(args.steps.split(","))
    r = subprocess.run([str(ROOT / "scripts" / "arm64-root.sh")], capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"bench_aarch64: scripts/arm64-root.sh failed: {r.stderr.strip()[-300:]}")
    root = Path(r.stdout.strip().splitlines()[-1])
    lib, llc = root / "usr/lib/aarch64-linux-gnu/libLLVM-16.so.1", root / "usr/lib/llvm-16/bin/llc"
    work = cache_dir("bench-aarch64")

    if "profile" in steps:
        profile_step(work, lib, llc)
    if "pack" in steps:
        pack_step(work, lib, llc, args.runs)
    if "relink" in steps:
        relink_step(work, lib, llc, args.runs)
    if "libpython" in steps:
        libpython_step(work, args.runs)
    return 0


def profile_step(work: Path, lib: Path, llc: Path) -> None:
    print("1. profile of llc-16 --version")
    a = _profile(work / "arm64.json", lib, [llc, "--version"])
    x = _profile(work / "x86.json", X86_LIB, ["llc-16", "--version"])
    for name, p in (("arm64 (qemu)", a), ("x86-64 (valgrind)", x)):
        print(f"  {name:18} {p['functions']:,} functions, {p['x_pages']:,} code pages, workload {p['workload_s']:.1f} s")
    print(f"  functions: arm64/x86 {a['functions'] / x['functions'] - 1:+.1%}")


def pack_step(work: Path, lib: Path, llc: Path, runs: int) -> None:

    print("2. pack-relocs --check --format relr (post-link, gold-linked input)")
    packed = work / "packed" / "libLLVM-16.so.1"
    packed.parent.mkdir(exist_ok=True)
    doc = json.loads(cli("pack-relocs", "--check", "--json", "--format", "relr", "--min-glibc", "2.36", lib,
                         "-o", packed, "--force").stdout)
    print(f"  RELR {doc['relr_bytes']:,} bytes; {doc['cut']['pages']:,} pages cut; "
          f"real load under qemu equal: {doc['check']['real_load']['equal']}")

    why = tracefs_status()
    if why:
        print(f"3. pages read: skipped ({why})")
        return
    print("3. pages read at a selectively cold start under qemu (read_ahead_kb 128)")
    plan = plan_from_args(["--name", "debian", f"{llc} --version", "--name", "packed",
                           f"LD_LIBRARY_PATH={packed.parent} {llc} --version", "--state", "selective",
                           "--runs", runs, "--files", lib, packed])
    pages = _pages(measure(plan, work / "measure.json"))
    print(f"  fewer pages: {min(pages['debian']) - max(pages['packed']):,}")


def _pages(res: dict) -> dict:
    pages: dict = {}
    for run in res["runs"]:
        if not run.get("interference"):
            pages.setdefault(run["variant"], []).append(run["pages_read"])
    for v, ps in pages.items():
        print(f"  {v:9} {min(ps):,}-{max(ps):,} pages ({len(ps)} runs)")
    return pages


# elflayout link variants of step 4: (name, profile options, link options). "default":
# link with no option, from the profile a user records as the link's summary advises
# (``--data`` and measured runs' conditions: stdout at /dev/null takes other code paths
# in llc than a pipe; under qemu ``--data`` costs no time), as the x86-64 default-path
# figures; "ordered": function order only; "full": the fullest lld recipe of the x86-64
# relink (docs/benchmarks.md).
MEASURED = ("--data", *shlex.split(MEASURED_OPTIONS))
LINK_VARIANTS = (("default", MEASURED, ()),
                 ("ordered", (), ("--algorithm", "first-access", "--no-data", "--no-dynstr", "--pack", "none")),
                 ("full", ("--data",), ("--algorithm", "hot-last", "--data-script", "--dynstr", "--pack", "relr")))
PROFILE_NAMES = {(): "relinked-version.json", ("--data",): "relinked-version-data.json",
                 MEASURED: "relinked-version-measured.json"}


def _link_variant(work: Path, base: dict, llc: Path, name: str, popts: tuple, opts) -> Path:
    """Profile the unordered relink (qemu backend) with ``popts``, relink it by
    ``elflayout link``; the ordered library, its llc output checked identical under qemu."""
    from elflayout.targets import libllvm

    prof = work / PROFILE_NAMES[popts]
    if not prof.exists():
        cli("profile", *popts, "--target", base["lib"], "--map", base["map"],
            "--env", f"LD_LIBRARY_PATH={base['outdir']}", "-o", prof, "--force", "--", llc, "--version")
    dest = work / name
    dest.mkdir(exist_ok=True)
    cmd = libllvm.link_command("lld", dest / libllvm.SONAME, platform=libllvm.ARM64)
    print(f"  $ python3 -m elflayout link --profile {prof} --force {shlex.join(opts)} -- "
          + shlex.join([*cmd[:12], f"... ({len(cmd) - 19} archives)", *cmd[-7:]]), flush=True)
    r = cli("link", "--profile", prof, "--force", *opts, "--", *cmd, echo=False)
    for ln in r.stderr.splitlines():
        if ln.startswith(("elflayout: check: order", "elflayout: check: packing")):
            print("   ", ln.removeprefix("elflayout: check: "))
    print(f"  {name}: llc output under qemu identical ({libllvm.verify(dest, libllvm.ARM64)})", flush=True)
    return dest / libllvm.SONAME


def relink_step(work: Path, lib: Path, llc: Path, runs: int) -> None:
    from elflayout.targets import libllvm

    print("4. libLLVM-16 relinked from llvm-16-dev:arm64, ordered by elflayout link")
    print("  relink: targets.libllvm.relink('lld', platform=ARM64) (cached; llc output checked under qemu)", flush=True)
    base = libllvm.relink("lld", platform=libllvm.ARM64)
    libs = {name: _link_variant(work, base, llc, name, popts, opts) for name, popts, opts in LINK_VARIANTS}
    why = tracefs_status()
    if why:
        print(f"  pages read: skipped ({why})")
        return
    args = ["--name", "debian", f"{llc} --version", "--name", "relinked",
            f"LD_LIBRARY_PATH={base['outdir']} {llc} --version"]
    for name, p in libs.items():
        args += ["--name", name, f"LD_LIBRARY_PATH={p.parent} {llc} --version"]
    plan = plan_from_args([*args, "--state", "selective", "--runs", runs, "--files", lib, base["lib"], *libs.values()])
    pages = _pages(measure(plan, work / "measure-relink.json"))
    for name in libs:
        print(f"  debian -> {name}: {min(pages['debian']):,} -> {max(pages[name]):,} pages (target <= 3,900)")


ARM64_PIC = "usr/lib/python3.11/config-3.11-aarch64-linux-gnu/libpython3.11-pic.a"
PY_SONAME = "libpython3.11.so.1.0"
PY_WORK = "import json, decimal, asyncio, re"
LAUNCHER_C = "extern int Py_BytesMain(int, char **);\nint main(int c, char **v) { return Py_BytesMain(c, v); }\n"


def _py_link_command(out: Path, archive: Path, runtime: Path) -> list:
    from elflayout.toolchain import cross_linker_flags
    return ["aarch64-linux-gnu-gcc", "-shared", *cross_linker_flags("lld"), f"-Wl,-soname,{PY_SONAME}",
            f"-Wl,-Map={out}.map", "-o", out, "-Wl,--whole-archive", archive, "-Wl,--no-whole-archive",
            f"-L{runtime}/lib/aarch64-linux-gnu", "-l:libexpat.so.1", "-l:libz.so.1", "-lm"]


def libpython_step(work: Path, runs: int) -> None:
    from elflayout.targets import fetch_debs

    print("5. arm64 libpython3.11 from libpython3.11-pic.a: split, ordered and packed by elflayout link")
    pic = fetch_debs(["libpython3.11-dev"], "libpython3.11-arm64", arch="arm64") / ARM64_PIC
    rt = fetch_debs(["libpython3.11-stdlib", "libpython3.11-minimal", "libexpat1", "zlib1g"],
                    "libpython3.11-arm64-runtime", arch="arm64")
    d = work / "libpython"
    split = d / "split"
    if not (split / pic.name).exists():
        cli("split", pic, "-o", split, "--force")
    libs = {}
    for name, archive in (("unordered", pic), ("split", split / pic.name)):
        libs[name] = d / name / PY_SONAME
        libs[name].parent.mkdir(parents=True, exist_ok=True)
        subprocess.run(_py_link_command(libs[name], archive, rt), check=True)
    (d / "launcher.c").write_text(LAUNCHER_C)
    launcher = d / "python3.11"
    subprocess.run(["aarch64-linux-gnu-gcc", "-o", launcher, d / "launcher.c", libs["unordered"],
                    f"-Wl,-rpath-link,{rt}/lib/aarch64-linux-gnu"], check=True)

    def env(lib: Path) -> list:
        return [f"LD_LIBRARY_PATH={lib.parent}:{rt}/lib/aarch64-linux-gnu", f"PYTHONHOME={rt}/usr"]

    prof = d / "split-profile.json"
    if not prof.exists():
        # under the conditions of the measured runs (docs/profiling.md), as the x86-64 figure
        cli("profile", "--data", "--clean-env", "--env", "LC_ALL=C", "--stdout", "null", "--repeat", "3",
            "--target", libs["split"], "--map", f"{libs['split']}.map",
            *[a for e in env(libs["split"]) for a in ("--env", e)], "-o", prof, "--force", "--", launcher, "-c", PY_WORK)
    libs["elflayout-link"] = d / "elflayout-link" / PY_SONAME
    libs["elflayout-link"].parent.mkdir(exist_ok=True)
    # --pack relr: lld packs at link time (the default packs after the link and proves it by
    # real loads in the emulator's root, which lacks libexpat and zlib)
    cli("link", "--profile", prof, "--force", "--pack", "relr", "--",
        *_py_link_command(libs["elflayout-link"], pic, rt))
    why = tracefs_status()
    if why:
        print(f"  pages read: skipped ({why})")
        return
    args = []
    for name, lib in libs.items():
        args += ["--name", name, " ".join([*env(lib), str(launcher), "-c", shlex.quote(PY_WORK)])]
    plan = plan_from_args([*args, "--state", "selective", "--runs", runs, "--files", *libs.values()])
    pages = _pages(measure(plan, work / "measure-libpython.json"))
    for name in ("split", "elflayout-link"):
        print(f"  unordered -> {name}: {min(pages['unordered']):,} -> {max(pages[name]):,} pages "
              f"({max(pages[name]) / min(pages['unordered']) - 1:+.1%})")


if __name__ == "__main__":
    sys.exit(main())
