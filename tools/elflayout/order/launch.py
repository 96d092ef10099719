"""Library side of ``elflayout launch``: which commands a build hands the launcher are
links of a target, where profiles are kept between builds and whether one belongs to
the build just linked (the CLI in ``launch_cli`` runs the links and the other verbs)."""

from __future__ import annotations

import os
import re
from pathlib import Path

from elflayout.errors import ElflayoutError

CACHE_ENV = "ELFLAYOUT_LAUNCH_CACHE"
# a compiler driver given one of these compiles, preprocesses or answers a query: no link
_NOT_LINK = {"-c", "-S", "-E", "-M", "-MM", "--version", "-v", "-V", "-dumpversion", "-dumpfullversion",
             "-dumpmachine", "-dumpspecs", "--help", "-###"}
# a link whose output is no loadable file: nothing to order
_NOT_LOADABLE = {"-r", "--relocatable", "-Wl,-r", "-Wl,--relocatable", "-Ur"}
# compiler drivers that pass -Wl,-Map=F to the linker (gcc-12, x86_64-linux-gnu-gcc, clang-22, cc)
_DRIVER = re.compile(r"^(?:[A-Za-z0-9_]+(?:-[A-Za-z0-9_]+)*-)?(?:gcc|g\+\+|cc|c\+\+|clang|clang\+\+)"
                     r"(?:-\d+(?:\.\d+)*)?$")
# linkers whose -Map=F writes a map elflayout profile --map reads
_MAP_LINKERS = ("bfd", "gold", "lld")


def default_cache_dir() -> Path:
    """$ELFLAYOUT_LAUNCH_CACHE, else $XDG_CACHE_HOME/elflayout/launch (~/.cache/...)."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "elflayout" / "launch"


def link_output(cmd: list[str]) -> str | None:
    """The file a command writes when it is a link, None when it is no link (a compile, a
    query such as ``cc --version``) or names no output (``cc -Wl,--version``)."""
    out = None
    for i, a in enumerate(cmd[1:], 1):
        if a in _NOT_LINK or a.startswith(("-print-", "--print-")):
            return None
        if a == "-o" and i + 1 < len(cmd):
            out = cmd[i + 1]
        elif a.startswith("-o") and len(a) > 2 and not a.startswith("-o-"):
            out = a[2:]
        elif a.startswith("--output="):
            out = a.split("=", 1)[1]
    return out


def is_shared_link(cmd: list[str]) -> bool:
    return any(a in ("-shared", "-Wl,-shared", "--shared", "-Wl,--shared") for a in cmd[1:])


def is_target(cmd: list[str], output: str, targets: list[str] | None) -> bool:
    """Whether the link writing ``output`` is one to order: its file name is a ``targets``
    name, or that name plus a version (``libz.so`` names ``libz.so.1.3``); without
    ``targets``, every shared-library link."""
    name = os.path.basename(output)
    if targets:
        return any(name == t or name.startswith(t + ".") for t in targets)
    return is_shared_link(cmd)


def unloadable(cmd: list[str]) -> str | None:
    """Why the link's output cannot be ordered by a relink, or None."""
    hit = next((a for a in cmd[1:] if a in _NOT_LOADABLE), None)
    return f"{hit}: a relocatable link (its output is linked again later)" if hit else None


def cache_file(cache: Path, output: str) -> Path:
    """The cached profile of the link writing ``output`` (keyed by its file name)."""
    return cache / f"{os.path.basename(output)}.profile.json"


def map_file(cache: Path, output: str) -> Path:
    """The link map of the link writing ``output``, kept next to its profile."""
    return cache / f"{os.path.basename(output)}.map"


def written_map(cmd: list[str]) -> str | None:
    """The link map the build's own command already writes, if any."""
    from elflayout.order.link import map_of

    return map_of(cmd)


def with_map(cmd: list[str], path: Path) -> list[str] | None:
    """``cmd`` also writing the link map ``path`` (a map changes no byte of the output):
    ``-Wl,-Map=`` for a gcc or clang driver, ``-Map=`` for ld.bfd, ld.gold or ld.lld; None
    for a program or linker whose map option is not known."""
    from elflayout.toolchain import chosen_linker, default_linker

    try:
        linker, _, driver = chosen_linker(cmd)
    except ElflayoutError:
        return None
    if driver:
        if not _DRIVER.match(os.path.basename(cmd[0])) or (linker or default_linker()) not in _MAP_LINKERS:
            return None
        return [*cmd, f"-Wl,-Map={path}"]
    return [*cmd, f"-Map={path}"] if linker in _MAP_LINKERS else None


def identity(path: str) -> dict:
    from elflayout.elfcore import ElfImage

    with ElfImage(path) as img:
        return img.identity()


def profile_state(profile: Path, ident: dict) -> tuple[str, str | None]:
    """Whether ``profile`` belongs to the build ``ident``: ("same", None), ("other", the
    refusal naming both build-ids) or ("none", None) when there is no profile."""
    from elflayout.order.profile_input import check_identity, load_profile, pick_target

    if not profile.exists():
        return "none", None
    t = pick_target(load_profile(profile), profile, None)
    try:
        check_identity(t, ident, profile, allow_stale=False)
    except ElflayoutError as e:
        return "other", str(e)
    return "same", None


def library_dir(output: str, dest: Path) -> Path:
    """A directory for LD_LIBRARY_PATH in which the just-linked ``output`` answers to its
    SONAME (the build makes that link later, or never): the workload loads this build."""
    from elflayout.elfcore import ElfImage
    from elflayout.layouts import DT_SONAME

    dest.mkdir(parents=True, exist_ok=True)
    real = os.path.abspath(output)
    with ElfImage(output) as img:
        names = {os.path.basename(output)} | {img.dt_string(v) for t, v in img.dynamic if t == DT_SONAME}
    for n in names:
        os.symlink(real, dest / n)
    return dest


def workload(words: list[str], output: str) -> list[str]:
    """The profile command with ``{output}`` (an executable target's own path) filled in."""
    return [w.replace("{output}", os.path.abspath(output)) for w in words]
