"""``elflayout launch``: a linker launcher for build systems: run the build's link, then
profile the output once (or reuse the profile of the same build) and relink it ordered
through ``elflayout link``, with link's own defaults."""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from elflayout.errors import ElflayoutError, Finding, one_line
from elflayout.order import launch

SUMMARY = "linker launcher for CMake, Meson and make: profile a build's library once, relink it ordered"
EPILOG = """\
examples:
  # CMake (3.21+): one variable; the workload loads the just-linked libzstd.so.1
  cmake -G Ninja -DCMAKE_C_LINKER_LAUNCHER='elflayout;launch;--target;libzstd.so;--profile-cmd;./zstd-check' ..
  # Meson has no linker launcher: put the launcher in front of the compiler (it passes
  # compiles through untouched, as ccache-style wrappers do)
  CC="elflayout launch --target libfribidi.so --profile-cmd 'fribidi-check' -- cc" meson setup build
  # make: the same in front of the compiler, or of ld for a Makefile that runs it
  make CC="elflayout launch --target libz.so --profile-cmd 'zcheck' -- gcc"
  make LD="elflayout launch --target libz.so --profile-cmd 'zcheck' -- ld"
  # an executable: {output} is its own path
  elflayout launch --target tool --profile-cmd '{output} --version' -- cc -o tool main.o util.o

How it works. The link runs unchanged first. A link of a target (--target, else any
-shared link) is then profiled: the profile command runs once under 'elflayout
profile' with the new library first on LD_LIBRARY_PATH (under its SONAME, so a
program of the system or an earlier build loads it). The profile is kept in the cache
(--cache-dir, $ELFLAYOUT_LAUNCH_CACHE, default ~/.cache/elflayout/launch) as
NAME.profile.json, NAME the output's file name. When a profile may be recorded, the
first link also writes its link map there (NAME.map: -Wl,-Map= for a gcc or clang
driver, -Map= for ld.bfd, ld.gold, ld.lld; no byte of the output changes) and the
profile reads it (--map), so code outside sized symbols (crtbeginS.o, assembler
without .size) is ordered too. The link is then run again through
'elflayout link' with that profile, which orders it and checks the result.

A later build whose first link has the same build-id (a rebuild of the same sources
in the same directory) reuses the profile without running the workload. A build
whose build-id differs is profiled again; without --profile-cmd its stale profile is
refused, naming both build-ids (exit 2, the output removed) unless --allow-stale-profile.

The chicken and the egg: a profile needs a linked binary, and the workload must run
when the build links it, before the rest of the build exists. So the workload is a
program that is already there (installed, or from an earlier build) loading the new
library through LD_LIBRARY_PATH, or the target itself for an executable ({output}).
A program of the same build that links to the library is only there from the second
build on. Each first link is unordered; the ordered one replaces it in the same step.

Commands that are no link (compiles, queries) and links of other outputs run
unchanged and silently. A target link the launcher cannot order (a relocatable -r
link, a command link cannot read, a failed workload, an ordered link that fails)
keeps the build's own output and says so in one line (exit 1 with --strict).
"""


def add_arguments(p) -> None:
    p.add_argument("--target", action="append", metavar="NAME",
                   help="file name of an output to order (libx.so also names libx.so.1.2; repeatable); "
                        "default: every shared library the build links")
    p.add_argument("--profile-cmd", metavar="CMD",
                   help="the workload, one shell-quoted command line run under elflayout profile when the cache "
                        "holds no profile of this build ({output}: the target's path)")
    p.add_argument("--profile", metavar="FILE", help="use this profile instead of the cache (its build must match)")
    p.add_argument("--cache-dir", metavar="DIR",
                   help=f"where profiles are kept (default ${launch.CACHE_ENV}, else ~/.cache/elflayout/launch)")
    p.add_argument("--allow-stale-profile", action="store_true",
                   help="use a profile of another build of the target rather than refuse it or profile again")
    p.add_argument("--profile-options", metavar="OPTIONS", default="",
                   help="more options for elflayout profile, shell-quoted (e.g. '--data --timeout 60')")
    p.add_argument("--link-options", metavar="OPTIONS", default="",
                   help="more options for elflayout link, shell-quoted (e.g. '--split')")
    p.add_argument("--strict", action="store_true", help="fail the link (exit 1) when the output cannot be ordered")
    p.add_argument("command", nargs=argparse.REMAINDER, help="[--] LINK COMMAND ...")


