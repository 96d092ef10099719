"""libcrypto: OpenSSL's ``libcrypto.so.3`` relinked from Debian's ``libcrypto.a``.

libssl-dev ships the static archive (about 900 objects, built without function sections,
with perlasm assembly). We unpack its members in archive order (the baseline order) and
link ``libcrypto.so.3`` with GNU ld, gold, lld (or mold), each with a link map, with the
soname, symbol versions (OPENSSL_3.0.0 ...; taken from Debian's installed library, which
libssl.so.3 and the ``openssl`` program were linked against) and ``-z now -z nodelete``
like Debian's. Debian's ``openssl`` program loads the relinked library through
LD_LIBRARY_PATH (with Debian's libssl.so.3).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from elflayout.errors import ElflayoutError
from elflayout.fileio import atomic_write_text
from elflayout.targets import (archives, args_fingerprint, build_slot, cache_dir, ensure_installed, fetch_debs,
                               locked, param_key, record_paths, run, save_record)
from elflayout.toolchain import driver_args, linker_flag

SONAME = "libcrypto.so.3"
SYSTEM_LIB = Path("/usr/lib/x86_64-linux-gnu") / SONAME
ARCHIVE = "usr/lib/x86_64-linux-gnu/libcrypto.a"
DEV_PACKAGES = ["libssl-dev"]
RUNTIME_PACKAGES = ["openssl", "libssl3"]
OPENSSL = "/usr/bin/openssl"
# Input of the workloads: a fixed file of the installed system, 1 MiB or less is read.
INPUT = "/usr/bin/openssl"
KEY, IV = "00" * 32, "00" * 16
WORKLOADS = {"dgst": ["dgst", "-sha256", INPUT],
             "enc": ["enc", "-aes-256-cbc", "-K", KEY, "-iv", IV, "-in", INPUT, "-out", os.devnull]}
# Outputs compared with Debian's library's (verify): digests and ciphers, C and assembly code.
VERIFY = (["dgst", "-sha256"], ["dgst", "-sha512"], ["dgst", "-sha3-256"], ["dgst", "-blake2b512"], ["dgst", "-md5"],
          ["dgst", "-sm3"], ["enc", "-aes-256-cbc", "-K", KEY, "-iv", IV], ["enc", "-aes-128-ctr", "-K", KEY[:32], "-iv", IV],
          ["enc", "-chacha20", "-K", KEY, "-iv", IV], ["enc", "-camellia-256-cbc", "-K", KEY, "-iv", IV])


def archive() -> Path:
    """Debian's libcrypto.a (downloaded and unpacked once)."""
    return fetch_debs(DEV_PACKAGES, "libssl-dev") / ARCHIVE


def objects() -> list[Path]:
    """The objects of libcrypto.a, unpacked once, in archive order."""
    return archives.unpack(archive(), "libcrypto")


def split_objects() -> list[Path]:
    """The same objects after ``elflayout split``, cached per version of the splitter."""
    return archives.split(objects(), "libcrypto")


def version_script() -> Path:
    """A version script giving every symbol Debian's libcrypto.so.3 exports its version
    (OPENSSL_3.0.0, then each later version inheriting the previous); the rest local."""
    from elftools.elf.elffile import ELFFile

    out = cache_dir("libcrypto") / "libcrypto.ver"
    with locked(cache_dir("libcrypto") / ".ver.lock"):
        if out.exists():
            return out
        versions: dict[str, set] = {}
        with open(SYSTEM_LIB, "rb") as f:
            elf = ELFFile(f)
            dynsym, ver = elf.get_section_by_name(".dynsym"), elf.get_section_by_name(".gnu.version")
            vd = elf.get_section_by_name(".gnu.version_d")
            if ver is None or vd is None:
                raise ElflayoutError(f"{SYSTEM_LIB}: no symbol versions")
            names = {d["vd_ndx"]: next(aux).name for d, aux in vd.iter_versions()}
            for i, sym in enumerate(dynsym.iter_symbols()):
                ndx = ver.get_symbol(i)["ndx"]
                if sym["st_shndx"] == "SHN_UNDEF" or not sym.name or not isinstance(ndx, int):
                    continue
                v = names.get(ndx & 0x7fff)
                if v and v.startswith("OPENSSL_") and sym.name != v:  # GNU ld's version-name symbols
                    versions.setdefault(v, set()).add(sym.name)
        if not versions:
            raise ElflayoutError(f"{SYSTEM_LIB}: no OPENSSL_* symbol versions found")
        order = sorted(versions, key=lambda v: tuple(int(x) for x in v.split("_")[1].split(".")))
        text, prev = [], None
        for v in order:
            body = "".join(f"    {n};\n" for n in sorted(versions[v]))
            local = "  local: *;\n" if prev is None else ""
            text.append(f"{v} {{\n  global:\n{body}{local}}}{' ' + prev if prev else ''};\n")
            prev = v
        atomic_write_text(out, "".join(text))
    return out


