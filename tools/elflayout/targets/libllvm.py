"""libLLVM-16: Debian's ``libLLVM-16.so.1`` as shipped, and relinked from LLVM 16's
static archives.

``system()`` describes the shipped library (package libllvm16) and its workloads.
``relink()`` links ``libLLVM-16.so.1`` from the archives of llvm-16-dev and
libpolly-16-dev (PIC, built with ``-ffunction-sections -fdata-sections``, so a
symbol or section ordering file reorders every function) with the same exported
symbols as Debian's: a version script ``LLVM_16 { global: <defined dynsym names of the
shipped library>; local: *; };``. What is left out and why:

* BOLT*, Exegesis*, TableGen*, CFIVerify, Diff, DWARFLinkerParallel and Debuginfod: tool
  libraries that are not part of Debian's dylib (TableGen's ``-o`` option would even
  collide with llc's). FuzzMutate and FuzzerCLI stay in: Debian's dylib exports them
  (checked: the relink must export every name the shipped library does);
* libPolly.a and libPollyISL.a are added: opt registers Polly's passes.

Link flags follow the shipped library: soname, ``-z nodelete``,
``-Bsymbolic-functions`` (Debian's has only 487 PLT slots: internal calls are
direct), NEEDED libffi, libedit, libz3, libz, libzstd, libtinfo, libxml2.
``relink`` checks that ``llc-16`` and ``opt-16 -O2`` give byte-identical output with
the relinked library (``LD_LIBRARY_PATH=<outdir>``, which overrides the tools'
RUNPATH) and with the shipped one.

The same recipe builds Debian's arm64 library (``platform=ARM64``): the archives of
``llvm-16-dev:arm64``, the cross driver ``aarch64-linux-gnu-g++``, the exported names and
run-time libraries of the arm64 root (scripts/arm64-root.sh), and the tools run under
qemu-user for the check.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from elflayout.errors import ElflayoutError
from elflayout.fileio import atomic_write_text
from elflayout.targets import (args_fingerprint, build_slot, cache_dir, ensure_installed, fetch_debs, param_key,
                               record_paths, run, save_record)
from elflayout.toolchain import cross_linker_flags, driver_args, linker_flag

SONAME = "libLLVM-16.so.1"
SYSTEM_LIB = Path("/usr/lib/x86_64-linux-gnu") / SONAME


@dataclass(frozen=True)
class Platform:
    """The machine a build is for: this one (x86-64), or arm64 built with the cross
    driver from arm64 .debs and run under qemu-user in the arm64 root."""
    name: str
    machine: str             # ELF machine
    deb_arch: str | None     # a foreign Debian architecture (None: this machine's packages)
    driver: str              # the C++ compiler driver that links
    triplet: str             # Debian multiarch directory

    @property
    def native(self) -> bool:
        return self.deb_arch is None

    def root(self) -> Path:
        """The system root the shipped library and tools are in ("/" natively)."""
        if self.native:
            return Path("/")
        from elflayout import emulator

        r = emulator.sysroot(self.machine)
        if not (r / "usr/lib" / self.triplet / SONAME).exists():
            raise ElflayoutError(f"{r}: no {self.name} {SONAME} (make the root with scripts/arm64-root.sh)")
        return r

    def system_lib(self) -> Path:
        return SYSTEM_LIB if self.native else self.root() / "usr/lib" / self.triplet / SONAME

    def run_prefix(self, libdir: Path | None) -> list[str]:
        """How a tool of this platform runs, loading libraries from ``libdir`` first."""
        if self.native:
            return []
        from elflayout import emulator

        em = emulator.detect(self.machine)
        return [*em.argv, *(["-E", f"LD_LIBRARY_PATH={libdir}"] if libdir else [])]

    def library_dirs(self) -> list[str]:
        """-L options for the run-time libraries (the root's, for a foreign machine)."""
        if self.native:
            return []
        return [f"-L{self.root() / d / self.triplet}" for d in ("usr/lib", "lib")]


X86_64 = Platform("x86-64", "EM_X86_64", None, "g++", "x86_64-linux-gnu")
ARM64 = Platform("arm64", "EM_AARCH64", "arm64", "aarch64-linux-gnu-g++", "aarch64-linux-gnu")
DEV_PACKAGES = ["llvm-16-dev", "libpolly-16-dev"]
TOOLS_PACKAGES = ["llvm-16", "libllvm16"]
RUNTIME_PACKAGES = ["libffi8", "libedit2", "zlib1g", "libzstd1", "libtinfo6", "libxml2", "libz3-4"]
ARCHIVE_DIR = "usr/lib/llvm-16/lib"
EXCLUDE_PREFIXES = ("libLLVMBOLT", "libLLVMExegesis", "libLLVMTableGen")
# FuzzMutate and FuzzerCLI are *not* left out, unlike the notes from the hand-made link
# said: Debian's dylib exports their symbols (RandomIRBuilder, parseFuzzerCLOpts, ...).
# Debuginfod is not in Debian's dylib either, and its HTTPClient references libcurl,
# which the dylib does not link: keeping it leaves undefined curl_* symbols, so the
# relink would fail dlopen(RTLD_NOW) (and pack-relocs --check).
EXCLUDE = {"libLLVMCFIVerify.a", "libLLVMDiff.a", "libLLVMDWARFLinkerParallel.a", "libLLVMDebuginfod.a"}
EXTRA_ARCHIVES = ["libPolly.a", "libPollyISL.a"]
# -l: with sonames, so only the runtime packages are needed (no -dev symlinks).
LIBS = ["-l:libffi.so.8", "-l:libedit.so.2", "-l:libz.so.1", "-l:libzstd.so.1", "-l:libtinfo.so.6",
        "-l:libxml2.so.2", "-l:libz3.so.4"]
LINK_FLAGS = [f"-Wl,-soname,{SONAME}", "-Wl,-z,nodelete", "-Wl,-Bsymbolic-functions", "-Wl,-z,relro"]

# The LLVM IR modules of the workloads are text files in llvm_modules/, next to this file.
MODULES_DIR = Path(__file__).resolve().parent / "llvm_modules"


def _module(name: str) -> str:
    return (MODULES_DIR / name).read_text()


# A small module with a loop, a switch (a jump table in .rodata), a call chain and a
# global, so opt -O2 and llc exercise a fair set of passes.
EXAMPLE_LL = _module("example.ll")


# A second, larger module (loops, a jump-table switch, floating point, a struct, memcpy,
# a varargs call) for training orders on compiles other than the example's: held-out
# evaluation must never train on the held-out compile itself.
TRAINING_LL = _module("training.ll")


# A third module, small integer code (a counted loop, a recursive call, a select, a
# global): a training compile of the same kind as a small -O2 compile, but not the
# held-out example; with it, code every small compile runs is shared by more training
# workloads than code only the larger TRAINING_LL needs (see docs/ordering.md).
TRAINING_SMALL_LL = _module("training-small.ll")


def _cached_text(name: str, text: str) -> Path:
    p = cache_dir("libllvm") / name
    if not p.exists() or p.read_text() != text:
        atomic_write_text(p, text)
    return p


def example_ll() -> Path:
    """The small .ll file of the ``opt`` workload (written once into the cache)."""
    return _cached_text("example.ll", EXAMPLE_LL)


def training_ll() -> Path:
    """The training module (``TRAINING_LL``), written once into the cache."""
    return _cached_text("training.ll", TRAINING_LL)


def training_small_ll() -> Path:
    """The small training module (``TRAINING_SMALL_LL``), written once into the cache."""
    return _cached_text("training-small.ll", TRAINING_SMALL_LL)


# A training corpus of small modules, one per family of code-generation features
# (llvm_corpus/*.ll, next to this file: floating point, vectors, aggregates and memcpy,
# calls and varargs, exceptions, atomics and TLS, switches and strings, and typical
# integer and pointer code: sorting, a linked list, hashing, a scanner). Compiled one by
# one, it tells code every compile runs (run by many of them) from feature-specific code
# (run by few); see docs/ordering.md, "Held-out evaluation". Never the held-out example.
CORPUS_DIR = Path(__file__).resolve().parent / "llvm_corpus"


def training_corpus() -> dict[str, Path]:
    """The corpus modules, {name: path} sorted by name, each written into the cache
    under a name carrying its content hash, so that a changed module never reuses a
    profile of the old."""
    import hashlib

    out = {}
    for src in sorted(CORPUS_DIR.glob("*.ll")):
        text = src.read_text()
        out[src.stem] = _cached_text(f"corpus-{src.stem}-{hashlib.sha256(text.encode()).hexdigest()[:12]}.ll", text)
    if not out:
        raise ElflayoutError(f"{CORPUS_DIR}: no training modules (*.ll)")
    return out


def tool(name: str, platform: Platform = X86_64) -> Path:
    """An LLVM 16 tool of package llvm-16 (``/usr/bin/NAME-16``; the arm64 root's
    ``usr/lib/llvm-16/bin/NAME``: the root has no /usr/bin links)."""
    p = Path(f"/usr/bin/{name}-16") if platform.native else platform.root() / "usr/lib/llvm-16/bin" / name
    if not p.exists():
        raise ElflayoutError(f"{p}: not installed (apt-get install llvm-16)")
    return p


def system(platform: Platform = X86_64) -> dict:
    """The shipped library and its workloads: ``dict(lib, llc, opt, workloads)``."""
    lib = platform.system_lib()
    if not lib.exists():
        raise ElflayoutError(f"{lib}: not installed (apt-get install libllvm16)")
    llc = tool("llc", platform)
    opt = tool("opt", platform) if platform.native else None  # opt is not in the arm64 root (package llvm-16)
    ll = example_ll()
    workloads = {"version": [str(llc), "--version"]}
    if opt is not None:
        workloads["opt"] = [str(opt), "-O2", str(ll), "-S", "-o", "-"]
    return dict(lib=lib, llc=llc, opt=opt, example_ll=ll, workloads=workloads)


def archives(platform: Platform = X86_64) -> list[Path]:
    """The static archives linked into the dylib, in the default (sorted) order."""
    root = (fetch_debs(DEV_PACKAGES, "llvm-16") if platform.native else
            fetch_debs(DEV_PACKAGES, f"llvm-16-{platform.deb_arch}", arch=platform.deb_arch)) / ARCHIVE_DIR
    names = sorted(p.name for p in root.glob("libLLVM*.a"))
    keep = [n for n in names if n not in EXCLUDE and not n.startswith(EXCLUDE_PREFIXES)]
    for n in EXTRA_ARCHIVES:
        if not (root / n).exists():
            raise ElflayoutError(f"{root / n}: missing (package libpolly-16-dev)")
    return [root / n for n in keep + EXTRA_ARCHIVES]


def version_script(platform: Platform = X86_64) -> Path:
    """``LLVM_16 { global: ...; local: *; };`` from the shipped library's dynsym."""
    out = cache_dir("libllvm") / ("libLLVM-16.map" if platform.native else f"libLLVM-16-{platform.deb_arch}.map")
    if out.exists():
        return out
    # Linker-defined markers (gold and GNU ld export them): no linker takes them from a
    # version script when it does not define them (lld >= 16 refuses the script).
    names = _dynsym_defined(platform.system_lib()) - LINKER_MARKERS
    if not names:
        raise ElflayoutError(f"{platform.system_lib()}: no defined dynamic symbols")
    body = "".join(f'    "{n}";\n' for n in sorted(names))
    atomic_write_text(out, f"LLVM_16 {{\n  global:\n{body}  local: *;\n}};\n")
    return out


def _dynsym_defined(path) -> set[str]:
    """Defined global/weak dynamic symbol names (nm: fast on 48k symbols)."""
    out = run(["nm", "-D", "--defined-only", path], what=f"nm -D {path}").stdout
    names = set()
    for line in out.splitlines():
        f = line.split()
        if len(f) == 3 and f[1] not in "Aa":      # "A LLVM_16": the version node itself
            names.add(f[2].split("@")[0])
    return names


# Linker-defined markers: GNU ld and gold export them, lld does not; nothing uses them.
LINKER_MARKERS = {"__bss_start", "_edata", "_end"}


def _missing_exports(lib, platform: Platform = X86_64) -> list[str]:
    """Names the shipped library exports and ``lib`` does not (sorted)."""
    return sorted(_dynsym_defined(platform.system_lib()) - _dynsym_defined(lib) - LINKER_MARKERS)


def _verify_env(libdir: Path | None) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "LD_LIBRARY_PATH"}
    if libdir is not None:
        env["LD_LIBRARY_PATH"] = str(libdir)
    return env


