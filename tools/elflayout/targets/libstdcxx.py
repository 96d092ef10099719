"""libstdcxx: ``libstdc++.so.6`` relinked from Debian's ``libstdc++_pic.a``.

Debian's libstdc++-12-pic ships the PIC archive (178 objects, built with
-ffunction-sections: mostly ``.text._Z...`` sections, many in COMDAT groups, plus a
plain ``.text``, ``.text.unlikely`` and ``.text.startup`` per object) and the version
script of the shared library. We link ``libstdc++.so.6`` from the whole archive with
GNU ld, gold or lld (link map, soname and versions as Debian's), and a C++ workload
program ``cxxstart`` (iostream, locale, regex, stringstream, exceptions, filesystem)
with RUNPATH ``$ORIGIN`` so that it loads the relink.

The archive lacks the objects of libstdc++'s ``compatibility*.cc``; of what they
define, the library's own code calls only the two ``istream::ignore(streamsize)``
overloads (GLIBCXX_3.4.5), so a small object defines those (``COMPAT_C``), and the
relink loads with LD_BIND_NOW as well.

Two set-ups (``setup``): ``nodefaultlibs``, the above (gcc adds the crt files);
``nostdlib-pic``, as a new user links it, the way libstdc++'s own build does: ``g++
-shared -nostdlib`` with the crt files named (``crti.o crtbeginS.o`` … ``crtendS.o
crtn.o``), the archive, the version script and the C libraries, no compat object (so
only lazy binding loads it), and its own workload ``cxxwords`` (``<regex>``,
``<locale>``, ``<sstream>``, ``<map>``).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from elflayout import split as split_pkg
from elflayout.errors import ElflayoutError
from elflayout.split.api import split_inputs
from elflayout.targets import (args_fingerprint, build_slot, cache_dir, fetch_debs, locked, param_key, record_paths,
                               run, save_record)
from elflayout.toolchain import driver_args, linker_flag

SONAME = "libstdc++.so.6"
PACKAGES = ["libstdc++-12-pic"]
ARCHIVE = "usr/lib/gcc/x86_64-linux-gnu/12/libstdc++_pic.a"
VERSION_SCRIPT = "usr/lib/gcc/x86_64-linux-gnu/12/libstdc++_pic.map"
LIBS = ["-lm", "-lc", "-lgcc_s", "-lgcc"]
PROGRAM = "cxxstart"
EXPECTED = "3.141592654 ff caught 3 0 std::map 3 22 words 9 8 1\ndone\n"
COMPAT_C = """/* istream::ignore(streamsize) overloads (GLIBCXX_3.4.5) of libstdc++'s compatibility.cc,
   which libstdc++_pic.a lacks; istream.o calls them. */
extern void *_ZNSi6ignoreEli(void *, long, int);
extern void *_ZNSt13basic_istreamIwSt11char_traitsIwEE6ignoreElj(void *, long, unsigned);
void *_ZNSi6ignoreEl(void *s, long n) { return _ZNSi6ignoreEli(s, n, -1); }
void *_ZNSt13basic_istreamIwSt11char_traitsIwEE6ignoreEl(void *s, long n)
{
    return _ZNSt13basic_istreamIwSt11char_traitsIwEE6ignoreElj(s, n, 0xffffffffu);
}
"""
PROGRAM_CC = r"""// elflayout workload: a C++ program whose startup is mostly libstdc++
#include <cxxabi.h>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <locale>
#include <map>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <typeinfo>