def run(args) -> int:
    cmd = args.command[1:] if args.command[:1] == ["--"] else list(args.command)
    if not cmd:
        raise ElflayoutError("launch: no command given (put it after --)")
    if args.profile and args.profile_cmd:
        raise ElflayoutError("--profile: a fixed profile, so --profile-cmd would never run; give one of them")
    out = launch.link_output(cmd)
    target = out is not None and launch.is_target(cmd, out, args.target)
    new_map = _map_for(args, out, cmd) if target else None
    try:
        rc = _run(launch.with_map(cmd, new_map) if new_map else cmd)
        if rc or not target:
            return rc
        why = launch.unloadable(cmd) or _unreadable(cmd)
        if why:
            return _kept(args, out, why)
        ident = launch.identity(out)
        profile = _profile_of(args, out, cmd, ident, new_map)
    finally:
        if new_map:
            new_map.unlink(missing_ok=True)
    if profile is None:
        return 1 if args.strict else 0
    return _relink(args, out, cmd, profile)


def _map_for(args, out: str, cmd: list[str]) -> Path | None:
    """Where the target link also writes its link map, for a profile that sees code outside
    sized function symbols (crtbeginS.o's, assembler loops without .size): a temporary name
    in the cache, kept when a profile is recorded; None when no profile may be recorded, the
    command writes its own map, or its map option is unknown."""
    if args.profile or not args.profile_cmd or launch.unloadable(cmd) or launch.written_map(cmd):
        return None
    cache = Path(args.cache_dir) if args.cache_dir else launch.default_cache_dir()
    tmp = launch.map_file(cache, out)
    tmp = tmp.with_name(f".{tmp.name}.{os.getpid()}")
    if launch.with_map(cmd, tmp) is None:
        return None
    cache.mkdir(parents=True, exist_ok=True)
    return tmp


def _run(cmd: list[str]) -> int:
    try:
        r = subprocess.run(cmd)
    except FileNotFoundError:
        raise ElflayoutError(f"{cmd[0]}: command not found") from None
    return r.returncode if r.returncode >= 0 else 128 - r.returncode


def _unreadable(cmd: list[str]) -> str | None:
    from elflayout.order.link import parse_command

    try:
        parse_command(cmd, None)
    except ElflayoutError as e:
        return str(e)
    return None


def _say(msg: str) -> None:
    print("elflayout: launch: " + one_line(msg), file=sys.stderr)


def _kept(args, out: str, why: str) -> int:
    _say(f"{out}: linked unchanged (not ordered): {why}")
    return 1 if args.strict else 0


def _profile_of(args, out: str, cmd: list[str], ident: dict, new_map: Path | None) -> Path | None:
    """The profile to order ``out`` by: given, cached for this build, or recorded now;
    None (said in one line) when there is none."""
    if args.profile:
        state, refusal = launch.profile_state(Path(args.profile), ident)
        if state == "none":
            raise ElflayoutError(f"{args.profile}: no such profile")
        if state == "other" and not args.allow_stale_profile:
            _remove(out)
            raise ElflayoutError(f"{refusal}; {out} removed")
        return Path(args.profile)
    cache = Path(args.cache_dir) if args.cache_dir else launch.default_cache_dir()
    cached = launch.cache_file(cache, out)
    state, refusal = launch.profile_state(cached, ident)
    if state == "same" or (state == "other" and args.allow_stale_profile):
        _say(f"{out}: reusing {cached}" + (" (of another build: --allow-stale-profile)" if state == "other"
                                           else f" ({_build_of(ident)})"))
        return cached
    if not args.profile_cmd:
        if state == "other":
            _remove(out)
            raise ElflayoutError(f"{refusal}; {out} removed")
        _kept(args, out, f"no profile in {cache} and no --profile-cmd to record one")
        return None
    if state == "other":
        _say(f"{out}: profiling again: {refusal.split(' (use ')[0]}")
    return _record(args, out, cmd, cached, _link_map(cmd, cached, out, new_map))