def verify(outdir, platform: Platform = X86_64) -> dict:
    """Run llc-16/opt-16 with the library in ``outdir`` and with the shipped one;
    raise unless every output is byte-identical. Returns {check: bytes of output}."""
    s = system(platform)
    ll = s["example_ll"]
    checks = {"llc --version": [s["llc"], "--version"], "llc -O2": [s["llc"], "-O2", ll, "-o", "-"]}
    if s["opt"] is not None:
        checks |= {"opt -O2": [s["opt"], "-O2", ll, "-S", "-o", "-"], "opt -O2 | llc": None}
    sizes = {}
    outdir = Path(outdir)
    for name, argv in checks.items():
        got = []
        for libdir in (outdir, None):
            env, pre = _verify_env(libdir if platform.native else None), platform.run_prefix(libdir)
            if argv is None:
                ir = subprocess.run([str(s["opt"]), "-O2", str(ll), "-o", "-"], env=env, capture_output=True)
                r = subprocess.run([str(s["llc"]), "-O2", "-o", "-"], input=ir.stdout, env=env, capture_output=True)
            else:
                r = subprocess.run([*pre, *map(str, argv)], env=env, capture_output=True)
            if r.returncode != 0:
                where = outdir if libdir else platform.system_lib()
                raise ElflayoutError(f"{where}: {name} failed (exit {r.returncode}): "
                                     f"{r.stderr.decode(errors='replace').strip()[-300:]}")
            got.append(r.stdout)
        if got[0] != got[1]:
            raise ElflayoutError(f"{outdir / SONAME}: {name} output differs from the shipped library's")
        sizes[name] = len(got[0])
    # The relinked library must really be the one loaded (ld.so's list: ldd's, also under qemu).
    pre = platform.run_prefix(outdir)
    r = subprocess.run(["ldd", str(s["llc"])] if not pre else [*pre, "-E", "LD_TRACE_LOADED_OBJECTS=1", str(s["llc"])],
                       env=_verify_env(outdir if not pre else None), capture_output=True, text=True)
    if str(outdir / SONAME) not in r.stdout:
        raise ElflayoutError(f"{outdir}: llc-16 does not load {SONAME} from there (ldd: {r.stdout.strip()[:200]})")
    return sizes