int main(int argc, char **argv) {
  std::locale::global(std::locale("C.UTF-8"));
  std::cout.imbue(std::locale());
  std::regex kv("([a-z_]+)=([0-9]+)");
  std::map<std::string, long> m;
  std::string text = "alpha=1 beta=22 gamma_ray=333";
  for (std::sregex_iterator it(text.begin(), text.end(), kv), end; it != end; ++it)
    m[(*it)[1].str()] = std::stol((*it)[2].str());
  std::ostringstream os;
  os << std::setprecision(10) << 3.14159265358979 << ' ' << std::hex << 255 << std::dec;
  std::istringstream is("1.5 2.25 words");
  double a = 0, b = 0;
  std::string w;
  is >> a >> b >> w;
  std::wostringstream wos;
  wos << L"wide " << a + b;
  try {
    throw std::runtime_error("caught");
  } catch (const std::exception &e) {
    os << ' ' << e.what();
  }
  // exceptions thrown inside the library (their throw paths are .cold code) and a
  // demangled type name (cp-demangle.o: plain .text)
  int failures = 0;
  try { (void)std::stoi("not a number"); } catch (const std::invalid_argument &) { ++failures; }
  try { (void)std::string("abc").at(10); } catch (const std::out_of_range &) { ++failures; }
  try { std::locale bad("no_such_locale.UTF-8"); } catch (const std::runtime_error &) { ++failures; }
  int status = -1;
  char *demangled = abi::__cxa_demangle(typeid(m).name(), nullptr, nullptr, &status);
  os << ' ' << failures << ' ' << status << ' ' << (demangled ? std::string(demangled).substr(0, 8) : "?");
  std::free(demangled);
  std::ifstream self("/proc/self/comm");
  std::string comm;
  std::getline(self, comm);
  std::filesystem::path p = std::filesystem::path(argv[0]).filename();
  std::cout << os.str() << ' ' << m.size() << ' ' << m["beta"] << ' ' << w << ' ' << wos.str().size() << ' '
            << p.string().size() << ' ' << std::to_string(argc) << std::endl;
  std::wcout << L"done" << std::endl;
  return 0;
}
"""


NEWUSER = "cxxwords"
NEWUSER_EXPECTED = "brown=1 dog=1 end=1 fox=1 jumps=1 lazy=1 over=1 quick=1 the=3 45.5\n"
NEWUSER_CC = r"""// elflayout workload: a new user's C++ program (regex, locale, sstream, map)
#include <iostream>
#include <locale>
#include <map>
#include <regex>
#include <sstream>
#include <string>
int main() {
  std::locale::global(std::locale("C.UTF-8"));
  std::map<std::string, int> counts;
  std::regex word("[A-Za-z]+");
  std::string text = "the quick brown fox jumps over the lazy dog the end";
  for (std::sregex_iterator it(text.begin(), text.end(), word), e; it != e; ++it) ++counts[it->str()];
  std::ostringstream os;
  os.imbue(std::locale());
  for (auto &kv : counts) os << kv.first << '=' << kv.second << ' ';
  std::istringstream is("42 3.5");
  int i; double d; is >> i >> d;
  std::cout << os.str() << i + d << std::endl;
}
"""
SETUPS = ("nodefaultlibs", "nostdlib-pic")
# the crt files a -nostdlib shared link names itself, around the other inputs
CRT_BEFORE, CRT_AFTER = ("crti.o", "crtbeginS.o"), ("crtendS.o", "crtn.o")


def archive() -> Path:
    return fetch_debs(PACKAGES, "libstdc++-12-pic") / ARCHIVE


def version_script() -> Path:
    return fetch_debs(PACKAGES, "libstdc++-12-pic") / VERSION_SCRIPT


def split_archive() -> Path:
    """The archive after ``elflayout split``, cached per version of the splitter's code."""
    src = archive()
    code = hashlib.sha256(b"".join(p.read_bytes() for p in sorted(Path(split_pkg.__file__).parent.glob("*.py"))))
    dest = cache_dir("libstdcxx", f"split-{code.hexdigest()[:12]}")
    with locked(cache_dir("libstdcxx") / ".split.lock"):
        if not (dest / ".done").exists():
            split_inputs([src], dest, force=True)
            (dest / ".done").write_text("")
    return dest / src.name


def _built_sources() -> tuple[Path, Path]:
    """The compat object and the workload's object file, compiled once."""
    d = cache_dir("libstdcxx", "src-" + param_key(COMPAT_C, PROGRAM_CC))
    with locked(cache_dir("libstdcxx") / ".src.lock"):
        compat, prog = d / "compat.o", d / f"{PROGRAM}.o"
        if not prog.exists():
            (d / "compat.c").write_text(COMPAT_C)
            (d / f"{PROGRAM}.cc").write_text(PROGRAM_CC)
            run(["gcc", "-O2", "-fPIC", "-c", d / "compat.c", "-o", compat], what="compile compat.c")
            run(["g++", "-O2", "-std=c++17", "-c", d / f"{PROGRAM}.cc", "-o", d / f"{PROGRAM}.tmp.o"],
                what=f"compile {PROGRAM}.cc")
            (d / f"{PROGRAM}.tmp.o").rename(prog)
    return compat, prog


def _newuser_object() -> Path:
    """The new user's workload object, compiled once."""
    d = cache_dir("libstdcxx", "src-" + param_key(NEWUSER_CC))
    with locked(cache_dir("libstdcxx") / ".src.lock"):
        prog = d / f"{NEWUSER}.o"
        if not prog.exists():
            (d / f"{NEWUSER}.cc").write_text(NEWUSER_CC)
            run(["g++", "-O2", "-c", d / f"{NEWUSER}.cc", "-o", d / f"{NEWUSER}.tmp.o"], what=f"compile {NEWUSER}.cc")
            (d / f"{NEWUSER}.tmp.o").rename(prog)
    return prog