def prepare(linker: str = "bfd", extra_link_args=(), object_order=None, outdir=None, split: bool = False) -> dict:
    """Link libcrypto.so.3 with ``linker``; cached by (linker, extra args, object order).
    Returns ``dict(lib, map, objects, link_cmd, env={"LD_LIBRARY_PATH": dir}, workloads,
    outdir, linker)``; run a workload as ``subprocess.run(d["workloads"]["dgst"],
    env=os.environ | d["env"])``. ``split``: the objects after ``elflayout split``."""
    flag = linker_flag(linker)
    ensure_installed(RUNTIME_PACKAGES)
    objs = archives.ordered(split_objects() if split else objects(), object_order, "libcrypto.a")
    extra = driver_args(extra_link_args)
    ver = version_script()
    key = param_key(linker, args_fingerprint(extra), [o.name for o in objs] + ([objs[0].parent.name] if split else []),
                    args_fingerprint([ver]))
    with build_slot("libcrypto", linker, key, outdir, outputs=(SONAME, f"{SONAME}.map")) as (out, done):
        if done:
            return _as_paths(done)
        lib, lmap = out / SONAME, out / f"{SONAME}.map"
        link_cmd = ["gcc", "-shared", flag, f"-Wl,-soname,{SONAME}", "-Wl,-z,relro", "-Wl,-z,now", "-Wl,-z,nodelete",
                    f"-Wl,--version-script={ver}", f"-Wl,-Map={lmap}", "-o", str(lib), *map(str, objs), *extra]
        run(link_cmd, what=f"link {SONAME} with {linker}")
        d = dict(lib=str(lib), map=str(lmap), objects=[str(o) for o in objs], link_cmd=link_cmd,
                 env={"LD_LIBRARY_PATH": str(out)}, workloads={k: [OPENSSL, *v] for k, v in WORKLOADS.items()},
                 outdir=str(out), linker=linker, key=key)
        verify(out)
        save_record(out, d)
    return _as_paths(d)


def verify(libdir) -> int:
    """Digests and ciphers of 1 MiB through ``libdir``'s libcrypto.so.3 must equal those
    through Debian's; returns how many commands were compared, raises on a difference."""
    data = Path(INPUT).read_bytes()[:1 << 20]
    env = dict(os.environ, LD_LIBRARY_PATH=str(libdir))
    for args in VERIFY:
        a = subprocess.run([OPENSSL, *args], input=data, capture_output=True, env=env)
        b = subprocess.run([OPENSSL, *args], input=data, capture_output=True)
        if a.returncode or a.stdout != b.stdout or not b.stdout:
            raise ElflayoutError(f"{libdir}/{SONAME}: openssl {' '.join(args)} differs from Debian's library "
                                 f"(exit {a.returncode}: {a.stderr.decode(errors='replace').strip()[:200]})")
    return len(VERIFY)


def system_copy() -> dict:
    """Debian's own libcrypto.so.3, copied to a private directory: measuring evicts the
    file under test, and the system's copy is mapped by other programs."""
    import shutil

    out = cache_dir("libcrypto", "system")
    lib = out / SONAME
    with locked(cache_dir("libcrypto") / ".system.lock"):
        if not lib.exists() or lib.read_bytes() != SYSTEM_LIB.read_bytes():
            shutil.copyfile(SYSTEM_LIB, lib)
    return dict(lib=lib, env={"LD_LIBRARY_PATH": str(out)},
                workloads={k: [OPENSSL, *v] for k, v in WORKLOADS.items()})


def _as_paths(d: dict) -> dict:
    return record_paths(d, ("lib", "map", "outdir"))