def _link_map(cmd: list[str], cached: Path, out: str, new_map: Path | None) -> str | None:
    """The link map to profile with: the build's own, else the one the launcher added,
    moved next to the profile (which names it)."""
    if new_map is None:
        return launch.written_map(cmd)
    if not new_map.exists():
        return None
    kept = launch.map_file(cached.parent, out)
    os.replace(new_map, kept)
    return str(kept)


def _record(args, out: str, cmd: list[str], cached: Path, lmap: str | None) -> Path | None:
    """Profile ``out`` under the workload into the cache (replaced atomically)."""
    from elflayout.cli import verb_parser

    try:
        words = shlex.split(args.profile_cmd)
        opts = shlex.split(args.profile_options)
    except ValueError as e:
        raise ElflayoutError(f"--profile-cmd/--profile-options: {e}") from None
    if not words:
        raise ElflayoutError("--profile-cmd: no command")
    cached.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="elflayout-launch-") as td:
        env = []
        if launch.is_shared_link(cmd):
            libdir = launch.library_dir(out, Path(td) / "lib")
            path = ":".join(filter(None, [str(libdir), os.environ.get("LD_LIBRARY_PATH")]))
            env = ["--env", f"LD_LIBRARY_PATH={path}"]
        tmp = cached.with_name(f".{cached.name}.{os.getpid()}")
        parser, mod = verb_parser("profile")
        if lmap and "--map" not in opts and not any(o.startswith("--map=") for o in opts):
            env += ["--map", os.path.abspath(lmap)]
        pargs = parser.parse_args(["--target", os.path.abspath(out), *env, *opts, "-o", str(tmp), "--force",
                                   "--", *launch.workload(words, out)])
        _say(f"{out}: profiling with {shlex.join(words)} (once per build; the cache is {cached.parent})")
        try:
            with contextlib.redirect_stdout(sys.stderr):  # a build's link prints nothing on stdout
                rc = mod.run(pargs)
        except (ElflayoutError, Finding) as e:
            rc, why = 1, str(e)
        else:
            why = f"the workload failed (exit status {rc})"
        if rc:
            tmp.unlink(missing_ok=True)
            _kept(args, out, f"no profile: {why}")
            return None
        os.replace(tmp, cached)
    _say(f"{out}: profile kept as {cached}")
    return cached


def _relink(args, out: str, cmd: list[str], profile: Path) -> int:
    """Link again through ``elflayout link`` (its defaults) with ``profile``; keep the
    build's own output when that cannot be done."""
    from elflayout.cli import verb_parser

    try:
        opts = shlex.split(args.link_options)
    except ValueError as e:
        raise ElflayoutError(f"--link-options: {e}") from None
    with tempfile.TemporaryDirectory(prefix="elflayout-launch-") as td:
        plain = Path(td) / os.path.basename(out)
        shutil.copy2(out, plain)  # the profiled build: link checks the profile against it, and restores from it
        parser, mod = verb_parser("link")
        largs = parser.parse_args(["--profile", str(profile), "--lib", str(plain), *opts,
                                   *(["--allow-stale-profile"] if args.allow_stale_profile else []), "--", *cmd])
        try:
            with contextlib.redirect_stdout(sys.stderr):
                rc = mod.run(largs)
        except Finding as e:
            _say(f"{out}: linked with the ordering, but {e}")
            return 1 if args.strict else 0
        except ElflayoutError as e:
            rc, why = 1, str(e)
        else:
            why = f"the ordered link failed (exit status {rc})"
        if rc:
            shutil.copy2(plain, out)
            return _kept(args, out, why)
    return 0


def _build_of(ident: dict) -> str:
    """The build the output is, as the profile identifies it (a link without --build-id: its sha256)."""
    return f"build-id {ident['build_id']}" if ident["build_id"] else f"sha256 {ident['sha256'][:16]}"


def _remove(out: str) -> None:
    """A refused link leaves nothing behind: the build must not take it as done."""
    try:
        os.unlink(out)
    except FileNotFoundError:
        pass
