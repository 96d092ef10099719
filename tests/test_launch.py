"""``elflayout launch``, the linker launcher: other commands and links pass through
untouched, a target link is profiled once per build (or reuses the cached profile of
the same build-id) and relinked ordered; a profile of another build is refused. The
real builds: Debian's libzstd with its CMake build, Debian's fribidi with Meson."""

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import order_testlib
from conftest import ROOT, need_tool, run_cli

LAUNCH = [sys.executable, "-m", "elflayout", "launch"]
ENV = {**os.environ, "PYTHONPATH": str(ROOT / "tools") + os.pathsep + os.environ.get("PYTHONPATH", "")}


def _launch(*args, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([*LAUNCH, *map(str, args)], capture_output=True, text=True, env=ENV, cwd=cwd)


def _in_order(lib, profile, target=None) -> float:
    r = run_cli("check-order", "--json", "--profile", profile, "--target", target or Path(lib).name, lib, check=0)
    return json.loads(r.stdout)["in_order_fraction"]


@pytest.fixture(scope="module")
def synth(tmp_path_factory):
    """The synthetic library, its link command and its ground-truth profile."""
    d = order_testlib.build_profiled(tmp_path_factory.mktemp("synth"))
    d["link_cmd"] = [str(a) for a in d["link_cmd"]]
    return d


def _link_to(synth, lib: Path) -> list[str]:
    """The synthetic library's link command writing ``lib`` (no map)."""
    return [str(lib) if a == str(synth["lib"]) else a for a in synth["link_cmd"] if "-Map" not in a]


def _cache_with(tmp_path, synth) -> Path:
    cache = tmp_path / "cache"
    cache.mkdir()
    shutil.copy(synth["profile"], cache / "libsynth.so.profile.json")
    return cache


def test_unrelated_commands_pass_through_silently(tmp_path, synth):
    (tmp_path / "main.c").write_text("int main(void) { return 7; }\n")
    r = _launch("--target", "libsynth.so", "--", "gcc", "-c", "-o", tmp_path / "main.o", tmp_path / "main.c")
    assert r.returncode == 0 and r.stderr == ""
    r = _launch("--target", "libsynth.so", "gcc", "-o", tmp_path / "prog", tmp_path / "main.o")
    assert r.returncode == 0 and r.stderr == ""
    assert subprocess.run([tmp_path / "prog"]).returncode == 7
    r = _launch("--cache-dir", tmp_path / "none", "--", "gcc", "--version")  # no --target: only -shared links
    assert r.returncode == 0 and r.stderr == "" and "gcc" in r.stdout
    # a failing link keeps its status
    r = _launch("--target", "prog", "--", "gcc", "-o", tmp_path / "prog", tmp_path / "missing.o")
    assert r.returncode == 1 and "elflayout" not in r.stderr


def test_target_link_not_understood_says_so_once(tmp_path, synth):
    objs = [o for o in synth["link_cmd"] if o.endswith(".o")][:2]
    r = _launch("--target", "part.o", "--", "gcc", "-r", "-o", tmp_path / "part.o", *objs)
    assert r.returncode == 0, r.stderr
    assert r.stderr.count("\n") == 1 and "linked unchanged" in r.stderr and "relocatable" in r.stderr
    subprocess.run(["gcc", "-r", "-o", tmp_path / "plain.o", *objs], check=True)
    assert (tmp_path / "part.o").read_bytes() == (tmp_path / "plain.o").read_bytes()
    r = _launch("--strict", "--target", "part.o", "--", "gcc", "-r", "-o", tmp_path / "part.o", *objs)
    assert r.returncode == 1


def test_no_profile_and_no_workload_links_unchanged(tmp_path, synth):
    lib = tmp_path / "libsynth.so"
    cmd = _link_to(synth, lib)
    r = _launch("--cache-dir", tmp_path / "cache", "--", *cmd)
    assert r.returncode == 0 and r.stderr.count("\n") == 1 and "no --profile-cmd" in r.stderr
    assert lib.read_bytes() == Path(synth["lib"]).read_bytes()


def test_cached_profile_of_the_same_build_is_reused(tmp_path, synth):
    cache = _cache_with(tmp_path, synth)
    lib = Path(synth["lib"])
    assert _in_order(lib, synth["profile"]) < 0.9
    r = _launch("--cache-dir", cache, "--target", "libsynth.so", "--profile-cmd", "false", "--", *synth["link_cmd"])
    assert r.returncode == 0, r.stderr
    assert "reusing" in r.stderr and "profiling" not in r.stderr
    assert _in_order(lib, synth["profile"]) == 1.0
    assert subprocess.run([synth["driver"]], capture_output=True, text=True).returncode == 0
    subprocess.run(synth["link_cmd"], check=True)  # back to the unordered build for the other tests


def test_profile_of_another_build_is_refused(tmp_path, synth):
    cache = _cache_with(tmp_path, synth)
    entry = tmp_path / "entry.c"
    entry.write_text(Path(synth["lib"]).with_name("entry.c").read_text().replace("s += ", "s -= "))
    subprocess.run(["gcc", *order_testlib.CFLAGS, "-c", entry, "-o", tmp_path / "entry.o"], check=True)
    lib = tmp_path / "libsynth.so"
    cmd = [str(tmp_path / "entry.o") if a.endswith("/entry.o") else a for a in _link_to(synth, lib)]
    r = _launch("--cache-dir", cache, "--", *cmd)
    assert r.returncode == 2 and r.stderr.count("\n") == 1
    built = json.loads((cache / "libsynth.so.profile.json").read_text())["targets"][0]["build_id"]
    assert built in r.stderr and "--allow-stale-profile" in r.stderr
    assert not lib.exists()  # the build must not take a refused link as done
    r = _launch("--cache-dir", cache, "--allow-stale-profile", "--", *cmd)
    assert r.returncode == 0, r.stderr
    assert _in_order(lib, cache / "libsynth.so.profile.json") == 1.0


@pytest.mark.valgrind
def test_profiles_once_then_reuses(tmp_path, synth):
    cache = tmp_path / "cache"
    lib = tmp_path / "libsynth.so"
    cmd = _link_to(synth, lib)
    # the driver loads libsynth.so from the launcher's LD_LIBRARY_PATH, not its own run path
    r = _launch("--cache-dir", cache, "--profile-cmd", synth["driver"], "--", *cmd)
    assert r.returncode == 0, r.stderr
    assert "profiling with" in r.stderr and "profile kept" in r.stderr
    profile = cache / "libsynth.so.profile.json"
    assert json.loads(profile.read_text())["targets"][0]["path"] == str(lib)
    assert _in_order(lib, profile) == 1.0
    lib.unlink()
    r = _launch("--cache-dir", cache, "--profile-cmd", synth["driver"], "--", *cmd)
    assert r.returncode == 0 and "reusing" in r.stderr and "profiling" not in r.stderr


# -- real builds -------------------------------------------------------------------------

FRIBIDI_DRIVER = r"""#include <stdio.h>
#include <string.h>
typedef unsigned int FriBidiChar; typedef int FriBidiStrIndex; typedef unsigned int FriBidiParType;
typedef signed char FriBidiLevel;
FriBidiStrIndex fribidi_charset_to_unicode(int, const char *, FriBidiStrIndex, FriBidiChar *);
FriBidiStrIndex fribidi_unicode_to_charset(int, const FriBidiChar *, FriBidiStrIndex, char *);
FriBidiLevel fribidi_log2vis(const FriBidiChar *, FriBidiStrIndex, FriBidiParType *, FriBidiChar *,
                             FriBidiStrIndex *, FriBidiStrIndex *, FriBidiLevel *);
int main(void) {
    const char *in = "abc \xd7\xa9\xd7\x9c\xd7\x95\xd7\x9d 123 def";  /* Latin and Hebrew */
    FriBidiChar u[128], v[128]; char out[512]; FriBidiParType dir = 0x40;  /* FRIBIDI_PAR_ON */
    FriBidiStrIndex n = fribidi_charset_to_unicode(1 /* UTF-8 */, in, strlen(in), u);
    if (!fribidi_log2vis(u, n, &dir, v, NULL, NULL, NULL)) return 1;
    fribidi_unicode_to_charset(1, v, n, out);
    printf("%s\n", out);
    return 0;
}
"""


def _driver(tmp_path, source: str, system_lib: str, include=None) -> Path:
    """A workload linked against the system's copy of the library: the launcher's
    LD_LIBRARY_PATH makes it load the build's."""
    c, exe = tmp_path / "driver.c", tmp_path / "driver"
    c.write_text(source)
    subprocess.run(["gcc", "-O2", *([f"-I{include}"] if include else []), "-o", exe, c, system_lib], check=True)
    return exe


def _ninja(build: Path, env) -> str:
    r = subprocess.run(["ninja", "-C", build], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return r.stdout + r.stderr


def _check_real_build(build: Path, out: str, cache: Path, launcher: list[str], env) -> None:
    """The first build profiled and ordered ``out``, better than its plain link (the
    build's own command, from ``ninja -t commands``); a second link reuses the profile."""
    profile = cache / f"{Path(out).name}.profile.json"
    assert profile.exists()
    last = subprocess.run(["ninja", "-C", build, "-t", "commands", out], capture_output=True, text=True,
                          check=True).stdout.splitlines()[-1]
    words = shlex.split(last.removeprefix(": && ").removesuffix(" && :"))
    assert words[:len(launcher)] == launcher, last
    cmd = words[len(launcher):]
    plain = build / "plain.so"
    subprocess.run([str(plain) if w == out else w for w in cmd[cmd[:1] == ["--"]:]], cwd=build, check=True)
    assert _in_order(build / out, profile) >= 0.95 > _in_order(plain, profile, Path(out).name)
    (build / out).unlink()
    log = _ninja(build, env)
    assert "reusing" in log and "profiling with" not in log, log[-3000:]
    assert _in_order(build / out, profile) >= 0.95


@pytest.mark.download
@pytest.mark.slow
@pytest.mark.valgrind
def test_cmake_build_of_libzstd(tmp_path):
    import zstd_testlib

    need_tool("cmake")
    need_tool("ninja")
    src = zstd_testlib.source()
    cache = tmp_path / "cache"
    driver = _driver(tmp_path, zstd_testlib.DRIVER_C, "/usr/lib/x86_64-linux-gnu/libzstd.so.1", src / "lib")
    launcher = [*LAUNCH, "--cache-dir", str(cache), "--target", "libzstd.so", "--profile-cmd", str(driver),
                "--link-options=--split"]
    build = tmp_path / "build"
    # the one variable; the rest makes the test build quick
    subprocess.run(["cmake", "-G", "Ninja", "-S", src / "build" / "cmake", "-B", build,
                    "-DCMAKE_C_LINKER_LAUNCHER=" + ";".join(launcher),
                    "-DCMAKE_BUILD_TYPE=Release", "-DCMAKE_C_FLAGS_RELEASE=-O1", "-DZSTD_LEGACY_SUPPORT=OFF",
                    "-DZSTD_BUILD_PROGRAMS=OFF", "-DZSTD_BUILD_STATIC=OFF", "-DZSTD_BUILD_TESTS=OFF"],
                   check=True, capture_output=True, env=ENV)
    log = _ninja(build, ENV)
    assert "profiling with" in log and "profile kept" in log, log[-3000:]
    out = next(p for p in (build / "lib").glob("libzstd.so.*.*")).relative_to(build)
    _check_real_build(build, str(out), cache, launcher, ENV)
    env = {**os.environ, "LD_LIBRARY_PATH": str(build / "lib")}
    assert subprocess.run([driver], env=env, capture_output=True, text=True).stdout.startswith("1.5")


@pytest.mark.download
@pytest.mark.slow
@pytest.mark.valgrind
def test_meson_build_of_fribidi(tmp_path):
    import debsrc_testlib

    need_tool("meson")
    need_tool("ninja")
    src = debsrc_testlib.source("fribidi", "fribidi-*", "meson.build")
    cache = tmp_path / "cache"
    driver = _driver(tmp_path, FRIBIDI_DRIVER, "/usr/lib/x86_64-linux-gnu/libfribidi.so.0")
    launcher = [*LAUNCH, "--cache-dir", str(cache), "--target", "libfribidi.so", "--profile-cmd", str(driver),
                "--link-options=--split"]
    # Meson has no linker launcher: the launcher goes in front of the compiler
    env = {**ENV, "CC": shlex.join([*launcher, "--", "cc"])}
    build = tmp_path / "build"
    subprocess.run(["meson", "setup", build, src, "-Ddocs=false", "-Dbuildtype=release"], check=True,
                   capture_output=True, env=env)
    log = _ninja(build, env)
    assert "profiling with" in log and "profile kept" in log, log[-3000:]
    assert log.count("elflayout: launch:") == 2  # the build's other links (programs, tests) pass silently
    _check_real_build(build, "lib/libfribidi.so.0.4.0", cache, launcher, env)
    r = subprocess.run([build / "bin" / "fribidi", "--charset", "CapRTL"], input="abc ABC\n", capture_output=True,
                       text=True, env={**os.environ, "LD_LIBRARY_PATH": str(build / "lib")})
    assert r.stdout.strip() == "abc CBA"


def test_which_commands_are_target_links():
    from elflayout.order import launch

    assert launch.link_output(["cc", "-c", "-o", "a.o", "a.c"]) is None
    assert launch.link_output(["cc", "-Wl,--version"]) is None
    assert launch.link_output(["cc", "-print-prog-name=ld"]) is None
    assert launch.link_output(["cc", "-shared", "-olibz.so.1.3", "a.o"]) == "libz.so.1.3"
    cmd = ["cc", "-shared", "-o", "lib/libz.so.1.3", "a.o"]
    assert launch.is_target(cmd, "lib/libz.so.1.3", ["libz.so"]) and launch.is_target(cmd, "lib/libz.so.1.3", None)
    assert not launch.is_target(cmd, "lib/libz.so.1.3", ["libzz.so", "libz.s"])
    assert not launch.is_target(["cc", "-o", "prog", "a.o"], "prog", None)
    assert launch.workload(["{output}", "--version"], "bin/tool") == [os.path.abspath("bin/tool"), "--version"]


# -- the link map ------------------------------------------------------------------------

ASM_LOOP = """\t.text
\t.globl asm_sum
asm_sum:\t\t/* NOTYPE, no .size: as huf_decompress_amd64.S's loops */
\txorl %eax, %eax
1:\taddl %edi, %eax
\tdecl %edi
\tjg 1b
\tret
\t.section .note.GNU-stack,"",@progbits
"""


def _asm_lib(tmp_path) -> tuple[list[str], Path, Path]:
    """A library whose hot code is an assembler loop without .size (the link command
    writing it, the library, a workload loading it)."""
    (tmp_path / "loop.S").write_text(ASM_LOOP)
    (tmp_path / "lib.c").write_text("int asm_sum(int);\nint cold(int n) { return n * 3; }\n"
                                    "int entry(int n) { return asm_sum(n) + 1; }\n")
    (tmp_path / "main.c").write_text('#include <stdio.h>\nint entry(int);\n'
                                     'int main(void) { printf("%d\\n", entry(10)); return 0; }\n')
    for src in ("loop.S", "lib.c"):
        subprocess.run(["gcc", "-O1", "-fPIC", "-c", tmp_path / src, "-o", tmp_path / (src[:-2] + ".o")], check=True)
    lib = tmp_path / "libasm.so"
    cmd = ["gcc", "-shared", "-Wl,--build-id", "-Wl,-soname,libasm.so", "-o", str(lib),
           str(tmp_path / "lib.o"), str(tmp_path / "loop.o")]
    subprocess.run(cmd, check=True)
    exe = tmp_path / "main"
    subprocess.run(["gcc", "-o", exe, tmp_path / "main.c", lib], check=True)
    return cmd, lib, exe


@pytest.mark.parametrize("linker", ["bfd", "lld"])
def test_map_option_changes_no_byte(tmp_path, linker):
    from elflayout.order import launch

    cmd, lib, _ = _asm_lib(tmp_path)
    driver = [*cmd[:1], f"-fuse-ld={linker}", *cmd[1:]]
    ld = {"bfd": "ld.bfd", "lld": "ld.lld"}[linker]
    direct = [ld, "-shared", "--build-id", "-soname", "libasm.so", "-o", str(lib), *cmd[-2:]]
    for c in (driver, direct):
        subprocess.run(c, check=True)
        plain = lib.read_bytes()
        mapped = launch.with_map(c, tmp_path / "x.map")
        assert mapped is not None and mapped[:-1] == c
        subprocess.run(mapped, check=True)
        assert (tmp_path / "x.map").stat().st_size > 0 and lib.read_bytes() == plain
        (tmp_path / "x.map").unlink()
    assert launch.with_map(["mylinker", "-shared", "-o", "x.so", "a.o"], tmp_path / "x.map") is None
    assert launch.with_map(["gcc", "-fuse-ld=mold", "-shared", "-o", "x.so", "a.o"], tmp_path / "x.map") is None


@pytest.mark.valgrind
def test_profile_has_the_link_map_and_code_without_size(tmp_path):
    cmd, lib, exe = _asm_lib(tmp_path)
    cache = tmp_path / "cache"
    r = _launch("--cache-dir", cache, "--target", "libasm.so", "--profile-cmd", exe, "--", *cmd)
    assert r.returncode == 0, r.stderr
    t = json.loads((cache / "libasm.so.profile.json").read_text())["targets"][0]
    assert t["map"] == str(cache / "libasm.so.map") and Path(t["map"]).exists()
    assert not list(cache.glob(".*"))  # no temporary map left behind
    # the loop (no sized symbol) and crtbeginS.o's code are in the profile as input sections
    hot = {(Path(s["object"]).name, s["name"]) for s in t["sections"]}
    assert ("loop.o", ".text") in hot and ("crtbeginS.o", ".text") in hot
    env = {**os.environ, "LD_LIBRARY_PATH": str(tmp_path)}
    assert subprocess.run([exe], capture_output=True, text=True, env=env).stdout == "56\n"  # the ordered build
