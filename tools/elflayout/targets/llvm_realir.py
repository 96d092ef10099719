"""Real compiles for libLLVM-16 orders: LLVM IR that clang-16 makes from C files of real
projects, compiled by ``llc-16``.

Small hand-written modules (``llvm_corpus/``) do not run what a compile of real code
runs: an order trained on them reads a third more pages on a real compile than an order
trained on that compile. This module builds training and held-out workloads from real
code instead:

* ``source(project)``: the upstream tree of the project's Debian source package
  (``apt-get source --download-only`` with a private apt configuration: a ``deb-src``
  line for Debian's mirror, lists kept in the cache; the system's apt set-up is not
  touched, nothing is committed), unpacked once into ``~/.cache/elflayout/sources``;
* ``ir(project, file, level)``: ``clang-16 -O<level> -S -emit-llvm`` of one of its C
  files, cached by the tree, file and flags;
* ``workloads(names, ...)``: ``llc-16 -O2 FILE.ll -o /dev/null`` (the compile users run
  after clang's optimiser) of each file, as ``(name, argv)`` pairs;
* ``split(train, held_out)``: the two sets, refused when a project is in both.

The projects (``PROJECTS``) are small C code bases Debian ships as source, chosen for
what their files exercise: zlib (bit twiddling, tables), Lua (an interpreter: large
switches, many small functions), bzip2 (sorting, Huffman coding), PCRE2 (a regular
expression compiler: large functions, many structs), libsecp256k1 (x86-64 inline
assembly: the code generator's inline-asm operand and constraint handling runs only for
code that has some). Which train and which are held out
is the caller's choice (``bench/bench_heldout_real.py``; docs/ordering.md, "Training on
real compiles"). A project of one's own is a ``Project`` too.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

from elflayout.errors import ElflayoutError
from elflayout.targets import cache_dir, debsrc, locked, param_key, run

CLANG = "clang-16"
LLC = "llc-16"


@dataclass(frozen=True)
class Project:
    """A C project of a Debian source package: ``files`` (relative to its upstream tree)
    are compiled with ``cflags`` (``-I`` paths relative to the tree); ``setup``: files
    copied inside the tree before compiling (``{dest: src}``, e.g. a generic config.h)."""
    package: str
    files: tuple[str, ...]
    cflags: tuple[str, ...] = ()
    setup: dict = field(default_factory=dict)


PROJECTS = {
    "zlib": Project("zlib", ("deflate.c", "inflate.c", "trees.c", "inftrees.c")),
    "lua": Project("lua5.4", ("src/lparser.c", "src/lvm.c", "src/lcode.c", "src/ltable.c"),
                   ("-Isrc", "-DLUA_USE_LINUX", "-std=gnu99")),
    "bzip2": Project("bzip2", ("blocksort.c", "compress.c", "decompress.c", "bzlib.c")),
    "pcre2": Project("pcre2", ("src/pcre2_compile.c", "src/pcre2_match.c"),
                     ("-Isrc", "-DHAVE_CONFIG_H", "-DPCRE2_CODE_UNIT_WIDTH=8"),
                     {"src/config.h": "src/config.h.generic", "src/pcre2.h": "src/pcre2.h.generic"}),
    # other kinds of code, for training sets that cover what a compile of unseen code runs:
    # vector intrinsics and loops the vectoriser widens, rotates, floating point, parsers
    "lz4": Project("lz4", ("lib/lz4.c", "lib/lz4hc.c", "lib/lz4frame.c")),
    "xxhash": Project("xxhash", ("xxhash.c",)),
    "libdeflate": Project("libdeflate", ("lib/deflate_compress.c", "lib/deflate_decompress.c", "lib/adler32.c"),
                          ("-I.",)),
    "cjson": Project("cjson", ("cJSON.c", "cJSON_Utils.c")),
    "libpng": Project("libpng1.6", ("png.c", "pngrutil.c", "pngrtran.c"), ("-DPNG_INTEL_SSE_OPT=1",),
                      {"pnglibconf.h": "scripts/pnglibconf.h.prebuilt"}),
    "opus": Project("opus", ("celt/bands.c", "celt/celt_encoder.c", "celt/pitch.c"),
                    ("-DOPUS_BUILD", "-DUSE_ALLOCA", "-DHAVE_LRINTF", "-DHAVE_LRINT", "-Iinclude", "-Icelt",
                     "-Isilk", "-Isilk/float")),
    # single-header libraries: the header compiled as C with its implementation switched on
    "stb": Project("libstb", ("stb_vorbis.c", "stb_image.h", "stb_truetype.h"),
                   ("-x", "c", "-DSTB_IMAGE_IMPLEMENTATION", "-DSTB_TRUETYPE_IMPLEMENTATION",
                    "-DSTB_IMAGE_RESIZE_IMPLEMENTATION")),
    "libyaml": Project("libyaml", ("src/scanner.c", "src/parser.c", "src/emitter.c"),
                       ("-Iinclude", "-DYAML_VERSION_MAJOR=0", "-DYAML_VERSION_MINOR=2",
                        "-DYAML_VERSION_PATCH=5", '-DYAML_VERSION_STRING="0.2.5"')),
    "kissfft": Project("kissfft", ("kiss_fft.c", "kiss_fftr.c", "kiss_fftnd.c")),
    # GNU inline assembly: x86-64 field and scalar arithmetic with register, memory and
    # immediate operands (the library is one file; modules as Debian builds them)
    "secp256k1": Project("libsecp256k1", ("src/secp256k1.c",),
                         ("-DUSE_ASM_X86_64=1", "-DENABLE_MODULE_ECDH=1", "-DENABLE_MODULE_RECOVERY=1",
                          "-DENABLE_MODULE_EXTRAKEYS=1", "-DENABLE_MODULE_SCHNORRSIG=1")),
    # a third held-out kind: multi-precision arithmetic and ASN.1 parsing
    "mbedtls": Project("mbedtls", ("library/bignum.c", "library/x509_crt.c"), ("-Iinclude",)),
}

# The shipped split (bench/bench_heldout_real.py's default): bzip2, PCRE2 and Mbed TLS never train.
TRAINING = ("zlib", "lua", "xxhash", "libdeflate", "opus", "stb", "libpng", "lz4", "cjson", "libyaml", "kissfft",
            "secp256k1")
HELD_OUT = ("bzip2", "pcre2", "mbedtls")


def source(name: str) -> Path:
    """The unpacked upstream tree of project ``name`` (``PROJECTS``), set up for compiling."""
    proj = _project(name)
    root = cache_dir("sources", name)
    with locked(root.parent / f".{name}.lock"):
        tree = root / "tree"
        if (tree / ".unpacked").exists():
            return tree
        tarball = debsrc.tarball(proj.package)
        shutil.rmtree(tree, ignore_errors=True)
        tree.mkdir(parents=True)
        run(["tar", "-xf", tarball, "-C", tree, "--strip-components=1"], what=f"tar -xf {tarball.name}")
        for dest, src in proj.setup.items():
            shutil.copyfile(tree / src, tree / dest)
        (tree / ".unpacked").write_text(tarball.name + "\n")
        return tree


def _project(name: str) -> Project:
    if name not in PROJECTS:
        raise ElflayoutError(f"unknown project {name!r} (known: {', '.join(sorted(PROJECTS))})")
    return PROJECTS[name]


def ir(name: str, file: str, level: str = "2") -> Path:
    """``clang-16 -O<level> -S -emit-llvm`` of ``file`` of project ``name`` (cached)."""
    proj = _project(name)
    if file not in proj.files:
        raise ElflayoutError(f"{name}: no file {file!r} (has {', '.join(proj.files)})")
    tree = source(name)
    flags = [f"-O{level}", *proj.cflags]
    out = cache_dir("sources", name, "ir") / f"{Path(file).stem}-O{level}-{param_key(tree.name, file, flags)}.ll"
    if not out.exists():
        tmp = out.with_suffix(".tmp.ll")
        # -fno-discard-value-names: none; the module name is the file's relative path, so
        # the IR (and the compile) does not depend on where the cache is.
        run([CLANG, "-S", "-emit-llvm", *flags, "-o", tmp, file], cwd=tree, what=f"{CLANG} -O{level} {name}/{file}")
        tmp.replace(out)
    return out


def workload_name(name: str, file: str, level: str = "2", llc_level: str = "2") -> str:
    return f"llc -O{llc_level} {name}/{Path(file).name} (clang -O{level})"


def workloads(names, levels=("2",), llc_levels=("2",)) -> list[tuple[str, list[str]]]:
    """``(name, argv)`` of ``llc-16 -O<l> FILE.ll -o /dev/null`` for every file of the
    projects ``names``, IR at each clang level of ``levels``."""
    llc = shutil.which(LLC)
    if not llc:
        raise ElflayoutError(f"{LLC}: not installed (apt-get install llvm-16)")
    out = []
    for name in names:
        for file in _project(name).files:
            for lv in levels:
                ll = ir(name, file, lv)
                out += [(workload_name(name, file, lv, ll_lv), [llc, f"-O{ll_lv}", str(ll), "-o", "/dev/null"])
                        for ll_lv in llc_levels]
    return out


def split(train, held_out) -> tuple[list[str], list[str]]:
    """(training projects, held-out projects), refused unless disjoint and known."""
    train, held_out = list(train), list(held_out)
    for n in train + held_out:
        _project(n)
    both = sorted(set(train) & set(held_out))
    if both:
        raise ElflayoutError(f"project {both[0]!r} both trains and is held out: held-out code must be unseen")
    if not train or not held_out:
        raise ElflayoutError("need at least one training and one held-out project")
    return train, held_out