def link_command(linker: str, lib: Path, extra=(), archive_order=None, platform: Platform = X86_64) -> list[str]:
    """The command linking ``lib`` (with its map beside it) from the archives."""
    flags = [linker_flag(linker)] if platform.native else cross_linker_flags(linker)
    arch = archives(platform) if archive_order is None else [Path(a) for a in archive_order]
    return [platform.driver, "-shared", *flags, *LINK_FLAGS, f"-Wl,--version-script={version_script(platform)}",
            f"-Wl,-Map={lib}.map", "-o", str(lib), "-Wl,--whole-archive", *map(str, arch),
            "-Wl,--no-whole-archive", *extra, *platform.library_dirs(), *LIBS]


def relink(linker: str = "lld", extra_link_args=(), outdir=None, archive_order=None, check: bool = True,
           order_args=(), platform: Platform = X86_64) -> dict:
    """Link libLLVM-16.so.1 from the static archives with ``linker`` (lld or gold;
    bfd works but takes minutes), ``extra_link_args`` (e.g.
    ``-Wl,--symbol-ordering-file=F`` or ``-Wl,--section-ordering-file=F``) into
    ``outdir`` (default: a cache directory keyed by linker and arguments), with a
    link map (``order_args`` is a synonym appended to ``extra_link_args``; an
    ``archive_order`` list replaces the default sorted archive order), for ``platform``
    (X86_64 or ARM64). Cached and verified (``check``) once per parameters. Returns
    ``dict(lib, map, link_cmd, outdir, linker, workloads, env)``: run a workload with
    ``os.environ | env`` to load the relinked library.
    """
    if platform.native:
        linker_flag(linker)
        ensure_installed(RUNTIME_PACKAGES + TOOLS_PACKAGES)
    arch = archives(platform) if archive_order is None else [Path(a) for a in archive_order]
    extra = driver_args((*extra_link_args, *order_args))
    key = param_key(linker, args_fingerprint(extra), [a.name for a in arch])
    kind = "libllvm" if platform.native else f"libllvm-{platform.deb_arch}"
    with build_slot(kind, linker, key, outdir, outputs=(SONAME, f"{SONAME}.map")) as (out, done):
        if done:
            return _as_paths(done)
        lib = out / SONAME
        link_cmd = link_command(linker, lib, extra, arch, platform)
        run(link_cmd, what=f"link {SONAME} with {linker}")
        missing = _missing_exports(lib, platform)
        if missing:
            raise ElflayoutError(f"{lib}: {len(missing)} symbols of the shipped library are not exported "
                                 f"(e.g. {missing[0]})")
        sizes = verify(out, platform) if check else {}
        d = dict(lib=str(lib), map=f"{lib}.map", link_cmd=link_cmd, outdir=str(out), linker=linker, key=key,
                 archives=[str(a) for a in arch], env={"LD_LIBRARY_PATH": str(out)},
                 workloads={k: [str(x) for x in v] for k, v in system(platform)["workloads"].items()},
                 verified=sizes, platform=platform.name)
        save_record(out, d)
    return _as_paths(d)


def _as_paths(d: dict) -> dict:
    return record_paths(d, ("lib", "map", "outdir"))