def crt_file(name: str) -> str:
    """Where gcc keeps a crt file (``gcc -print-file-name``)."""
    path = run(["gcc", f"-print-file-name={name}"], what=f"gcc -print-file-name={name}").stdout.strip()
    if "/" not in path:
        raise ElflayoutError(f"{name}: gcc does not know where it is (install libgcc-12-dev and libc6-dev)")
    return path


def nostdlib_command(linker: str, out: Path, extra=(), split: bool = False) -> list[str]:
    """``g++ -shared -nostdlib`` as libstdc++'s own build links it: crt files named,
    no compat object."""
    a = split_archive() if split else archive()
    return ["g++", "-shared", "-nostdlib", linker_flag(linker), *map(crt_file, CRT_BEFORE),
            "-Wl,--whole-archive", str(a), "-Wl,--no-whole-archive", f"-Wl,--version-script={version_script()}",
            f"-Wl,-soname,{SONAME}", f"-Wl,-Map={out / (SONAME + '.map')}", "-o", str(out / SONAME),
            *driver_args(extra), *LIBS, *map(crt_file, CRT_AFTER)]


def link_command(linker: str, out: Path, extra=(), split: bool = False, setup: str = "nodefaultlibs") -> list[str]:
    """The command linking ``out``/libstdc++.so.6 from the whole archive (and its map)
    in ``setup`` (``SETUPS``)."""
    if setup not in SETUPS:
        raise ElflayoutError(f"libstdcxx: unknown set-up {setup!r} (choose from {', '.join(SETUPS)})")
    if setup == "nostdlib-pic":
        return nostdlib_command(linker, out, extra, split)
    compat, _prog = _built_sources()
    a = split_archive() if split else archive()
    return ["gcc", "-shared", "-nodefaultlibs", linker_flag(linker), f"-Wl,-soname,{SONAME}", "-Wl,-z,relro",
            f"-Wl,--version-script={version_script()}", f"-Wl,-Map={out / (SONAME + '.map')}",
            "-o", str(out / SONAME), "-Wl,--whole-archive", str(a), "-Wl,--no-whole-archive", str(compat),
            *driver_args(extra), *LIBS]


def prepare(linker: str = "lld", extra_link_args=(), outdir=None, split: bool = False,
            setup: str = "nodefaultlibs") -> dict:
    """Link libstdc++.so.6 and its workload program (``cxxstart``; ``cxxwords`` in the
    nostdlib-pic set-up) with ``linker``; cached by (linker, extra args, split, set-up).
    Returns ``dict(lib, map, launcher, link_cmd, env, workloads={"start": argv}, outdir,
    linker, key, setup)``."""
    linker_flag(linker)
    extra = list(extra_link_args)
    newuser = setup == "nostdlib-pic"
    key = param_key("libstdcxx-1", param_key(COMPAT_C, PROGRAM_CC), linker, args_fingerprint(driver_args(extra)), split,
                    split_archive().parent.name if split else "", *([setup, param_key(NEWUSER_CC)] if newuser else []))
    program = NEWUSER if newuser else PROGRAM
    with build_slot("libstdcxx", linker, key, outdir, outputs=(SONAME, f"{SONAME}.map", program)) as (out, done):
        if done:
            return _as_paths(done)
        cmd = link_command(linker, out, extra, split, setup)
        run(cmd, what=f"link {SONAME} with {linker}")
        prog = _newuser_object() if newuser else _built_sources()[1]
        exe = out / program
        run(["g++", "-o", exe, prog, "-Wl,-rpath,$ORIGIN"], what=f"link {program}")
        # without the compat object, binding every symbol at load fails (as the new user's)
        for env in ({},) if newuser else ({}, {"LD_BIND_NOW": "1"}):
            r = run([exe], env={"PATH": "/usr/bin:/bin", **env}, what=f"{exe} self-check")
            want = NEWUSER_EXPECTED if newuser else EXPECTED
            if r.stdout != want:
                raise ElflayoutError(f"{exe}: unexpected output {r.stdout!r} (wanted {want!r})")
        d = dict(lib=str(out / SONAME), map=str(out / f"{SONAME}.map"), launcher=str(exe), link_cmd=cmd, env={},
                 workloads={"start": [str(exe)]}, outdir=str(out), linker=linker, key=key, setup=setup)
        save_record(out, d)
    return _as_paths(d)


def _as_paths(d: dict) -> dict:
    return record_paths(d, ("lib", "map", "launcher", "outdir"))

